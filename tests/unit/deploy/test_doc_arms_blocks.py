"""Every ``arms:`` listing of the GPU pages is a config the compose stack accepts.

The GPU journey (``tests/support/gpu_journey.py``) runs the pages' shell blocks; their YAML
listings are what a user pastes into a config instead. Each one, put under ``arms:`` of a config
that extends the shipped config its section is about (as the page says to write it, in
``configs/local/``), must pass the one reader of compose configs
(``compose_env.load_experiment``: ``extends:``, the mount check, router.arms derived) and
turn into compose's environment, every arm it names with its image and lookup.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from tests.support.doc_blocks import Block, blocks

from abserve.deploy.compose_env import compose_env, load_experiment

ROOT = Path(__file__).resolve().parents[3]
# (page, section, the shipped config the section's listing edits)
LISTINGS = [
    ("docs/gpu.md", "Release sign-off: two vLLM versions", "gpu-release.yaml"),
    ("docs/gpu.md", "More candidate arms", "gpu-qwen2.5-vl-3b.yaml"),
    ("docs/how-it-works.md", "Arms: any serving change, any number of candidates", "gpu-own-change.yaml"),
]


def arms_listings() -> list[tuple[Block, str]]:
    found = []
    for page, section, base in LISTINGS:
        for block in blocks(ROOT / page, page):
            text = yaml.safe_load(block.text) if block.language == "yaml" else None
            if block.section == section and isinstance(text, dict) and set(text) == {"arms"}:
                arms = text["arms"]
                if all(isinstance(a, dict) and not {"url", "venv", "python"} & set(a) for a in arms.values()):
                    found.append((block, base))  # a compose listing (images, lookups), not a local one
    return found


@pytest.fixture
def local_folder() -> Iterator[Path]:
    folder = ROOT / "configs" / "local" / "doc-arms-test"
    folder.mkdir(parents=True, exist_ok=True)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_each_section_has_its_listing() -> None:
    assert {(b.page, b.section) for b, _ in arms_listings()} == {(p, s) for p, s, _ in LISTINGS}


@pytest.mark.parametrize(("block", "base"), arms_listings(), ids=lambda v: getattr(v, "section", v))
def test_a_pages_arms_listing_is_a_config_compose_runs(block: Block, base: str, local_folder: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    listing = yaml.safe_load(block.text)["arms"]
    config = local_folder / "listing.yaml"
    config.write_text(f"extends: {base}\nname: doc-listing\n" + block.text, encoding="utf-8")
    experiment = load_experiment(config.relative_to(ROOT))
    assert set(experiment.arms) >= set(listing), block.where()
    env = compose_env(experiment, str(config.relative_to(ROOT)))
    assert set(env["ABSERVE_ARMS"].split()) >= set(listing)
    for name, arm in listing.items():
        if "image" in arm:
            assert env[f"ABSERVE_VLLM_IMAGE_{name.upper()}"] == arm["image"], block.where()
        if "lookup" in arm:
            assert env[f"ABSERVE_LOOKUP_{name.upper()}"] == arm["lookup"], block.where()
