"""One exit-code contract for every ``abserve`` subcommand, so a CI job can gate on any of them.

0-3 are verdicts (what the judged run says); 4 and above are the tool's own errors, so a crash
or a mistyped option can never read as FAIL or INCONCLUSIVE:

- 0 pass, 1 fail, 2 inconclusive or marginal, 3 invalid (the run could not be judged);
- 4 usage error or refused input (an unknown option, a config or setting that does not load,
  a check or preflight that refuses, a store or run that does not exist);
- 5 the tool crashed (an unexpected exception; one line on stderr, the traceback in a log);
- 130 interrupted (Ctrl-C).

Commands that reach no verdict (``router``, ``load``, ``check``, ``combine``...) exit 0 on
success and 4 or 5 otherwise; ``load`` reports a load that ran but breached its error limit or
lost a worker as 6 and 7 (the run recorded them; ``abserve run`` judges that run invalid).
"""

from __future__ import annotations

from typing import Final

PASS: Final = 0
FAIL: Final = 1
INCONCLUSIVE: Final = 2
INVALID: Final = 3
USAGE: Final = 4
CRASH: Final = 5
LOAD_ERROR_RATE: Final = 6
LOAD_WORKER_LOST: Final = 7
INTERRUPTED: Final = 130

MEANING: Final[dict[int, str]] = {
    PASS: "pass",
    FAIL: "fail",
    INCONCLUSIVE: "inconclusive or marginal",
    INVALID: "invalid",
    USAGE: "usage error or refused input",
    CRASH: "crash (see the log named on stderr)",
    LOAD_ERROR_RATE: "load: error rate over the limit",
    LOAD_WORKER_LOST: "load: a worker was lost",
    INTERRUPTED: "interrupted",
}


def is_verdict(code: int) -> bool:
    """Whether CODE is a verdict (0-3) rather than the tool's own error."""
    return PASS <= code <= INVALID
