"""A run's records as one portable file: gzipped JSON lines, the run first, then its exchanges.

Used to keep real runs as replay fixtures for the judgment's tests (a cold arm, a drift) and to
attach a run's raw records to a release; reading validates every line against the record
contract, so a file from a newer schema is refused like a newer store.

``python -m abserve.store.export DB_URL RUN_ID PATH`` writes one.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Annotated

import typer

from abserve.base import module_cli
from abserve.model.records import Exchange, RunInfo
from abserve.store.store import Store


def write_run_file(store: Store, run_id: str, path: Path) -> int:
    """Write ``run_id`` and its exchanges to ``path``; returns the number of exchanges."""
    run = store.get_run(run_id)
    if run is None:
        raise LookupError(f"no run {run_id!r} in the store")
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.write(run.model_dump_json() + "\n")
        for exchange in store.iter_exchanges(run_id):
            out.write(exchange.model_dump_json() + "\n")
            count += 1
    return count


def read_run_file(path: Path) -> tuple[RunInfo, list[Exchange]]:
    """The run and its exchanges from a file written by :func:`write_run_file`."""
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        run = RunInfo.model_validate_json(next(lines))
        return run, [Exchange.model_validate_json(line) for line in lines]


app = module_cli.app_of()


@app.command()
def export(db_url: Annotated[str, typer.Argument()], run_id: Annotated[str, typer.Argument()],
           path: Annotated[str, typer.Argument()]) -> None:
    """Write RUN_ID of the store at DB_URL, and its exchanges, to PATH."""
    with Store.open(db_url) as store:
        count = write_run_file(store, run_id, Path(path))
    print(f"{count} exchanges of {run_id} written to {path}")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: DB_URL RUN_ID PATH (exit 2 with the usage when they are not three)."""
    return module_cli.run(app, argv, "python -m abserve.store.export")


if __name__ == "__main__":
    raise SystemExit(main())
