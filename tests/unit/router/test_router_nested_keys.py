"""Router settings refuse a misspelt key at every depth, naming its path and never a value."""

from __future__ import annotations

from pathlib import Path

import pytest

from abserve.router.settings import SettingsError, load_settings


@pytest.mark.parametrize(("arm_b", "path"), [
    ('{url: "http://127.0.0.1:2", rol: candidate}', "arms.b.rol"),
    ('{url: "http://127.0.0.1:2", deadlines: {totl_s: 5}}', "arms.b.deadlines.totl_s"),
])
def test_a_misspelt_nested_key_is_refused_with_its_path(tmp_path: Path, arm_b: str, path: str) -> None:
    config = tmp_path / "router.yaml"
    config.write_text(f'dev_mode: true\narms:\n  a: {{url: "http://127.0.0.1:1"}}\n  b: {arm_b}\n')
    with pytest.raises(SettingsError, match=rf"{path}: Extra inputs are not permitted"):
        load_settings(config)


def test_a_misspelt_pool_key_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "router.yaml"
    config.write_text('dev_mode: true\narms: {a: {url: "http://127.0.0.1:1"}}\npool: {max_conections: 3}\n')
    with pytest.raises(SettingsError, match=r"pool.max_conections: Extra inputs are not permitted"):
        load_settings(config)
