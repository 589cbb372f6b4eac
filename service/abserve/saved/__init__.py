"""Saved benchmark runs from other tools (and arms of stored abserve runs), read as one shape so
``abserve compare`` can judge a candidate side against a baseline side without pairing.

``open_saved(source, db)`` picks the reader from the content (``abserve.saved.sources``) and
returns a ``SavedRun``: its header, then its requests streamed (``abserve.saved.model``).
"""

from abserve.saved.model import SavedRequest, SavedRun, SavedRunError, SavedRunHeader, Tool
from abserve.saved.sources import open_saved

__all__ = ["SavedRequest", "SavedRun", "SavedRunError", "SavedRunHeader", "Tool", "open_saved"]
