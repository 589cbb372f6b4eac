"""Saved benchmark runs from other tools (and arms of stored abserve runs), read as one shape so
``abserve compare`` can judge a candidate side against a baseline side without pairing."""
