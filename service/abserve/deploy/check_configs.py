"""The configs ``scripts/compose-check.sh`` (and ``scripts/compose-faults.sh``) derive from
``configs/cpu-compose.yaml`` for their steps, in one place.

The script writes each with ``python -m abserve.deploy.check_configs STEP`` and the unit test
``tests/unit/deploy/test_documented_configs.py`` builds the same files and runs ``abserve
check`` on each, so a step whose config would be refused (the reachability check, issue 57:
the three-arm step's plan could not decide a required gate) fails a fast test, not a
ten-minute stack run. Each config is written where the stack mounts it
(``configs/local/compose-check/`` of ``root``, a folder git ignores), its traffic files under
``traffic/compose-check/``; ``derive`` returns the config's path.

- ``arms3``: a third candidate ``hybrid`` (lookup hybrid), the router's arms derived from
  ``arms:`` (no router entry, as a user adds an arm); 40 requests, so its plan can decide the
  GPU policy's required shift gates (30 pairs after the 10 warm-up requests).
- ``decide``: a family on one core, b identical to a, ``drop`` the drop-straddle mutant;
  sequential under a budget (the self-test's policy).
- ``text-only``: arms without a lookup replaying a text-only traffic file; sequential.
- ``concurrency``: identical arms (both linear) under 4 closed-loop users.
- ``faults``: 48 requests per profile, so a fault lands mid-load.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from abserve.base import module_cli

BASE = Path("configs/cpu-compose.yaml")
DERIVED = Path("configs/local/compose-check")
TRAFFIC = Path("traffic/compose-check")
TEXT_ONLY = TRAFFIC / "text-only.jsonl"

Edit = Callable[[dict[str, Any], Path], None]


def _sequential(raw: dict[str, Any]) -> None:
    """The decisive design both sequential steps share: a small round (8 blocks of the profile's
    requests), at least 2 rounds, the self-test's policy (A/A' decided in ~60 requests on one
    core), a budget the decision fits well within; the router's arms derived from ``arms:``."""
    raw["router"].pop("arms", None)
    raw["blocks"] = {"count": 8, "order": "fixed", "warmup_requests": 4}
    raw["budget"] = {"seconds": 420, "min_rounds": 2}
    raw["policy"] = "configs/policy/selftest.yaml"


def _arms3(raw: dict[str, Any], root: Path) -> None:
    raw["arms"]["hybrid"] = {"lookup": "hybrid", "role": "candidate"}
    raw["router"].pop("arms", None)  # no router entry for hybrid: derived from arms:
    for item in raw["load"]["profiles"]:  # 10 warm-up + 30 pairs: the policy's min_samples
        item["requests"] = 20


def _decide(raw: dict[str, Any], root: Path) -> None:
    _sequential(raw)
    raw["arms"] = {"a": {"lookup": "linear", "role": "baseline"},
                   "b": {"lookup": "linear", "role": "candidate"},
                   "drop": {"lookup": "linear", "mutant": "drop-straddle", "role": "candidate"}}
    raw["load"] = {"users": 1, "seed": 1, "profiles": [{"profile": "many-items", "requests": 64, "set": {
        "images.count": [8, 32], "text.words": [8, 32], "max_tokens": 16}}]}


def _text_only(raw: dict[str, Any], root: Path) -> None:
    write_text_only(root / TEXT_ONLY)
    _sequential(raw)
    raw["arms"] = {"a": {"role": "baseline"}, "b": {"role": "candidate"}}
    raw["load"] = {"users": 1, "profiles": [{"kind": "file", "requests": 96, "profile": "file-text-only",
                                             "file": {"path": "../../../" + TEXT_ONLY.as_posix(),
                                                      "replay": "closed"}}]}


def _concurrency(raw: dict[str, Any], root: Path) -> None:
    raw["arms"]["b"]["lookup"] = "linear"
    raw["load"]["users"] = 4


def _faults(raw: dict[str, Any], root: Path) -> None:
    # under the one orchestrator 16 requests are sent within seconds, before a fault could land
    for item in raw["load"]["profiles"]:
        item["requests"] = 48


# step -> (file and config name, edit of configs/cpu-compose.yaml's raw mapping)
STEPS: dict[str, tuple[str, Edit]] = {
    "arms3": ("cpu-compose-3arms", _arms3),
    "decide": ("cpu-compose-decide", _decide),
    "text-only": ("cpu-compose-text", _text_only),
    "concurrency": ("cpu-compose-concurrency", _concurrency),
    "faults": ("cpu-compose-faults", _faults),
}


def write_text_only(path: Path) -> None:
    """96 text-only OpenAI chat requests (JSON Lines), streamed, 16 tokens each."""
    rng = random.Random(7)
    words = "the a gather window image token step chunk lookup scan bisect server request arm".split()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for i in range(96):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 120)))
            out.write(json.dumps({"model": "tiny-llava", "temperature": 0, "max_tokens": 16, "stream": True,
                                  "messages": [{"role": "user", "content": f"{i}: {text}"}]}) + "\n")


def derive(step: str, root: Path = Path(".")) -> Path:
    """Write ``step``'s config (and its traffic files) under ``root``; return the config's path."""
    name, edit = STEPS[step]
    raw = yaml.safe_load((root / BASE).read_text())
    raw["name"] = name
    edit(raw, root)
    out = root / DERIVED / f"{name}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


app = module_cli.app_of()


@app.command()
def write(step: Annotated[str, typer.Argument(help=f"one of {', '.join(STEPS)}")],
          root: Annotated[Path, typer.Option(help="the checkout")] = Path(".")) -> None:
    """Write the config compose-check's STEP runs (from configs/cpu-compose.yaml) and print its path."""
    if step not in STEPS:
        print(f"check_configs: unknown step {step!r} (steps: {', '.join(STEPS)})")
        raise typer.Exit(2)
    print(derive(step, root))


def main(argv: list[str] | None = None) -> int:
    """Write the config compose-check's STEP runs and print its path."""
    return module_cli.run(app, argv, "python -m abserve.deploy.check_configs")


if __name__ == "__main__":
    raise SystemExit(main())
