"""Golden tests of the first screen's sentences, and of what they link to.

Five runs with known answers (``tests.support.report_runs``): pass, fail on equality, fail on
latency, inconclusive and invalid. The sentences are pinned word for word: a change of wording
is a deliberate change of this file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests.support import report_runs as rr

from abserve.compare import Judgment
from abserve.report import write_report
from abserve.report.evidence import wanted
from abserve.report.sentences import first_screen, latency_sentence

PASS_LATENCY = [
    "Bisect (b) is not slower per output token: -0.300 ms [-0.478, -0.122], allowed +0.604 ms.",
    "Bisect (b) is not slower to the first token: -0.208 ms [-1.987, +1.571], allowed +20.002 ms.",
]
GOLDEN: dict[str, list[str]] = {
    "pass": [
        "Outputs identical on 96 of 96 requests (bitwise, logprobs included); "
        "a mismatch rate above 5.9% is ruled out.",
        *PASS_LATENCY,
        "Per image, bisect (b) saves 1.88 µs per output token [1.07, 2.69] and no difference in time "
        "to the first token is shown (+0.74 µs [-5.08, +7.58]); on requests with ≥ 128 images it is "
        "proven faster per output token (-0.584 ms [-0.830, -0.337]).",
        f"Stopped: {rr.STOP} (6 rounds, 96 requests, 120 s; budget 540 s).",
    ],
    "fail_equality": [
        "Outputs differ on 1 of 32 requests (1 divergent), more than the policy allows; "
        "the first is request req-00021 at output position 5.",
        "Bisect (b) is not slower per output token: -0.279 ms [-0.598, +0.039], allowed +0.606 ms.",
        "Bisect (b) is not slower to the first token: -0.906 ms [-3.326, +1.515], allowed +20.013 ms.",
        "Per image, bisect (b) saves 1.84 µs per output token [0.17, 3.51] and no difference in time "
        "to the first token is shown (+0.68 µs [-8.18, +8.99]); on requests with ≥ 128 images its "
        "being faster per output token is not yet proven (no estimate yet).",
        "Stopped: decided after 2 rounds: equality failed (2 rounds, 32 requests, 40 s; budget 540 s).",
    ],
    "fail_latency": [
        "Outputs identical on 48 of 48 requests (bitwise, logprobs included); a mismatch rate "
        "above 10.8% is ruled out, not yet below the 10.0% the policy needs.",
        "Bisect (b) is slower per output token: +1.729 ms [+1.474, +1.983], beyond the allowed +0.606 ms.",
        "Bisect (b) is not slower to the first token: -0.370 ms [-2.811, +2.071], allowed +20.002 ms.",
        "Per image, bisect (b) saves 1.87 µs per output token [0.62, 3.11] and no difference in time "
        "to the first token is shown (-2.08 µs [-11.36, +5.98]); on requests with ≥ 128 images it is "
        "proven not faster per output token (+1.393 ms [+1.061, +1.726]).",
        "Stopped: decided after 3 rounds: tpot.hl failed (3 rounds, 48 requests, 60 s; budget 540 s).",
    ],
    "inconclusive": [
        "Outputs identical on 24 of 24 requests (bitwise, logprobs included); a mismatch rate "
        "above 19.4% is ruled out, not yet below the 10.0% the policy needs.",
        "Bisect (b) is not slower per output token: -0.291 ms [-0.709, +0.126], allowed +0.615 ms.",
        "Bisect (b) is not slower to the first token: -1.263 ms [-4.153, +1.626], allowed +19.989 ms.",
        "Per image, no difference per output token is shown (-1.93 µs [-4.09, +0.24]) and no "
        "difference in time to the first token is shown (+1.61 µs [-8.92, +11.25]); on requests with "
        "≥ 128 images its being faster per output token is not yet proven (no estimate yet).",
        "Stopped: budget spent (3 rounds, 48 requests, 60 s; budget 540 s). Verdict inconclusive: "
        "equality inconclusive, tpot.improvement@128+ inconclusive.",
    ],
    "invalid": [
        "The run is invalid, so no gate decides anything: arm 'b' expected lookup 'bisect' but proved "
        "nothing (synthetic).",
        "The 96 judged exchanges are shown below for diagnosis only.",
        f"Stopped: {rr.STOP} (6 rounds, 96 requests, 120 s; budget 540 s).",
    ],
}
VERDICTS = {"pass": "pass", "fail_equality": "fail", "fail_latency": "fail",
            "inconclusive": "inconclusive", "invalid": "invalid"}


def case(name: str) -> Judgment:
    if name == "fail_equality":
        return rr.judged(rr.exchanges(32, mismatch_at=21),
                         log=rr.sequential_log(2, "decided after 2 rounds: equality failed"))
    if name == "fail_latency":
        return rr.judged(rr.exchanges(48, shift=0.002),
                         log=rr.sequential_log(3, "decided after 3 rounds: tpot.hl failed"))
    if name == "inconclusive":
        return rr.judged(rr.exchanges(24), log=rr.sequential_log(3, "budget spent", decided=False))
    if name == "invalid":
        return rr.judged(proven_b=None)
    return rr.judged()


@pytest.fixture(scope="module")
def judgments() -> dict[str, Judgment]:
    return {name: case(name) for name in GOLDEN}


@pytest.mark.parametrize("name", list(GOLDEN))
def test_sentences_are_the_golden_ones(judgments: dict[str, Judgment], name: str) -> None:
    j = judgments[name]
    assert j.verdict == VERDICTS[name]
    said = first_screen(j)
    assert [s.text for s in said] == GOLDEN[name]
    assert 3 <= len(said) <= 5


@pytest.mark.parametrize("name", list(GOLDEN))
def test_each_sentence_links_to_its_evidence_in_html_md_and_json(
        judgments: dict[str, Judgment], name: str, tmp_path: Path) -> None:
    j = judgments[name]
    paths = write_report(j, tmp_path)
    html, md = paths.html.read_text(), paths.markdown.read_text()
    top = html.split('<section id="run-facts">', 1)[0]
    headings = {re.sub(r"[^a-z0-9 -]", "", h.lower()).strip().replace(" ", "-")
                for h in re.findall(r"^#{2,3} (.+)$", md, re.M)}
    for s in first_screen(j):
        escaped = s.text.replace("'", "&#39;")
        assert f'{escaped} <a href="{s.anchor}">' in top  # on the first screen, with its link
        assert f'id="{s.anchor[1:]}"' in html  # the link lands on the evidence
        assert f"- {s.text} ([{s.link}](#" in md
        assert s.heading.lower().replace(" ", "-") in headings
    summary = json.loads(paths.json.read_text())["summary"]
    assert [x["text"] for x in summary["sentences"]] == GOLDEN[name]
    assert summary["verdict"] == VERDICTS[name]
    assert summary["equality"]["mismatches"] == (1 if name == "fail_equality" else 0)
    assert summary["per_image"]["tpot"]["unit"] == "s per item"
    assert summary["per_image"]["tpot"]["low"] <= summary["per_image"]["tpot"]["slope"]


def test_tones_mark_what_failed(judgments: dict[str, Judgment]) -> None:
    tones = {name: [s.tone for s in first_screen(j)] for name, j in judgments.items()}
    assert tones["pass"] == ["pass"] * 5
    assert tones["fail_equality"][0] == "fail"
    assert tones["fail_latency"][1] == "fail"
    assert tones["inconclusive"][0] == "open"
    assert tones["inconclusive"][-1] == "open"
    assert tones["invalid"] == ["fail", "open", "open"]


def test_mismatch_shown_side_by_side_with_images(judgments: dict[str, Judgment], tmp_path: Path) -> None:
    j = judgments["fail_equality"]
    exs = {ex.request_id: ex for ex in rr.exchanges(32, mismatch_at=21) if ex.request_id in wanted(j)}
    html = write_report(j, tmp_path, exchanges=exs).html.read_text()
    block = html.split('id="mismatch-1"', 1)[1].split('<div class="mismatch"', 1)[0]
    assert '<mark title="position 5">t6</mark>' in block
    assert '<mark title="position 5">t46</mark>' in block
    assert "<code>t6</code>" in block
    assert "<code>t46</code>" in block  # the top-k at that position
    assert "8 images, in prompt order: 1 <code>blake3:00210000abab…</code>" in block  # req 21: 8 images
    assert "corpus-index=<code>21</code>" in block
    assert "rebuilds the request" in block
    assert "The store keeps no image bytes, sizes or prompt positions" in html
    md = write_report(j, tmp_path, exchanges=exs).markdown.read_text()
    assert "- b: `t1t2t3t4t5⟦t46⟧t47" in md
    bare = write_report(j, tmp_path / "bare").html.read_text()  # without the store's records
    assert "Outputs not shown side by side" in bare


def test_identical_run_states_its_sensitivity_and_draws_no_empty_chart(
        judgments: dict[str, Judgment], tmp_path: Path) -> None:
    html = write_report(judgments["pass"], tmp_path).html.read_text()
    statement = html.split('id="equality-sensitivity">', 1)[1].split("</p>", 1)[0]
    assert "No mismatch on 96 comparable requests" in statement
    assert "bitwise" in statement
    assert "5.91% is ruled out at 95% confidence" in statement
    assert "first difference by output position" not in html
    assert ": no data</text>" not in html


def test_effect_curve_and_lookup_work_share_the_log_axis(judgments: dict[str, Judgment],
                                                         tmp_path: Path) -> None:
    html = write_report(judgments["pass"], tmp_path).html.read_text()
    tpot = html.split('<figure id="effect-tpot">', 1)[1].split("</figure>", 1)[0]
    assert tpot.count('class="whisker"') == 4
    assert 'class="trend"' in tpot  # 4 buckets, fitted line
    assert "images per request (log scale)" in tpot
    assert ">512</text>" in tpot
    lookup = html.split('<figure id="effect-lookup">', 1)[1].split("</figure>", 1)[0]
    assert "a (linear): items examined per lookup call" in lookup
    assert "b (bisect)" in lookup
    ticks = [re.findall(r">(\d+)</text>", fig.split("images per request")[0]) for fig in (tpot, lookup)]
    assert ticks[0][-6:] == ticks[1][-6:]  # the same x ticks
    one = rr.judged(rr.exchanges(96, hashes=False))
    one.breakdowns = [b for b in one.breakdowns if b.group == "8-15" or b.dimension != "items"]
    for a in one.arms.values():
        a.telemetry.examined_per_request = {}
    html = write_report(one, tmp_path / "one").html.read_text()
    assert 'id="effect-tpot"' not in html
    assert "no effect curve: a single images-per-request bucket" in html
    assert "Lookup work by images per request: not recorded" in html


def test_placement_and_blocks_are_collapsed_but_complete(judgments: dict[str, Judgment],
                                                          tmp_path: Path) -> None:
    j = judgments["pass"]
    html = write_report(j, tmp_path).html.read_text()
    placement = html.split('<details id="placement-details">', 1)[1].split("</details>", 1)[0]
    assert placement.count("<tr><td>") == len(j.placement)
    blocks = html.split('<details id="breakdown-details">', 1)[1].split("</details>", 1)[0]
    assert blocks.count("<tr><td>") == len(j.breakdowns) + len(j.trends)
    assert "<td>block</td>" in blocks
    assert "<details open" not in html


def test_a_drift_only_in_the_prompt_and_in_output_logprobs_is_shown(tmp_path: Path) -> None:
    from tests.support.records_factory import position

    ex = rr.exchanges(32)
    moved = ex[9].arms["b"]
    moved.logprobs = [position(t, logprob=-0.1 + (0.003 if i == 4 else 0.0)) for i, t in enumerate(rr.TOKENS)]
    for name, shift in (("a", 0.0), ("b", 0.004)):
        ex[9].arms[name].prompt_logprobs = [position(1000 + i, logprob=-1.0 + (shift if i >= 17 else 0.0))
                                            for i in range(40)]
    j = rr.judged(ex, log=rr.sequential_log(2, "decided after 2 rounds: equality failed"))
    assert j.equality[0].examples[0].cls == "drift"
    paths = write_report(j, tmp_path, exchanges={e.request_id: e for e in ex if e.request_id in wanted(j)})
    block = paths.html.read_text().split('id="mismatch-1"', 1)[1]
    assert '<mark title="position 4">t5</mark>' in block  # the first drifting output position
    assert "Prompt logprobs drift from prompt position 17" in block
    assert "+3.00e-03" in block  # the output position's logprob drift, same token on both sides
    assert "- prompt logprobs drift from prompt position 17" in paths.markdown.read_text()
    said = first_screen(j)[0].text
    assert said.startswith("Outputs differ on 1 of 32 requests (1 drift)")
    assert "output position 4" in said


def test_a_long_run_draws_a_bounded_number_of_look_markers() -> None:
    from abserve.report import svg

    many = [svg.Point(i, 0.1 * i, 0.1 * i - 1, 0.1 * i + 1) for i in range(1, 314)]
    chart = svg.trajectory(many, [], "t", "y")
    assert chart.count("<circle") <= svg.MAX_DOTS
    assert "n=313:" in chart  # the last look is marked
    assert chart.count(",") > 2 * 313  # the band and the line keep every look


@pytest.mark.parametrize("scheme", ["xxh3-128", "blake3", "sha256"])
def test_a_mismatch_from_the_corpus_shows_its_images_as_thumbnails_with_positions(
        tmp_path: Path, scheme: str) -> None:
    ex = rr.exchanges(32, mismatch_at=21)
    ex[21] = rr.corpus_exchange(3, ex[21], scheme=scheme)
    ex[22] = rr.corpus_exchange(4, ex[22], scheme=scheme)
    ex[22].image_hashes[0] = "blake3:" + "0" * 64  # not what the corpus rebuilds
    ex[22].arms["b"] = ex[21].arms["b"].model_copy()  # a second mismatch
    j = rr.judged(ex, log=rr.sequential_log(2, "decided after 2 rounds: equality failed"))
    paths = write_report(j, tmp_path, exchanges={e.request_id: e for e in ex if e.request_id in wanted(j)})
    html = paths.html.read_text()
    first = html.split('id="mismatch-1"', 1)[1].split('<div class="mismatch"', 1)[0]
    n = int(ex[21].tags["items"])
    assert first.count('<img src="data:image/jpeg;base64,') == min(n, 12)
    assert f'alt="image 1 of {n}, part 2 of {2 * n + 1}, after ' in first  # interleaved: text first
    assert "rebuilt from the corpus (profile interleaved, seed 11, index 3); all" in first
    second = html.split('id="mismatch-2"', 1)[1]
    assert "<img" not in second.split("</div>", 1)[0]
    assert "do not hash to the recorded ones" in second
    md = paths.markdown.read_text()
    assert "- image positions in the prompt (rebuilt from the corpus" in md
    assert "1 part 2 of" in md
    urls = re.findall(r"""(?:src|href)=["']([^"']+)""", html)
    fetched = ("data:,", "data:image/jpeg;base64,")  # nothing fetched; links: the page, the glossary
    assert all(u.startswith(("#", "glossary.html", *fetched)) for u in urls)


def test_a_corpus_that_cannot_be_rebuilt_is_said_not_raised() -> None:
    from abserve.model.provenance import RunProvenance
    from abserve.report.thumbnails import rebuild

    ex = rr.corpus_exchange(3, rr.exchanges(1)[0])
    bad_plan = RunProvenance(load_plan=[{"profile": "interleaved", "set": {"images.count": "many"}}])
    assert rebuild(ex, bad_plan).note.startswith("thumbnails not shown: the corpus cannot be rebuilt")
    ex.tags.pop("corpus-index")
    assert "no corpus tags" in rebuild(ex, RunProvenance()).note


def test_a_gate_with_no_estimate_yet_writes_n_a_without_a_unit(judgments: dict[str, Judgment]) -> None:
    j = judgments["pass"]
    line = j.metrics[0].model_copy(update={"estimate": None, "low": None, "high": None,
                                           "threshold": None, "outcome": "inconclusive"})
    text = latency_sentence(j, line).text
    assert "n/a, not yet bounded" in text
    assert "allowed n/a" in text
    assert "n/a ms" not in text


def test_on_conversations_the_per_image_slope_says_it_carries_the_turns(
        judgments: dict[str, Judgment]) -> None:
    from abserve.compare.model import TurnRow
    from abserve.report.sentences import per_image_sentence

    plain = per_image_sentence(judgments["pass"])
    assert plain is not None
    assert "between turns" not in plain.text
    rows = [TurnRow(dimension="turn", group=g, metric="ttft", n=12) for g in ("first turn", "later turns")]
    turned = per_image_sentence(judgments["pass"].model_copy(update={"turns": rows}))
    assert turned is not None
    assert "so these slopes also carry what differs between turns" in turned.text
