"""The environment that `docker compose` needs, derived from one experiment config.

`docker-compose.yml` takes every value its services need from environment variables: the
model the arms serve, the vLLM server arguments, which arms run, each arm's base image, extra
args, lookup and mutant, and the config its ``orchestrator`` service runs (``abserve run
--target compose``, the same orchestrator as on the CPU path: rounds, early stop, traffic
files, proofs and the report are its own; ``abserve.arms.compose_target``). This module
reads the config with the one reader of experiment files (``abserve.config.load_experiment``:
``extends:``, packaged names and paths relative to the file, exactly as ``abserve check``),
checks that it fits the compose file and renders the variables as an env file for ``docker
compose --env-file``. ``scripts/signoff.sh`` runs it as ``python -m
abserve.deploy.compose_env CONFIG``.

What compose runs per arm: an image (``image:``, else the host's shared
``ABSERVE_VLLM_IMAGE``), extra vLLM args appended after ``server.args`` (the last occurrence
wins, as under ``abserve run``), and optionally a lookup and a test-only mutant. An arm
without ``lookup:`` runs vLLM untouched and is proven by what identifies it (its vLLM
version, command line and image: ``abserve.runs.provenance``). Compose cannot run a
per-arm environment (it interpolates one environment for every service), a Python
environment or an endpoint: each is refused with the alternative named. An arm ``from:
accepted`` is the accepted release's image, resolved from the ledger before anything is built
(``abserve.deploy.compose_accepted``; ``main`` reads the store ``--db`` or
``ABSERVE_DATABASE_URL`` names, and exits 4 when nothing is accepted). Router arms are
derived from ``arms:`` (the service URL ``http://vllm-<arm>:8000``); a ``router.arms`` given
must say the same. Every file the run reads (the files of the ``extends`` chain, the policy,
traffic files) must lie in a folder the stack mounts: this checkout's ``configs/`` or
``traffic/``, or be a packaged config (inside abserve in every image).

Any number of candidate arms: ``docker-compose.yml`` has services for the arms ``a``, ``b``
and ``a2``, so that a plain ``docker compose up`` runs; every other arm gets a service
``vllm-<arm>`` of its own from a generated compose file, ``python -m
abserve.deploy.compose_env --arms-compose CONFIG < COMPOSE_FILE`` (``extra_arms_compose``):
that file's ``vllm-b`` with b's names made the arm's, plus the orchestrator waiting for it.
``scripts/signoff.sh`` writes one per compose file and appends them to ``COMPOSE_FILE``.
Pure apart from ``main``.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any, ClassVar

import typer
import yaml
from pydantic import model_validator

from abserve.arms.compose_target import ARM_PORT, arm_url
from abserve.base import exit_codes, module_cli
from abserve.base.packaged import packaged_root, resolve_config
from abserve.base.yamlfile import YamlFileError, extends_chain
from abserve.config import ExperimentConfig, LoadItem, load_experiment_as
from abserve.deploy.compose_accepted import DATABASE_ENV, resolve_accepted_image
from abserve.ledger.baseline import NoAcceptedBuild
from abserve.model.arms import REFERENCE, ArgValue, ArmConfig, render_args

# The arms docker-compose.yml has services for (vllm-a, vllm-b, vllm-a2). Any other arm gets
# its service from the generated file of extra_arms_compose. No arm has a default lookup: an
# arm runs a lookup (or a mutant) only when its config says so.
STATIC_ARMS = ("a", "b", "a2")
# The folders of this checkout the stack mounts (read-only) into its abserve containers.
MOUNTED = ("configs", "traffic")
# An extra arm's name: its service vllm-<name> and its variables' suffix <NAME> must be valid.
ARM_NAME = re.compile(r"^[a-z][a-z0-9]{0,15}$")
TEMPLATE_ARM = "b"  # the service an extra arm's is made from, in each compose file
NOISE_FLOOR_PROFILE = "noise-floor"  # compose profile that enables vllm-a2
# Server environment the compose file passes to every arm (x-vllm-env). Not
# CUBLAS_WORKSPACE_CONFIG: vLLM sets its own under batch invariance, so a config's value would
# be recorded but not used.
PASSED_ENV = frozenset(
    {"VLLM_BATCH_INVARIANT", "VLLM_USE_V2_MODEL_RUNNER", "PYTHONHASHSEED", "ABSERVE_MM_LOOKUP_SCOPE"}
)
# Flags compose sets itself (per host or for security) and a config must not repeat.
COMPOSE_OWNED_FLAGS = frozenset(
    {"--host", "--port", "--served-model-name", "--gpu-memory-utilization",
     "--allowed-media-domains", "--model"}
)
FORBIDDEN_FLAGS = frozenset({"--allowed-local-media-path"})
# Arm keys compose cannot honour, and what to do instead.
NOT_FOR_COMPOSE = {
    "python": "docker compose runs each arm from an image (image: REF), not from a Python "
              "environment; run this config with `abserve run`",
    "venv": "docker compose runs each arm from an image (image: REF), not from a venv; run this "
            "config with `abserve run`",
    "install": "docker compose runs each arm from an image (image: REF); run this config with "
               "`abserve run`",
    "cpus": "compose places arms with ABSERVE_GPU_<ARM> in .env (GPU ids; CPU cores under the "
            "CPU override)",
    "url": "the compose router's arms are its own services (http://vllm-<arm>:8000); judge a "
           "running endpoint with `abserve run`",
    "api_key_env": "compose arms are its own services on an internal network, without keys",
    "mutant_env": "docker-compose.yml passes a mutant's name only (ABSERVE_MUTANT_<ARM>), with "
                  "its default settings; tune a mutant with `abserve run`",
    "env": "docker-compose.yml passes one environment to every arm (x-vllm-env); put the "
           f"variable under server.env (one of {sorted(PASSED_ENV)}), express the change as a vLLM "
           "flag in the arm's args:, bake it into the arm's image:, or run the config with "
           "`abserve run` (per-arm env works there)",
}
IMAGE_REF = re.compile(r"^[a-z0-9][a-z0-9._/:@-]{0,254}$", re.IGNORECASE)
__all__ = ["ARM_PORT", "ArgValue", "ComposeExperiment", "LoadItem", "arm_url", "compose_arms",
           "compose_env", "extra_arms", "extra_arms_compose", "load_experiment", "render_args"]


class ComposeExperiment(ExperimentConfig):
    """An experiment config (``abserve.config``, the one schema) that also fits the compose file:
    arms are its services, each with an image, args, lookup and mutant compose can run; the
    router's arms, when given, are the services' URLs; every file it reads is mounted. Checked
    on the raw mapping first, so the compose reason is the one given."""

    v2_runner_default: ClassVar[bool] = True  # docker-compose.yml: ${VLLM_USE_V2_MODEL_RUNNER:-1}

    @model_validator(mode="before")
    @classmethod
    def _fits_compose(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        server = data.get("server") or {}
        _check_compose_args("server.args", server.get("args") or {})
        unknown = sorted(set(server.get("env") or {}) - PASSED_ENV)
        if unknown:
            raise ValueError(f"docker-compose.yml does not pass {unknown}; passed: {sorted(PASSED_ENV)}")
        arms = data.get("arms") or {}
        for arm in ("a", "b"):
            if arm not in arms:
                raise ValueError(f"arm {arm!r} is required: docker-compose.yml's arms are vllm-a and "
                                 "vllm-b, then any others")
        for arm, spec in arms.items():
            if arm not in STATIC_ARMS and not ARM_NAME.match(str(arm)):
                raise ValueError(f"arm {arm!r}: not a compose arm name (a lower-case letter, then up "
                                 "to 15 lower-case letters or digits: its service is vllm-<arm>)")
            if isinstance(spec, dict):
                _check_arm(arm, spec, server.get("args") or {})
        _check_router_arms(arms, (data.get("router") or {}).get("arms"))
        if not (data.get("model") or {}).get("id"):
            raise ValueError("model.id (the hub model compose serves) is required")
        return data

    @model_validator(mode="after")
    def _files_are_mounted(self) -> ComposeExperiment:
        named = [("policy", self.policy)]
        named += [(f"traffic file of {item.profile!r}", Path(item.file.path))
                  for item in self.load.profiles if item.file is not None]
        for what, path in named:
            if not mounted(path):
                raise ValueError(f"{what} {path} is outside the folders docker compose mounts "
                                 f"({', '.join(f'{m}/' for m in MOUNTED)} of this checkout): move it "
                                 "there (traffic/ is ignored by git)")
        return self


def mounted(path: Path, root: Path | None = None) -> bool:
    """Whether the stack's abserve containers see ``path``: under a mounted folder of the
    checkout at ``root`` (default: the current directory), or a packaged config."""
    resolved = (root or Path.cwd()).joinpath(path).resolve()
    roots = [(root or Path.cwd()).resolve() / folder for folder in MOUNTED] + [packaged_root().resolve()]
    return any(resolved.is_relative_to(folder) for folder in roots)


def _check_router_arms(arms: dict[str, Any], router_arms: Any) -> None:
    """``router.arms`` may be left out (derived from ``arms:``); given, it must say the same."""
    if router_arms is None:
        return
    given = dict(router_arms or {})
    for arm in arms:
        if arm not in given:
            raise ValueError(f"arm {arm} has no router entry: add {arm}: {{url: {arm_url(arm)!r}}} under "
                             "router.arms, or leave router.arms out (it is derived from arms:)")
    for arm, spec in given.items():
        if arm not in arms:
            raise ValueError(f"router.arms.{arm} names no arm of arms: ({', '.join(arms)})")
        if (spec or {}).get("url") != arm_url(arm):
            raise ValueError(f"router.arms.{arm}.url must be {arm_url(arm)!r} (the compose service), "
                             "or leave router.arms out")


def _check_arm(arm: str, spec: dict[str, Any], server_args: dict[str, Any]) -> None:
    """What compose can run for one arm: an image, extra args, a lookup (see the docstring)."""
    for key, why in NOT_FOR_COMPOSE.items():
        if spec.get(key) not in (None, {}, []):
            raise ValueError(f"arm {arm!r}: {key}: cannot apply under docker compose: {why}")
    image = spec.get("image")
    if image is not None and not (isinstance(image, str) and IMAGE_REF.match(image)):
        raise ValueError(f"arm {arm!r}: image {image!r} is not an image reference "
                         "(name[:tag][@sha256:digest])")
    args = spec.get("args") or {}
    _check_compose_args(f"arms.{arm}.args", args)
    for flag, value in args.items():
        if value is False and server_args.get(flag) not in (None, False):
            raise ValueError(
                f"arms.{arm}.args: {flag}: false cannot undo server.args' {flag} (an arm's args "
                "are appended and the last occurrence wins): use the flag's negative form "
                "(--no-...) or move the flag out of server.args into each arm")


def _check_compose_args(where: str, args: dict[str, Any]) -> None:
    for flag, value in args.items():
        name = flag.split("=", 1)[0].split(".", 1)[0]
        if name in FORBIDDEN_FLAGS:
            raise ValueError(f"{name} is forbidden: it lets requests read the server's files")
        if name in COMPOSE_OWNED_FLAGS:
            raise ValueError(f"{name} is set by docker-compose.yml (see .env.example)")
        if isinstance(value, str) and REFERENCE.match(value):
            raise ValueError(f"{where}: {flag} is a ${{VAR}} reference: compose_env writes args "
                             "into an env file as they are and never resolves (or stores) a secret "
                             "there; a server under compose cannot take a secret as a flag")


def compose_env(experiment: ExperimentConfig, config_path: str) -> dict[str, str]:
    """The compose variables of one experiment (``config_path`` relative to the repo root),
    its arms ``from: accepted`` resolved (``compose_accepted``): compose builds what it names."""
    if unresolved := sorted(experiment.from_ledger()):
        raise ValueError(f"arms {unresolved}: from: accepted is not resolved (resolve_accepted_image)")
    env = {
        "ABSERVE_CONFIG": config_path,
        "ABSERVE_MODEL": experiment.model.id or "",
        "ABSERVE_MODEL_REVISION": experiment.model.revision or "main",
        "ABSERVE_SERVED_MODEL_NAME": experiment.model.served_name,
        "VLLM_SERVER_ARGS": shlex.join(render_args(experiment.server.args)),
        "COMPOSE_PROFILES": NOISE_FLOOR_PROFILE if "a2" in experiment.arms else "",
        # The arms prepare-run.sh lays out: exactly the config's.
        "ABSERVE_ARMS": " ".join(compose_arms(experiment)),
    }
    for arm in [*STATIC_ARMS, *extra_arms(experiment)]:
        env |= arm_env(arm, experiment.arms.get(arm))
    env.update(experiment.server.env)
    return env


def compose_arms(experiment: ExperimentConfig) -> list[str]:
    """The config's arms in compose's order: a, b, a2 (those it has), then the others."""
    return [arm for arm in STATIC_ARMS if arm in experiment.arms] + extra_arms(experiment)


def extra_arms(experiment: ExperimentConfig) -> list[str]:
    """The config's arms that docker-compose.yml has no service for, in the config's order."""
    return [arm for arm in experiment.arms if arm not in STATIC_ARMS]


class _Tagged:
    """A compose YAML tag (``!reset``, ``!override``) kept through a load and a dump."""

    def __init__(self, tag: str, value: Any) -> None:
        self.tag, self.value = tag, value


class _ComposeLoader(yaml.SafeLoader):
    pass


class _ComposeDumper(yaml.SafeDumper):
    pass


def _construct_tagged(loader: yaml.SafeLoader, node: yaml.Node) -> _Tagged:
    if isinstance(node, yaml.MappingNode):
        value: Any = loader.construct_mapping(node, deep=True)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_scalar(node)  # type: ignore[arg-type]
    return _Tagged(node.tag, value)


def _represent_tagged(dumper: yaml.SafeDumper, data: _Tagged) -> yaml.Node:
    if isinstance(data.value, dict):
        return dumper.represent_mapping(data.tag, data.value)
    if isinstance(data.value, list):
        return dumper.represent_sequence(data.tag, data.value)
    return dumper.represent_scalar(data.tag, str(data.value or "null"))


for _tag in ("!reset", "!override"):
    _ComposeLoader.add_constructor(_tag, _construct_tagged)
_ComposeDumper.add_representer(_Tagged, _represent_tagged)


def _rename(value: Any, arm: str) -> Any:
    """``value`` (part of the template arm's service) with the template's names made ``arm``'s."""
    if isinstance(value, _Tagged):
        return _Tagged(value.tag, _rename(value.value, arm))
    if isinstance(value, dict):
        return {_rename(k, arm): _rename(v, arm) for k, v in value.items()}
    if isinstance(value, list):
        return [_rename(v, arm) for v in value]
    if not isinstance(value, str):
        return value
    suffix, template = arm.upper(), TEMPLATE_ARM.upper()
    value = re.sub(rf"(?<=[A-Z0-9])_{template}(?![A-Za-z0-9_])", f"_{suffix}", value)
    value = re.sub(rf"\bvllm-cache-{TEMPLATE_ARM}\b", f"vllm-cache-{arm}", value)
    value = re.sub(rf"\bvllm-{TEMPLATE_ARM}\b", f"vllm-{arm}", value)
    return re.sub(rf"/telemetry/{TEMPLATE_ARM}(?=[:/]|$)", f"/telemetry/{arm}", value)


def extra_arms_compose(experiment: ExperimentConfig, compose_text: str) -> str:
    """The generated compose file that gives each extra arm (``extra_arms``) its service, made
    from one compose file of the stack (``compose_text``): that file's ``vllm-b`` with b's names
    made the arm's; in a file that has them, also the orchestrator waiting for the arm
    (healthy), and its own vLLM cache volume. Each arm starts after the one
    before it (on a GPU host vLLM sizes its KV cache from the memory free at start); a file
    that overrides the start order (the CPU override's ``depends_on: !override``) keeps its own.
    Empty when there are no extra arms or the file has no ``vllm-b``."""
    extras = extra_arms(experiment)
    source = yaml.load(compose_text, Loader=_ComposeLoader) or {}  # a SafeLoader, with compose tags
    services = source.get("services") or {}
    template = services.get(f"vllm-{TEMPLATE_ARM}")
    if not extras or not isinstance(template, dict):
        return ""
    out: dict[str, Any] = {"services": {}}
    static = [arm for arm in compose_arms(experiment) if arm in STATIC_ARMS]
    previous = f"vllm-{static[-1]}"
    for arm in extras:
        service = _rename(template, arm)
        if isinstance(service.get("depends_on"), dict):  # the GPU start order: after the one before
            service["depends_on"] = {previous: {"condition": "service_healthy"}}
        service.pop("profiles", None)
        out["services"][f"vllm-{arm}"] = service
        previous = f"vllm-{arm}"
    orchestrator_deps = (services.get("orchestrator") or {}).get("depends_on")
    if isinstance(orchestrator_deps, dict) and f"vllm-{TEMPLATE_ARM}" in orchestrator_deps:
        out["services"]["orchestrator"] = {"depends_on": {f"vllm-{arm}": {"condition": "service_healthy"}
                                                          for arm in extras}}
    if f"vllm-cache-{TEMPLATE_ARM}" in (source.get("volumes") or {}):
        out["volumes"] = {f"vllm-cache-{arm}": {} for arm in extras}
    header = ("# Generated by abserve.deploy.compose_env --arms-compose for this run's extra arms "
              f"({' '.join(extras)}): each is vllm-{TEMPLATE_ARM} of the compose file it was made "
              "from, with its own names. Do not edit.\n")
    return header + yaml.dump(out, Dumper=_ComposeDumper, sort_keys=False, width=1000)


def arm_env(arm: str, spec: ArmConfig | None) -> dict[str, str]:
    """One arm's compose variables; empty ones fall back to the compose file's shared default
    (so a value left in .env from another experiment never leaks into this one)."""
    suffix = arm.upper()
    image = spec.image if spec is not None else None
    return {
        f"ABSERVE_VLLM_IMAGE_{suffix}": image or "",
        f"ABSERVE_VLLM_TAG_{suffix}": image_tag(image) if image else "",
        f"VLLM_ARM_ARGS_{suffix}": shlex.join(render_args(spec.args)) if spec is not None else "",
        f"ABSERVE_LOOKUP_{suffix}": (spec.lookup or "") if spec is not None else "",
        f"ABSERVE_MUTANT_{suffix}": (spec.mutant or "") if spec is not None else "",
    }


def image_tag(image: str) -> str:
    """The tag of abserve/vllm-<arm> built from ``image``: the reference made a valid Docker tag
    (readable) plus 8 hex digits of its hash, so two references never share a tag."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", image).strip("-.")[:119]
    return f"{readable}-{hashlib.sha256(image.encode()).hexdigest()[:8]}"


def render_env_file(env: dict[str, str]) -> str:
    """``KEY=value`` lines that compose reads literally (values are never re-quoted)."""
    lines = []
    for key, value in env.items():
        if "\n" in value or value[:1] in {"'", '"'} or "$" in value or " #" in value:
            raise ValueError(f"{key}: value cannot be written literally to an env file: {value!r}")
        lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"


def load_experiment(path: Path) -> ComposeExperiment:
    """Read and check an experiment config for compose, with the one reader of experiment
    files (``abserve.config.load_experiment``: ``extends:``, packaged names, relative paths);
    every file its ``extends`` chain reads must be mounted too (a packaged one is)."""
    experiment = load_experiment_as(path, ComposeExperiment)
    for parent in extends_chain(resolve_config(path))[1:]:
        if not mounted(parent):
            raise ValueError(f"{path}: extends {parent}, which is outside the folders docker compose "
                             f"mounts ({', '.join(f'{m}/' for m in MOUNTED)} of this checkout): move it "
                             "there, or extend a packaged config by name")
    return experiment


def arm_images(experiment: ExperimentConfig, resolved_compose: str) -> dict[str, str]:
    """Each arm's image as the resolved compose file (``docker compose config``) runs it: the
    arm's own build under docker-compose.yml, the CPU override's runtime image under it."""
    services = (yaml.safe_load(resolved_compose) or {}).get("services") or {}
    return {arm: str((services.get(f"vllm-{arm}") or {}).get("image", "unknown"))
            for arm in compose_arms(experiment)}


app = module_cli.app_of()


@app.command()
def derive(
    config: Annotated[Path, typer.Argument(
        help="an experiment config under configs/ or traffic/, relative to the repo root")],
    arms_compose: Annotated[bool, typer.Option(
        "--arms-compose", help="print the compose file of the config's extra arms, made from the "
                               "compose file on stdin (empty when there are none)")] = False,
    images_asked: Annotated[bool, typer.Option(
        "--arm-images", help="print ARM=IMAGE for each arm of the config, from the resolved "
                             "compose file on stdin (`docker compose config`)")] = False,
    db: Annotated[str | None, typer.Option(
        "--db", envvar=DATABASE_ENV, show_envvar=False,
        help="the store an arm `from: accepted` is read from (default: $ABSERVE_DATABASE_URL)")] = None,
) -> None:
    """Print the env file of CONFIG (or, with a flag, its extra arms' compose file or its arms'
    images); exit 2 with the error when the config cannot run under compose."""
    try:
        experiment = load_experiment(config)
        if images_asked:
            images = arm_images(experiment, sys.stdin.read())
            sys.stdout.write(" ".join(f"{arm}={image}" for arm, image in images.items()) + "\n")
            return
        if arms_compose:
            sys.stdout.write(extra_arms_compose(experiment, sys.stdin.read()))
            return
        text = render_env_file(compose_env(resolve_accepted_image(experiment, db), config.as_posix()))
    except NoAcceptedBuild as exc:  # nothing to build the arm from: refused, as `abserve run` does
        print(f"compose_env: {config}: {exc}", file=sys.stderr)
        raise typer.Exit(exit_codes.USAGE) from None
    except (OSError, ValueError, yaml.YAMLError, YamlFileError) as exc:  # ConfigError is a ValueError
        print(f"compose_env: {config}: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    sys.stdout.write(f"# derived from {config.as_posix()} by abserve.deploy.compose_env\n{text}")


def main(argv: list[str] | None = None) -> int:
    """``python -m abserve.deploy.compose_env CONFIG``: print the env file, or the error."""
    return module_cli.run(app, argv, "python -m abserve.deploy.compose_env")


if __name__ == "__main__":
    raise SystemExit(main())
