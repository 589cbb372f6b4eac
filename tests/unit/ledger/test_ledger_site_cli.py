"""``abserve ledger [--db URL] --out DIR`` end to end over a real SQLite store: exit 0 and a site
whose every link lands on a file of the site; exit 4 and one line for a store it cannot read."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest
from tests.support import ledger_site as ls
from tests.unit.ledger.conftest import POLICY, fill
from typer.testing import CliRunner

from abserve.cli import app
from abserve.store import Store

HREF = re.compile(r'(?:href|src)="([^"]*)"')


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def local_links(page: Path) -> list[str]:
    """The files a page links to in the site (not a URL with a scheme, not in-page), without
    their fragments."""
    hrefs = HREF.findall(page.read_text())
    return [h.split("#")[0] for h in hrefs if not re.match(r"^[a-z]+:", h) and not h.startswith("#")]


@pytest.fixture
def store(tmp_path: Path) -> str:
    db = f"sqlite:///{tmp_path / 'abserve.db'}"
    with Store.open(db) as st:
        ls.release_stream(st, tmp_path / "reports", n=5)
        ls.add_signoff(st, ls.entry("other-1", "gpu-nightly", t=ls.T0 + 9e4))  # no report folder
        ls.add_run(st, "half", ls.T0 + 1e5, "half-written", experiment="cpu-default")
    return db


def test_writes_a_site_whose_links_all_land(store: str, tmp_path: Path) -> None:
    out = tmp_path / "site"
    rc, text = invoke("ledger", "--db", store, "--out", str(out))
    assert rc == 0, text
    assert "7 sign-off(s) from 1 store(s), 1 marked, 2 config(s), 5 report(s) copied" in text
    pages = sorted(p.name for p in out.glob("*.html"))
    assert pages == ["changed-cpu-default.html", "changed-gpu-nightly.html", "config-cpu-default.html",
                     "config-gpu-nightly.html", "index.html"]
    assert len(list((out / "runs").glob("*/report.html"))) == 5
    for page in out.glob("*.html"):
        for href in local_links(page):
            assert (page.parent / unquote(href)).is_file(), f"{page.name}: {href}"
    index = (out / "index.html").read_text()
    assert index.count("<tr data-config") == 7
    assert "interrupted before its report" in index
    assert "no report folder recorded" in index
    assert not re.search(r'(?:src|href)="(?:https?:)?//', index.replace(
        'href="https://github.com/example/vllm/actions/runs/', ""))  # nothing fetched from elsewhere


def test_finds_the_stores_under_runs_without_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ABSERVE_DATABASE_URL", raising=False)
    for name in ("one", "two"):
        with Store.open(f"sqlite:///{tmp_path / 'runs' / name / 'abserve.db'}") as st:
            ls.add_signoff(st, ls.entry(f"run-{name}"))
    monkeypatch.chdir(tmp_path)
    rc, text = invoke("ledger", "--out", "site")
    assert rc == 0, text
    assert "2 sign-off(s) from 2 store(s)" in text
    assert (tmp_path / "site" / "index.html").is_file()


@pytest.mark.parametrize("db", ["sqlite:///{tmp}/missing.db", "mysql://u@h/db"])
def test_an_unreadable_store_exits_4_with_one_line(tmp_path: Path, db: str) -> None:
    rc, text = invoke("ledger", "--db", db.format(tmp=tmp_path), "--out", str(tmp_path / "site"))
    assert rc == 4
    assert text.count("\n") == 1
    assert text.startswith("abserve ledger: ")
    assert not (tmp_path / "site").exists()


def test_the_site_of_reports_and_an_accept_written_by_abserve_itself(tmp_path: Path) -> None:
    """The ledger as ``abserve report`` and ``abserve accept`` leave it: real reports (with their
    glossary beside them) are copied and linked, the accepted release named on its pages."""
    url = f"sqlite:///{tmp_path / 'runs' / 'latest' / 'abserve.db'}"
    fill(url)
    for run_id, code in (("good", 0), ("slow", 1)):
        rc, text = invoke("report", run_id, "--db", url, "--out", str(tmp_path / run_id),
                          "--policy", str(POLICY))
        assert rc == code, text
    assert invoke("accept", "good", "--as", "v0.8.0", "--db", url)[0] == 0
    rc, text = invoke("ledger", "--db", url, "--out", str(tmp_path / "site"))
    assert rc == 0, text
    site = tmp_path / "site"
    assert "2 sign-off(s) from 1 store(s), 0 marked, 1 config(s), 2 report(s) copied" in text
    for run_id in ("good", "slow"):
        assert {p.name for p in (site / "runs" / run_id).iterdir()} >= {
            "report.html", "report.md", "report.json", "junit.xml", "glossary.html"}
    for page in [*site.glob("*.html"), *site.glob("runs/*/report.html")]:
        for href in local_links(page):
            assert (page.parent / unquote(href)).is_file(), f"{page}: {href}"
    changed = (site / "changed-nightly.html").read_text()
    assert "v0.8.0" in changed
    assert "latest (slow)" in changed
