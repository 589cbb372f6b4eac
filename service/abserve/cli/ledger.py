"""``abserve ledger [--db URL] --out DIR``: the release ledger as a static site.

Reads every run of the store (``--db``, else ``$ABSERVE_DATABASE_URL``, else every store under
``--runs``, ``runs/`` by default) with its ledger entry and writes ``DIR/index.html``, the
config pages and a copy of each sign-off's report (``abserve.ledger.site_writer``). Exits 0 when
the site is written, 4 with one line when a store cannot be read (no such file, an unknown URL,
a newer store layout) or the site cannot be written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from abserve.base import exit_codes


def ledger(
    out: Annotated[Path, typer.Option("--out", help="Folder to write the site into (index.html).")],
    db: Annotated[str | None, typer.Option(
        "--db", envvar="ABSERVE_DATABASE_URL", show_envvar=False,
        help="Store URL (default: $ABSERVE_DATABASE_URL, else every SQLite store under --runs).")] = None,
    runs: Annotated[Path, typer.Option(
        "--runs", help="Where to look for stores without --db.")] = Path("runs"),
) -> None:
    """Write the release ledger, every sign-off newest first, as a static site.

    Per config: its trends and what changed since the last accepted release. The site works
    from file:// (no server).
    """
    from abserve.ledger.site_data import LedgerReadError, read_site
    from abserve.ledger.site_writer import write_site

    try:
        data = read_site(db, runs)
    except LedgerReadError as exc:
        typer.echo(f"abserve ledger: {exc}", err=True)
        raise typer.Exit(exit_codes.USAGE) from exc
    try:
        summary = write_site(data, out)
    except OSError as exc:
        typer.echo(f"abserve ledger: cannot write the site into {out}: {exc}", err=True)
        raise typer.Exit(exit_codes.USAGE) from exc
    for note in data.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(f"ledger: {summary.signoffs} sign-off(s) from {len(data.stores)} store(s), "
               f"{summary.marked} marked, {summary.configs} config(s), {summary.reports} report(s) copied")
    typer.echo(f"site: {summary.index}")


def register(app: typer.Typer) -> None:
    """Attach ``abserve ledger`` to the root CLI."""
    app.command("ledger")(ledger)
