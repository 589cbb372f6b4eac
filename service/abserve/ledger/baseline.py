"""A config's baseline arm taken from the ledger: ``a: {from: accepted}``.

A nightly job judges today's build against the last release accepted for its config without
editing the file: ``abserve run`` and ``abserve check`` call ``resolve_accepted`` with the
run's store, which replaces the arm ``from: accepted`` (or ``from: "accepted:NAME"``) by the
accepted arm as it was configured (kind, venv/install/python/image, args, env, lookup, mutant;
``abserve.ledger.book.accept`` kept it), with the role baseline and the CPUs the arm here sets,
and validates the experiment again. An arm docker compose ran (``scripts/signoff.sh`` recorded
the image it ran, ``ABSERVE_ARM_IMAGES``) comes back as that image, pinned by the id it ran
(``recorded_image``): under compose the accepted build is an image, not the base it was built
from. The experiment remembers which release it was
(``ExperimentConfig.accepted_baseline``): the run's provenance records it and the report says it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from abserve.config import ExperimentConfig
from abserve.ledger.entry import AcceptedBuild, ArmBuild

Experiment = TypeVar("Experiment", bound=ExperimentConfig)


class NoAcceptedBuild(ValueError):
    """The arm ``from: accepted`` cannot be resolved: nothing accepted, or nothing to start."""


def resolve_accepted(config: Experiment, database_url: str) -> Experiment:
    """``config`` with its arm ``from: accepted`` resolved from the store at ``database_url``
    (``config`` itself when no arm takes its build from the ledger)."""
    wanted = config.from_ledger()
    if not wanted:
        return config
    (name, arm), *more = wanted.items()
    if more or arm.role != "baseline":
        raise NoAcceptedBuild(f"arms {sorted(wanted)} take their build from the ledger: only the "
                              "baseline arm may (from: accepted)")
    found = find_accepted(database_url, config.name, arm.accepted_name)
    taken = accepted_arm(found)
    if not taken:
        raise NoAcceptedBuild(f"accepted release {found.name!r} (run {found.run_id}, arm {found.arm}) "
                              "recorded no arm configuration (an older abserve ran it): accept a "
                              "newer passed sign-off of this config")
    own: dict[str, Any] = {"role": "baseline"} | ({"cpus": arm.cpus} if arm.cpus is not None else {})
    data = config.model_dump(by_alias=True)
    data["arms"] = {**{n: a.model_dump(by_alias=True, exclude={"from_"}) for n, a in config.arms.items()},
                    name: taken | own}
    try:
        resolved = type(config).model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False, include_context=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise NoAcceptedBuild(f"accepted release {found.name!r} (run {found.run_id}, arm {found.arm}) "
                              f"does not fit this config as arm {name}: {where}: {first['msg']}") from None
    resolved._accepted_baseline = {"name": found.name, "run_id": found.run_id, "arm": found.arm,
                                   "config_name": found.config_name}
    return resolved


def accepted_arm(found: AcceptedBuild) -> dict[str, Any]:
    """The accepted arm as configured, less what the arm here sets (role, cpus); an arm whose
    build recorded the image it ran (docker compose) is that image, pinned (``recorded_image``)."""
    taken = {k: v for k, v in found.arm_config.items() if k not in ("role", "cpus", "from")}
    image = recorded_image(found.build)
    if image is not None and not any(taken.get(k) for k in ("python", "venv", "install", "url")):
        taken["image"] = image
    return taken


def recorded_image(build: ArmBuild) -> str | None:
    """The image an arm ran as its sign-off recorded it: ``REF@sha256:ID`` when the id was
    recorded, the reference alone otherwise, None for an arm that ran no image."""
    if not build.image:
        return None
    return f"{build.image}@{build.image_digest}" if build.image_digest else build.image


def find_accepted(database_url: str, config_name: str, release: str | None) -> AcceptedBuild:
    """The accepted build the arm names; ``NoAcceptedBuild`` naming ``abserve accept`` if none."""
    from abserve.ledger.book import latest_accepted
    from abserve.store import Store
    from abserve.store.urls import shown_url

    found = None
    sqlite = database_url.removeprefix("sqlite:///") if database_url.startswith("sqlite:///") else None
    if sqlite is None or Path(sqlite).exists():  # a missing SQLite file holds nothing: not created
        with Store.open(database_url) as store:
            found = latest_accepted(store, config_name, release)
    if found is None:
        what = f"release {release!r}" if release else "build"
        raise NoAcceptedBuild(f"no accepted {what} of config {config_name!r} in the store "
                              f"{shown_url(database_url)}: accept a passed sign-off first with "
                              "`abserve accept RUN_ID --as NAME` (accepted builds are kept in the "
                              "accepted run's store: run with its --out or --db)")
    return found
