"""The API server is started so that vLLM's spawned children do not re-import it.

vLLM spawns its engine core and worker. Under ``python -m MODULE`` every spawned child
re-imports MODULE as ``__mp_main__`` (for vLLM's API server: seconds of imports, twice per
start). ``api_server_command`` runs the same module through runpy from ``-c``; a stand-in module
that spawns one child shows both: imported twice under ``-m``, once under the command, with the
same ``sys.argv[1:]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from abserve.arms.server import API_SERVER, ServerSpec, VllmServer, api_server_command

pytestmark = pytest.mark.process  # short child processes (a spawned grandchild each)

STAND_IN = """
import json, multiprocessing, os, sys
with open(os.environ["IMPORTS"], "a") as f:
    f.write(json.dumps([os.getpid(), __name__]) + "\\n")
if __name__ == "__main__":
    import spawned_child
    child = multiprocessing.get_context("spawn").Process(target=spawned_child.run)
    child.start(); child.join()
    print(json.dumps({"argv": sys.argv[1:], "child_exit": child.exitcode}))
"""

SPAWNED_CHILD = """
def run():
    pass
"""


def imports_of_stand_in(command: list[str], tmp_path: Path) -> tuple[list[list[object]], dict[str, object]]:
    (tmp_path / "stand_in_server.py").write_text(STAND_IN)
    (tmp_path / "spawned_child.py").write_text(SPAWNED_CHILD)
    imports = tmp_path / "imports.jsonl"
    env = {**os.environ, "IMPORTS": str(imports), "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=True)
    lines = [json.loads(line) for line in imports.read_text().splitlines()]
    return lines, json.loads(done.stdout.strip().splitlines()[-1])


def test_a_spawned_child_re_imports_a_dash_m_module(tmp_path: Path) -> None:
    lines, printed = imports_of_stand_in(
        [sys.executable, "-m", "stand_in_server", "--port", "1"], tmp_path)
    assert [name for _, name in lines] == ["__main__", "__mp_main__"]
    assert printed == {"argv": ["--port", "1"], "child_exit": 0}


def test_the_api_server_command_runs_the_module_once_with_the_same_arguments(tmp_path: Path) -> None:
    command = api_server_command(sys.executable, ["--port", "1"], module="stand_in_server")
    lines, printed = imports_of_stand_in(command, tmp_path)
    assert [name for _, name in lines] == ["__main__"]
    assert printed == {"argv": ["--port", "1"], "child_exit": 0}


def test_an_arm_runs_vllms_api_server_with_its_spec_arguments(tmp_path: Path) -> None:
    spec = ServerSpec(model=str(tmp_path))
    server = VllmServer("a", spec, "linear", tmp_path / "a.log", None, python="/venv/bin/python")
    python, flag, launch, *args = server.command
    assert (python, flag) == ("/venv/bin/python", "-c")
    assert repr(API_SERVER) in launch
    assert args == spec.args(server.port)
