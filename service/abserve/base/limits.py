"""Defaults that the load generator and the judgment share, so they cannot disagree.

``MAX_ERROR_RATE``: the share of failed requests above which a run is invalid (every shipped
policy's ``max_error_rate``, ``abserve.compare.policy.Policy``) and above which the load stops
early (``abserve load --max-error-rate``, a config's ``load.max_error_rate``): a load that goes
on past it only sends requests to a run that can no longer pass.
"""

from __future__ import annotations

from typing import Final

MAX_ERROR_RATE: Final = 0.02
