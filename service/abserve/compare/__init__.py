"""The judgment of an A/B run: pure functions from records to a ``Judgment``.

``judge(run, exchanges, policy)`` is the entry point; ``load_policy`` reads a policy YAML.
No module here does I/O other than ``load_policy`` reading its file.
"""

from abserve.compare.equality import EqualityClass, PairResult, compare_pair
from abserve.compare.judge import judge
from abserve.compare.model import EXIT_CODES, JUDGMENT_SCHEMA_VERSION, Judgment
from abserve.compare.policy import Policy, PolicyError, load_policy

__all__ = [
    "EXIT_CODES",
    "JUDGMENT_SCHEMA_VERSION",
    "EqualityClass",
    "Judgment",
    "PairResult",
    "Policy",
    "PolicyError",
    "compare_pair",
    "judge",
    "load_policy",
]
