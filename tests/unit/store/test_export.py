"""A run written to a portable file reads back identical; unknown runs and bad lines are refused."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from pydantic import ValidationError
from tests.support.records_factory import arm, exchange, run_info

from abserve.store import Store
from abserve.store.export import main, read_run_file, write_run_file


def filled_store(tmp_path: Path) -> tuple[Store, str]:
    store = Store.open(f"sqlite:///{tmp_path / 'abserve.db'}")
    run = run_info()
    store.create_run(run)
    store.write_exchanges([exchange(i, [arm("a"), arm("b", ttft=0.06)], items=i % 3) for i in range(5)])
    return store, run.run_id


def test_round_trip_keeps_every_record(tmp_path: Path) -> None:
    store, run_id = filled_store(tmp_path)
    path = tmp_path / "fixtures" / "run.jsonl.gz"
    assert write_run_file(store, run_id, path) == 5
    run, exchanges = read_run_file(path)
    assert run == store.get_run(run_id)
    assert exchanges == list(store.iter_exchanges(run_id))
    store.close()


def test_unknown_run_is_an_error_and_writes_nothing(tmp_path: Path) -> None:
    store, _ = filled_store(tmp_path)
    with pytest.raises(LookupError, match="no run 'nope'"):
        write_run_file(store, "nope", tmp_path / "x.jsonl.gz")
    assert not (tmp_path / "x.jsonl.gz").exists()
    store.close()


def test_a_line_that_is_not_a_record_is_refused(tmp_path: Path) -> None:
    store, run_id = filled_store(tmp_path)
    path = tmp_path / "run.jsonl.gz"
    write_run_file(store, run_id, path)
    store.close()
    with gzip.open(path, "at", encoding="utf-8") as out:
        out.write('{"run_id": "x"}\n')
    with pytest.raises(ValidationError):
        read_run_file(path)


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store, run_id = filled_store(tmp_path)
    store.close()
    out = tmp_path / "cli.jsonl.gz"
    assert main([f"sqlite:///{tmp_path / 'abserve.db'}", run_id, str(out)]) == 0
    assert "5 exchanges" in capsys.readouterr().out
    assert main(["only-one-arg"]) == 2


def test_a_minus_infinity_logprob_survives_export(tmp_path: Path) -> None:
    """vLLM's -inf logprob (probability 0) is written as -Infinity, not null."""
    from tests.support.records_factory import full_exchange as with_logprobs

    store, run_id = filled_store(tmp_path)
    written = with_logprobs(run_id, 99)
    assert written.arms["a"].logprobs[0].logprob == float("-inf")
    store.write_exchanges([written])
    path = tmp_path / "run.jsonl.gz"
    write_run_file(store, run_id, path)
    _, exchanges = read_run_file(path)
    assert exchanges[-1] == written
    store.close()
