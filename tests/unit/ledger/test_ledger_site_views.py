"""The ledger site's pure views: index rows and filters, a config's trend, what changed since the
last accepted release, safe file names, and copying a report (``abserve.ledger.site_*``)."""

from __future__ import annotations

from pathlib import Path

from tests.support import ledger_site as ls

from abserve.ledger.entry import AcceptedBuild
from abserve.ledger.site_changed import changed_page, field_rows
from abserve.ledger.site_data import SignOff
from abserve.ledger.site_reports import copy_report, linked_files, names_run
from abserve.ledger.site_trend import MAX_TABLE_ROWS, config_page, trend
from abserve.ledger.site_views import (
    build_label,
    by_config,
    effect_text,
    index,
    page_name,
    requests_text,
    unit_of,
)


def signoff(e: ls.LedgerEntry | None, run_id: str | None = None, mark: str | None = None,
            t: float = ls.T0, config: str | None = "cpu-default") -> SignOff:
    rid = e.run_id if e else run_id or "r"
    return SignOff(rid, "sqlite:///x.db", "completed", t, e.recorded_at if e else t,
                   e.config_name if e else config, e.verdict if e else None, e.exit_code if e else None,
                   entry=e, mark=mark)


def stream(n: int) -> list[SignOff]:
    """``n`` sign-offs newest first, the i-th oldest with tpot estimate i * 0.1 ms."""
    return [signoff(ls.entry(f"r{i}", t=ls.T0 + i, tpot=(i * 1e-4, i * 1e-4 - 2e-4, i * 1e-4 + 2e-4)))
            for i in reversed(range(n))]


def accepted(e: ls.LedgerEntry, name: str = "v1", at: float = ls.T0 + 99) -> AcceptedBuild:
    build = e.arm("candidate")
    assert build is not None
    return AcceptedBuild(name=name, config_name=e.config_name or "", run_id=e.run_id, arm="b",
                         accepted_at=at, build=build)


def test_page_names_are_safe_and_distinct() -> None:
    assert page_name("cpu-default_2.v1") == "cpu-default_2.v1"
    odd = [page_name(n) for n in ("a/b", "a b", "a:b", "..", ".hidden", "")]
    assert all("/" not in n and " " not in n and not n.startswith(".") and n for n in odd)
    assert len(set(odd)) == len(odd)


def test_build_label_names_version_image_or_install_and_sha() -> None:
    assert build_label(ls.arm("b", "candidate", "0.32.0", image="vllm/x:1", sha="abcdef1234567")) == \
        "vLLM 0.32.0 · vllm/x:1 · abcdef1234"
    install = ls.arm("b", "candidate", "0.32.0").model_copy(update={"install": ["vllm==0.32.0"]})
    assert build_label(install) == "vLLM 0.32.0 · vllm==0.32.0"
    assert build_label(ls.ArmBuild(name="b")) == "arm b"


def test_effects_in_ms_or_us_by_magnitude() -> None:
    assert unit_of([2e-3, None, float("nan")]) == ("ms", 1e3)
    assert unit_of([2e-6, -5e-7]) == ("µs", 1e6)
    g = ls.entry("r").gates[0]
    assert effect_text(g) == "tpot.hl +0.2 ms [-0.1, +0.5] pass"
    assert effect_text(g.model_copy(update={"estimate": None})) == "tpot.hl pass"


def test_index_rows_links_marks_and_filter_choices() -> None:
    good = ls.entry("good", t=ls.T0 + 2, candidate=ls.arm("b", "candidate", "0.33.0", image="img:2"))
    rows = [signoff(good), signoff(None, "live", "running", ls.T0 + 1),
            signoff(None, "half", "interrupted before its report", ls.T0, config="other")]
    reports = {"good": ("runs/good/report.html", None), "live": (None, "running"), "half": (None, "x")}
    ix = index(rows, [accepted(good, "rel-1")], reports, {"cpu-default": 1})
    assert [r.run_id for r in ix.rows] == ["good", "live", "half"]
    first, live, half = ix.rows
    assert first.report == "runs/good/report.html"
    assert first.accepted_as == ["rel-1"]
    assert first.verdict == "pass"
    assert first.filter_verdict == "pass"
    assert first.effects == ["tpot.hl +0.2 ms [-0.1, +0.5] pass"]
    assert first.requests == "480 judged in 10.0 min"
    assert first.builds == ["vLLM 0.31.0", "vLLM 0.33.0 · img:2"]
    assert ix.builds == first.builds
    assert first.build_ids == [0, 1]
    assert live.build_ids == []
    assert first.config_page == "config-cpu-default.html"
    assert (live.report, live.mark, live.filter_verdict) == (None, "running", "running")
    assert half.config_page is None  # no sign-off of "other" has an entry: no page for it
    assert ix.configs == ["cpu-default", "other"]
    assert ix.verdicts == ["interrupted before its report", "pass", "running"]
    assert ix.config_links == [("cpu-default", "config-cpu-default.html", "changed-cpu-default.html", 1)]


def test_by_config_keeps_only_entries_newest_first() -> None:
    rows = [*stream(3), signoff(None, "x", "no report")]
    assert [s.run_id for s in by_config(rows)["cpu-default"]] == ["r2", "r1", "r0"]


def test_trend_draws_every_signoff_oldest_first_with_the_allowance() -> None:
    t = trend("tpot.hl", stream(5), {"r1": ["v1"]})
    assert t.chart is not None
    assert t.chart.count("<circle") == 5
    assert "allowance +1 ms" in t.chart
    assert "sign-off #5: 0.4 [0.2, 0.6]" in t.chart
    assert t.caption.startswith("5 sign-off(s) measured it; newest r4: tpot.hl +0.4 ms")
    assert t.caption.endswith("allowance +1 ms. Accepted: v1 is #2.")


def test_trend_of_one_signoff_or_none_is_a_note_not_an_empty_chart() -> None:
    one = trend("tpot.hl", stream(1))
    assert one.chart is None
    assert "one sign-off so far" in one.note
    assert "no sign-off measured it" in trend("ttft.hl", stream(3)).note


def test_config_page_caps_its_table_but_not_its_charts() -> None:
    rows = stream(MAX_TABLE_ROWS + 5)
    page = config_page("cpu-default", rows, [accepted(rows[3].entry)], {}, "changed-x.html")  # type: ignore[arg-type]
    assert len(page.rows) == MAX_TABLE_ROWS
    assert page.left_out == 5
    assert page.gates == ["tpot.hl"]
    assert page.accepted is not None
    assert page.rows[3].accepted_as == ["v1"]
    assert page.verdicts == [("pass", MAX_TABLE_ROWS + 5)]
    assert page.trends[0].chart is not None
    assert "sign-off #205: " in page.trends[0].chart
    assert page.equality_chart is not None


def test_what_changed_against_the_last_accepted_build() -> None:
    old = ls.entry("old", t=ls.T0, candidate=ls.arm("b", "candidate", "0.32.0", image="img:1",
                                                      args=("--a", "--b")))
    new = ls.entry("new", t=ls.T0 + 9, verdict="fail", tpot=(2e-3, 1.5e-3, 2.5e-3),
                   candidate=ls.arm("b", "candidate", "0.33.0", image="img:1", args=("--a", "--c")),
                   accepted_from="old")
    rows = [signoff(new), signoff(old)]
    c = changed_page("cpu-default", rows, [accepted(old, "v2", ls.T0 + 5), accepted(old, "v1", ls.T0 + 1)],
                     {"old": old, "new": new}, {"old": ("runs/old/report.html", None)}, "config-x.html")
    assert c.accepted is not None
    assert c.accepted.name == "v2"
    assert c.accepted_report == "runs/old/report.html"
    assert c.latest_report is None
    changed = {f.label: (f.accepted, f.latest) for f in c.fields if f.changed}
    assert changed == {"vLLM version": ("0.32.0", "0.33.0"), "server arguments": ("--a --b", "--a --c")}
    assert (c.flags_added, c.flags_removed) == (["--c"], ["--b"])
    tpot = c.effects[0]
    assert tpot.gate == "tpot.hl"
    assert tpot.critical
    assert tpot.changed
    assert tpot.accepted == "tpot.hl +0.2 ms [-0.1, +0.5] pass"
    assert tpot.latest == "tpot.hl +2 ms [+1.5, +2.5] fail"
    assert c.verdicts == ("pass", "fail")
    assert c.judged_against == "judged against accepted run old"
    assert not c.same_run
    assert c.accepted_in_ledger


def test_what_changed_with_nothing_accepted_shows_the_latest_alone() -> None:
    e = ls.entry("only")
    c = changed_page("cpu-default", [signoff(e)], [], {"only": e}, {}, "config-x.html")
    assert c.accepted is None
    assert not any(f.changed for f in c.fields)
    assert c.flags_added == []
    assert c.verdicts == ("", "pass")
    assert all(r.accepted == "-" and not r.changed for r in c.effects)
    assert field_rows(None, None) == []


def test_copy_report_copies_its_files_and_the_local_assets_it_links(tmp_path: Path) -> None:
    body = ('<img src="img/a.png" alt="a"><a href="https://example.com/x">x</a><a href="#gates">g</a>'
            '<a href="../outside.txt">o</a><img src="data:image/png;base64,AAAA" alt="d">')
    src = ls.write_fake_report(tmp_path / "src", "r1", html_body=body)
    (src / "img").mkdir()
    (src / "img" / "a.png").write_bytes(b"png")
    (tmp_path / "outside.txt").write_text("no")
    assert linked_files((src / "report.html").read_text(), src) == [(src / "img" / "a.png").resolve()]
    dest = tmp_path / "site" / "runs" / "r1"
    assert copy_report("r1", str(src), dest) is None
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == [
        "img/a.png", "junit.xml", "report.html", "report.json", "report.md"]


def test_copy_report_refuses_a_missing_or_replaced_report(tmp_path: Path) -> None:
    src = ls.write_fake_report(tmp_path / "latest", "r2")
    assert names_run((src / "report.html").read_text(), "r2")
    assert not names_run((src / "report.html").read_text(), "r")
    assert "replaced by a later run" in (copy_report("r1", str(src), tmp_path / "d1") or "")
    assert "report missing" in (copy_report("r1", str(tmp_path / "gone"), tmp_path / "d2") or "")
    assert copy_report("r1", None, tmp_path / "d3") == "no report folder recorded"
    assert not (tmp_path / "d1").exists()
    assert not (tmp_path / "d2").exists()


def test_requests_and_duration_in_minutes_or_hours() -> None:
    e = ls.entry("r")
    assert requests_text(e.model_copy(update={"duration_s": 3 * 3600.0})) == "480 judged in 3.0 h"
    assert requests_text(e.model_copy(update={"duration_s": None})) == "480 judged"
