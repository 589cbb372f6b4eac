"""``ABSERVE_CONFIG_OVERLAY``: a file whose top-level sections replace the config's own, for
every reader of the config (``abserve check``, ``compose_env``, the GPU preflight, ``abserve
run``), and which the run's provenance names. The GPU journey test stands the CPU engine in for
a GPU with it, so it must replace whole sections (a GPU flag left over would stop a CPU arm)."""

from __future__ import annotations

from pathlib import Path

import pytest

from abserve.config import OVERLAY_ENV, load_experiment
from abserve.runs.provenance import _overlay_facts


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_without_an_overlay_the_config_is_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(OVERLAY_ENV, raising=False)
    config = load_experiment("gpu-qwen2.5-vl-3b")
    assert config.server.args["--max-num-seqs"] == 32
    assert _overlay_facts() is None


def test_an_overlay_replaces_whole_sections_and_leaves_the_rest(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    overlay = write(tmp_path / "standin" / "overlay.yaml", """
server:
  args: {--max-model-len: 8192, --dtype: float32}
  env: {VLLM_USE_V2_MODEL_RUNNER: "0"}
budget: {seconds: 300, min_rounds: 2}
blocks: null
policy: selftest
""")
    monkeypatch.setenv(OVERLAY_ENV, str(overlay))
    config = load_experiment("gpu-own-change")  # extends the 3B config; its blocks: count 10
    assert dict(config.server.args) == {"--max-model-len": 8192, "--dtype": "float32"}  # no GPU flag left
    assert config.server.env == {"VLLM_USE_V2_MODEL_RUNNER": "0"}
    assert config.budget is not None
    assert config.budget.seconds == 300
    assert config.blocks.count == type(config.blocks)().count  # removed: the schema's default
    assert config.policy.name == "selftest.yaml"
    assert config.model.id == "Qwen/Qwen2.5-VL-3B-Instruct"  # sections it does not name are the config's
    assert set(config.arms) == {"a", "b"}
    facts = _overlay_facts()
    assert facts is not None
    assert facts["path"] == str(overlay)
    assert len(facts["sha256"]) == 64


def test_an_overlay_that_cannot_be_read_is_an_error_naming_it(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OVERLAY_ENV, str(tmp_path / "missing.yaml"))
    with pytest.raises(ValueError, match=r"missing\.yaml"):
        load_experiment("gpu-qwen2.5-vl-3b")
