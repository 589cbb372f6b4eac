"""A vLLM server's command line as the build's flags: what the ledger compares between builds.

The recorded command line (``ArmProvenance.server_args``) holds values that differ from run to run
without the build changing: the loopback host and the random port abserve picked, the model's
path on this machine, an API key. Compared token by token, two sign-offs of one build read as
"``--port``: added ``50175``, removed ``55979``". ``server_flags`` groups each flag with its values
(the tokens up to the next ``--flag``; ``--flag=value`` read as ``--flag value``), so a value is
never taken for a flag of its own, and leaves those per-run flags out.
"""

from __future__ import annotations

from collections.abc import Sequence

from abserve.model.arms import OWNED_FLAGS

# Flags whose values are the run's, not the build's: abserve's own (host, port, model path and
# served name: ``OWNED_FLAGS``) and a key the server may be given.
PER_RUN_FLAGS = OWNED_FLAGS | {"--api-key"}


def server_flags(argv: Sequence[str]) -> list[str]:
    """``argv`` as ``--flag value...`` items in order, less ``PER_RUN_FLAGS``."""
    items: list[str] = []
    for token in argv:
        if token.startswith("--"):
            items.append(token.replace("=", " ", 1))
        elif items:
            items[-1] = f"{items[-1]} {token}"
        else:  # a value before any flag (a positional model name): an item of its own
            items.append(token)
    return [item for item in items if item.split(" ", 1)[0] not in PER_RUN_FLAGS]
