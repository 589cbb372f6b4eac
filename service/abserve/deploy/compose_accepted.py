"""A compose sign-off against the accepted release: the arm ``from: accepted`` as an image.

A nightly (or a pull request's sign-off against ``main``) on a GPU host names its baseline
``a: {from: accepted}``. Under docker compose every arm is an image built before anything runs,
so ``python -m abserve.deploy.compose_env CONFIG`` resolves that arm before the build, from the
ledger in the store every sign-off of the host writes (``ABSERVE_DATABASE_URL``: the stack's
``ledger`` profile, a PostgreSQL of the team's, or a SQLite file under ``runs/``): the
accepted run's arm becomes the image that run recorded it ran (``scripts/signoff.sh`` records
``ABSERVE_ARM_IMAGES``: the arm's image and its id), pinned by that id, with the accepted arm's
args, lookup and mutant (``abserve.ledger.baseline.resolve_accepted``, the one resolution the
orchestrator runs again inside the stack). ``compose_env`` then emits that image as the arm's
base image (``ABSERVE_VLLM_IMAGE_<ARM>``, ``REF@sha256:ID``); ``scripts/signoff.sh`` tags that
local image id (``abserve/accepted:<12 hex>``) and builds the arm from the tag, since a build
looks a digest up as a registry's manifest digest, which a local image id is not.

Refused (``NoAcceptedBuild``, one line; ``compose_env`` exits 4): no shared store (each run's
own SQLite starts empty), nothing accepted for the config (accept a passed sign-off first),
an accepted release that ran no image (a sign-off of ``abserve run`` outside compose).
"""

from __future__ import annotations

from typing import TypeVar

from abserve.config import ExperimentConfig
from abserve.ledger.baseline import NoAcceptedBuild, accepted_arm, find_accepted, resolve_accepted

Experiment = TypeVar("Experiment", bound=ExperimentConfig)
DATABASE_ENV = "ABSERVE_DATABASE_URL"


def resolve_accepted_image(experiment: Experiment, database_url: str | None) -> Experiment:
    """``experiment`` with its arm ``from: accepted`` made the accepted release's image (itself
    when no arm takes its build from the ledger); ``NoAcceptedBuild`` when that cannot be."""
    wanted = sorted(experiment.from_ledger())
    if not wanted:
        return experiment
    if not database_url:
        raise NoAcceptedBuild(
            f"arm {wanted[0]}: from: accepted reads the ledger, and this sign-off has no store "
            f"beyond its own run: set {DATABASE_ENV} in .env to the host's ledger (the compose "
            "profile `ledger`, docs/gpu.md \"One ledger on the host\") and accept a run there first")
    for name in wanted:
        found = find_accepted(database_url, experiment.name, experiment.arms[name].accepted_name)
        if accepted_arm(found).get("image") is None:
            raise NoAcceptedBuild(
                f"arm {name}: accepted release {found.name!r} (run {found.run_id}) recorded no image: "
                "it was not run by docker compose (scripts/signoff.sh), so compose cannot start it; "
                "accept a passed sign-off of scripts/signoff.sh")
    return resolve_accepted(experiment, database_url)
