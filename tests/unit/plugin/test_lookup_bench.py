"""The lookup benchmark script runs end to end on a tiny setting and reports what it measured."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "lookup_bench.py"


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lookup_bench", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.process  # platform.processor() runs `uname -p` once a process (torch's import did it first)
def test_bench_runs_and_reports_every_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench()
    out = tmp_path / "rows.json"
    bench.main(["--ks", "1,64", "--rounds", "2", "--batch-ms", "0.05", "--json", str(out)])
    table = capsys.readouterr().out
    assert table.count("\n| 64 | ") == 4
    assert table.count("\n| 1 | ") == 4
    rows = json.loads(out.read_text())
    assert len(rows) == 8
    decode = next(r for r in rows if r["case"]["k"] == 64 and r["case"]["place"] == "decode")
    assert decode["case"]["lo"] == decode["case"]["hi"] == 64  # window past every item
    assert decode["linear_items"] == 64
    assert decode["bisect_probes"] == 12
    assert all(v > 0 for r in rows for v in r["us"].values())


def test_bench_rejects_bad_arguments() -> None:
    bench = load_bench()
    with pytest.raises(SystemExit):
        bench.main(["--window", "0"])
