"""scripts/signoff.sh and the host's one ledger (issue 57): the environment is derived in the
orchestrator's container (on the stack's network, with ``ABSERVE_DATABASE_URL``), where an arm
``from: accepted`` is resolved from the store; a store that names the ``ledger`` profile's
server starts that profile first and keeps it for the whole run; any other store starts nothing
more. signoff.sh runs for real under bash against the recording fake docker of
``test_compose_scripts`` (no Docker engine here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.deploy.test_compose_scripts import DOCKER, GOOD_ENV, signoff

LEDGER = "ABSERVE_DATABASE_URL=postgresql+psycopg://abserve:${ABSERVE_LEDGER_PASSWORD}@ledger-db:5432/abserve\n"


@pytest.mark.process
def test_the_ledger_profile_starts_before_the_ledger_is_read_and_stays_for_the_run(tmp_path: Path) -> None:
    rc, out, made = signoff(tmp_path, GOOD_ENV + "ABSERVE_LEDGER_PASSWORD=pw\n" + LEDGER,
                            FAKE_PROFILES="noise-floor")
    assert rc == 0, out
    compose = [c for c in made if c[:2] == ["docker", "compose"]]
    start = next(i for i, c in enumerate(compose) if "ledger-db" in c)
    derive = next(i for i, c in enumerate(compose)
                  if "abserve.deploy.compose_env" in c and "--arm-images" not in c)
    assert start < derive
    assert compose[start][2:4] == ["--profile", "ledger"]
    assert compose[start][-4:] == ["up", "-d", "--wait", "ledger-db"]
    # compose_env runs where the store is reachable: the orchestrator's container, not prepare's
    assert compose[derive][compose[derive].index("--entrypoint") + 2] == "orchestrator"
    assert compose[derive][2:4] == ["--profile", "ledger"]
    up = next(c for c in compose if "--exit-code-from" in c)
    assert up[2:4] == ["--profile", "ledger"]  # its depends_on waits for ledger-db; `down` stops it
    # a --profile flag replaces COMPOSE_PROFILES: the run's own (noise-floor: arm a2) come as flags
    assert up[4:6] == ["--profile", "noise-floor"]
    down = next(c for c in compose if "down" in c)
    assert down[2:4] == ["--profile", "ledger"]


@pytest.mark.parametrize("env", [GOOD_ENV, GOOD_ENV + "ABSERVE_DATABASE_URL=postgresql+psycopg://u:p@db.example:5432/x\n"],
                         ids=["sqlite-per-run", "own-server"])
@pytest.mark.process
def test_without_the_ledger_profile_nothing_more_starts(tmp_path: Path, env: str) -> None:
    rc, out, made = signoff(tmp_path, env)
    assert rc == 0, out
    assert not any("ledger-db" in c or "--profile" in c for c in made)
    derive = next(c for c in made if "abserve.deploy.compose_env" in c)
    assert derive[derive.index("--entrypoint") + 2] == "orchestrator"


HEX = "5e" * 32
# compose_env's line for an arm `from: accepted` (the recorded image, pinned by its image id);
# `image inspect sha256:...` finds that id on this host unless FAKE_NO_LOCAL_ID is set.
PINNED = DOCKER.replace(
    '    print("ABSERVE_VLLM_TAG_B=t34")\n',
    '    print("ABSERVE_VLLM_TAG_B=t34")\n'
    f'    print("ABSERVE_VLLM_IMAGE_A=abserve/vllm-b:t33@sha256:{HEX}")\n',
).replace(
    'elif args[:2] == ["image", "inspect"]:',
    'elif args[:2] == ["image", "inspect"] and args[-1].startswith("sha256:") \\\n'
    '        and os.environ.get("FAKE_NO_LOCAL_ID"):\n'
    '    sys.exit(1)\nelif args[:2] == ["image", "inspect"]:',
)


@pytest.mark.process
def test_the_accepted_image_is_built_from_this_hosts_image_id(tmp_path: Path) -> None:
    rc, out, made = signoff(tmp_path, GOOD_ENV, docker=PINNED)
    assert rc == 0, out
    assert ["docker", "tag", f"sha256:{HEX}", f"abserve/accepted:{HEX[:12]}"] in made
    (env,) = (tmp_path / "repo/runs").glob("*/compose.env")
    assert f"ABSERVE_VLLM_IMAGE_A=abserve/accepted:{HEX[:12]}\n" in env.read_text()  # what compose builds
    assert f"this host's image sha256:{HEX}" in out


@pytest.mark.process
def test_a_registry_digest_is_left_to_the_build(tmp_path: Path) -> None:
    rc, out, made = signoff(tmp_path, GOOD_ENV, docker=PINNED, FAKE_NO_LOCAL_ID="1")
    assert rc == 0, out
    assert not any(c[:2] == ["docker", "tag"] for c in made)
    (env,) = (tmp_path / "repo/runs").glob("*/compose.env")
    assert f"ABSERVE_VLLM_IMAGE_A=abserve/vllm-b:t33@sha256:{HEX}\n" in env.read_text()
