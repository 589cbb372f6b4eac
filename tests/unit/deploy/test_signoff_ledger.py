"""scripts/signoff.sh and the host's one ledger (issue 57): the environment is derived in the
orchestrator's container (on the stack's network, with ``ABSERVE_DATABASE_URL``), where an arm
``from: accepted`` is resolved from the store; a store that names the ``ledger`` profile's
server starts that profile first and keeps it for the whole run; any other store starts nothing
more. signoff.sh runs for real under bash against the recording fake docker of
``test_compose_scripts`` (no Docker engine here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.deploy.test_compose_scripts import GOOD_ENV, signoff

LEDGER = "ABSERVE_DATABASE_URL=postgresql+psycopg://abserve:${ABSERVE_LEDGER_PASSWORD}@ledger-db:5432/abserve\n"


@pytest.mark.process
def test_the_ledger_profile_starts_before_the_ledger_is_read_and_stays_for_the_run(tmp_path: Path) -> None:
    rc, out, made = signoff(tmp_path, GOOD_ENV + "ABSERVE_LEDGER_PASSWORD=pw\n" + LEDGER)
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
