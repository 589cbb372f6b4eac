"""scripts/signoff.sh keeps the exit contract under compose (issue 57, item 6).

It says "report in" only where the orchestrator wrote a report (exit 6 and 7 write one since
``abserve run`` judges a stopped load INVALID; a run that failed before judging writes none),
else it points at compose.log; and a build that fails (a step, or the pull of the base image
it starts FROM) exits 4 with one line naming the image and docker's own message, not with
docker's status. signoff.sh runs for real under bash against the recording fake docker of
``test_compose_scripts`` (no Docker engine or GPU here), told here to write a report or to fail
a build as Docker does.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.unit.deploy.test_compose_scripts import DOCKER, GOOD_ENV, signoff

RUN_DIR = r"\./runs/signoff-gpu-x-[^/]+"  # ABSERVE_RUNS_DIR of GOOD_ENV, the run id signoff.sh made
# `up` writes the report where the orchestrator would (runs/<id>/, as .env's ABSERVE_RUNS_DIR).
WRITES_REPORT = """
if "up" in sys.argv[1:] and os.environ.get("FAKE_REPORT"):
    open(os.path.join("runs", os.environ["ABSERVE_RUN_ID"], "report.html"), "w").close()
""" + DOCKER

# What `docker compose build` prints when the base image of arm b does not pull (BuildKit's
# plain progress on stderr, its last line the error), and what `config` says of a service.
PULL_FAILED = """#1 [vllm-b internal] load build definition from vllm.Dockerfile
#1 DONE 0.0s

#2 [vllm-b internal] load metadata for docker.io/vllm/vllm-openai:v9.9
#2 ERROR: docker.io/vllm/vllm-openai:v9.9: not found
------
 > [vllm-b internal] load metadata for docker.io/vllm/vllm-openai:v9.9:
------
failed to solve: vllm/vllm-openai:v9.9: failed to resolve source metadata for \
docker.io/vllm/vllm-openai:v9.9: docker.io/vllm/vllm-openai:v9.9: not found

"""
NO_ENGINE = ("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
             "Is the docker daemon running?\n")
BUILD_FAILS = """
args = sys.argv[1:]
if "build" in args and os.environ["FAKE_BUILD_FAILS"] in args:
    sys.stderr.write(os.environ["FAKE_BUILD_SAYS"])
    sys.exit(17)
if "config" in args and "--images" in args:
    print("abserve/" + args[-1] + ":t34")
    sys.exit(0)
if "config" in args and args[-1].startswith("vllm-"):
    print("services:\\n  " + args[-1] + ":\\n    build:\\n      args:\\n"
          "        VLLM_IMAGE: vllm/vllm-openai:v9.9")
    sys.exit(0)
""" + DOCKER


@pytest.mark.slow
@pytest.mark.parametrize("code", ["0", "1", "2", "3", "6", "7"])
@pytest.mark.parametrize("report", [True, False])
@pytest.mark.process
def test_signoff_says_report_in_only_where_there_is_one(tmp_path: Path, code: str,
                                                        report: bool) -> None:
    rc, out, _ = signoff(tmp_path, GOOD_ENV, docker=WRITES_REPORT, FAKE_UP_RC=code,
                         **({"FAKE_REPORT": "1"} if report else {}))
    assert rc == int(code), out
    (said,) = [line for line in out.splitlines() if f"(exit {code})" in line]
    where = said.split(f"(exit {code}); ", 1)[1]
    if report:
        assert re.fullmatch(rf"report in ({RUN_DIR})/report\.html, run data in \1", where), said
    else:
        assert "report in" not in out, out
        assert re.fullmatch(rf"no report was written; see {RUN_DIR}/compose\.log", where), said


@pytest.mark.parametrize(
    ("service", "says", "line"),
    [("vllm-b", PULL_FAILED,
      "signoff: building abserve/vllm-b:t34 (FROM vllm/vllm-openai:v9.9) failed: failed to solve: "
      "vllm/vllm-openai:v9.9: failed to resolve source metadata for docker.io/vllm/vllm-openai:v9.9: "
      "docker.io/vllm/vllm-openai:v9.9: not found (docker compose build exited 17)"),
     ("prepare", NO_ENGINE,
      f"signoff: building abserve/prepare:t34 failed: {NO_ENGINE.strip()} (docker compose build exited 17)")],
)
@pytest.mark.process
def test_a_failed_build_or_pull_is_refused_in_one_line(tmp_path: Path, service: str,
                                                       says: str, line: str) -> None:
    rc, out, made = signoff(tmp_path, GOOD_ENV, docker=BUILD_FAILS, FAKE_BUILD_FAILS=service,
                            FAKE_BUILD_SAYS=says)
    assert rc == 4, out  # refused before anything ran, not docker's status (17), not a verdict
    assert [x for x in out.splitlines() if x.startswith("signoff: building")] == [line]
    assert says.strip().splitlines()[-1] in out  # docker's own output is shown as well
    assert not any("up" in c for c in made)
    assert "report in" not in out
