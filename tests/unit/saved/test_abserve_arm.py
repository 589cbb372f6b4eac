"""``RUN_ID:ARM``: one arm of a run stored in a real SQLite store, read back as saved requests."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.records_factory import arm, exchange, run_info

from abserve.model.records import Exchange
from abserve.saved.abserve_arm import read, split_source
from abserve.saved.keys import prompt_key
from abserve.saved.model import SavedRunError
from abserve.store import Store


def _store(path: Path, exchanges: list[Exchange], run_id: str = "run-1") -> str:
    url = f"sqlite:///{path}"
    with Store.open(url) as store:
        info = run_info(run_id=run_id)
        info.arms["a"].model = {"path": "/models/tiny", "served_name": "tiny-llava"}
        store.create_run(info)
        store.write_exchanges(exchanges)
    return url


def _exchanges() -> list[Exchange]:
    out = []
    for i in range(5):
        a = arm("a", [1, 2, 3, 4 + i], ttft=0.05 + i / 100, itl=[0.01, 0.02, 0.03])
        b = arm("b", [9], status=500, error_class="http_status") if i == 2 else arm("b", [1, 2, 3])
        ex = exchange(i, [a, b])
        if i == 0:
            ex = ex.model_copy(update={"prompt_text": "hello", "image_hashes": ["xxh3-128:ab"]})
        out.append(ex)
    return out


def test_an_arm_of_a_stored_run(tmp_path: Path) -> None:
    url = _store(tmp_path / "abserve.db", _exchanges())
    run = read("run-1:a", url)
    assert run.header.tool == "abserve"
    assert run.header.source == "run-1:a"
    assert run.header.model == "tiny-llava"
    assert run.header.started_at == 1_000.0
    assert run.header.duration_s == 1_000.0
    requests = list(run.requests)
    assert len(requests) == 5
    first, second = requests[0], requests[1]
    assert first.ok
    assert first.ttft == pytest.approx(0.05)
    assert first.itl == pytest.approx((0.01, 0.02, 0.03))
    assert first.e2e == pytest.approx(0.05 + 0.06 + 0.001)
    assert first.tpot == pytest.approx((0.05 + 0.06 + 0.001 - 0.05) / 3)
    assert first.output_token_ids == (1, 2, 3, 4)
    assert first.output_text == "t1 t2 t3 t4 "
    assert (first.input_tokens, first.output_tokens) == (100, 4)
    assert first.prompt_key == prompt_key("hello", ["xxh3-128:ab"])  # stored text: the shared key
    assert second.prompt_key is not None
    assert second.prompt_key != first.prompt_key  # no text stored: the fingerprint's key
    assert len({r.prompt_key for r in requests}) == 5


def test_a_failed_outcome_is_not_ok(tmp_path: Path) -> None:
    url = _store(tmp_path / "abserve.db", _exchanges())
    requests = list(read("run-1:b", url).requests)
    assert [r.ok for r in requests] == [True, True, False, True, True]
    assert requests[2].error == "http_status"


def test_the_store_is_found_under_runs(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    (runs / "latest").mkdir(parents=True)
    _store(runs / "latest" / "abserve.db", _exchanges())
    assert len(list(read("run-1:a", None, runs).requests)) == 5


@pytest.mark.parametrize(("source", "db", "message"), [
    ("run-1:zz", True, "run-1:zz: run 'run-1' has no arm 'zz' \\(its arms: a, a2, b\\)"),
    ("nope:a", True, "nope:a: no run 'nope' in the store"),
    ("run-1:a", False, "run-1:a: no store at"),
])
def test_refusals_name_the_source(tmp_path: Path, source: str, db: bool, message: str) -> None:
    url = _store(tmp_path / "abserve.db", _exchanges())
    with pytest.raises(SavedRunError, match=message):
        read(source, url if db else f"sqlite:///{tmp_path / 'missing.db'}")


def test_a_run_without_exchanges_is_refused(tmp_path: Path) -> None:
    url = _store(tmp_path / "abserve.db", [])
    with pytest.raises(SavedRunError, match="recorded no exchanges"):
        read("run-1:a", url)


def test_split_source() -> None:
    assert split_source("2026-12-01T10:00:00-abc:b") == ("2026-12-01T10:00:00-abc", "b")
    assert split_source("runs/x.json") is None
    assert split_source("c:/x") is None
    assert split_source("plain") is None


def test_an_arm_no_exchange_went_to_is_refused_while_reading(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'abserve.db'}"
    with Store.open(url) as store:
        store.create_run(run_info(arms={}))  # a run that recorded no arm list
        store.write_exchanges(_exchanges())
    run = read("run-1:zz", url)
    with pytest.raises(SavedRunError, match="run-1:zz: no exchange of run 'run-1' went to arm 'zz'"):
        list(run.requests)
