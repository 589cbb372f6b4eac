"""The release ledger: every sign-off as an entry in the run's store, a static site over them,
and the accepted baseline of each config (``abserve ledger``, ``abserve accept``)."""
