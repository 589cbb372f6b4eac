"""The shared statistics of the judgment: pure functions of numbers, no policy, no verdict.

- ``interval``: an estimate with its interval;
- ``paired``: paired statistics (Hodges–Lehmann shifts, bootstrap quantile differences,
  binomial intervals, the noise-floor test, the Theil–Sen trend);
- ``two_sample``: unpaired two-sample intervals (saved runs of other tools);
- ``anytime``: anytime-valid intervals for a regression fit, valid at every look;
- ``ols_path``: the running fit of a sequential run, look by look;
- ``prefix_order``: the order statistics of a growing prefix.

Every module above (the gates, the fixed and sequential judgments, capacity, the policy) may
import these; none of these imports them (``.importlinter``: the judgment's rooms).
"""
