"""The first screen as GitHub-flavoured Markdown, for a CI job's step summary or a PR comment.

``abserve run`` and ``abserve report`` write it with ``--summary-md FILE``
(``abserve.report.summary_file`` appends it, as GitHub's ``$GITHUB_STEP_SUMMARY`` expects). It
holds what a reviewer reads where they look: the verdict, the first-screen sentences
(``abserve.report.sentences.first_screen``), the critical gates (effect, interval, allowance,
outcome), the reported gates that did not pass, equality, each arm's build, and links to the full
report. A family run (several candidates) gets one line per candidate, each candidate's sentences
and one gates table for all. Links are ``LINK/report.html#...``: ``LINK`` is where the report is
published, relative to the summary or a URL.

Never longer than ``MAX_CHARS`` (GitHub's limit on a comment body): every cell and sentence is
clipped, and table rows that do not fit are counted in a "N more rows in report.md" line.
Pure: judgments in, text out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from abserve.compare.family import FamilyJudgment
from abserve.compare.model import EqualityVerdict, Judgment, MetricLine
from abserve.report.sentences import first_screen
from abserve.report.views import interval, label, threshold, value

MAX_CHARS = 65_535  # GitHub: the most characters of an issue or pull-request comment
MAX_CELL = 300  # characters of one table cell
MAX_TEXT = 2_000  # characters of one sentence or paragraph
MARK = {"pass": "✅", "fail": "❌", "invalid": "⛔"}  # anything else: not decided
OPEN = "⚠️"


@dataclass(frozen=True)
class Rows:
    """A table (or a list, with no header) whose rows may be cut to fit, counted when they are."""

    head: list[str]
    rows: list[str]
    more_in: str  # where the rows left out are: "[report.md](...)"


Block = str | Rows


def mark(outcome: str) -> str:
    """The outcome with its sign: ``✅ pass``, ``❌ fail``, ``⚠️ inconclusive``."""
    return f"{MARK.get(outcome, OPEN)} {outcome}"


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` no longer than ``limit``, an ellipsis where it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cell(text: object) -> str:
    """A table cell: one line, pipes escaped, no raw HTML, clipped."""
    s = " ".join(str(text).split()).replace("|", "\\|").replace("<", "&lt;")
    return clip(s, MAX_CELL)


def row(*cells: object) -> str:
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def table(*header: str) -> list[str]:
    return [row(*header), "|" + "---|" * len(header)]


def link(base: str, path: str) -> str:
    """``path`` under ``base`` (a URL or a relative path; ``.`` or empty: the path itself)."""
    base = base.rstrip("/")
    return path if base in ("", ".") else f"{base}/{path}"


def gate_cells(m: MetricLine) -> list[str]:
    return [label(m), value(m, m.estimate), interval(m, m.low, m.high), threshold(m), mark(m.outcome)]


def equality_cells(eq: EqualityVerdict) -> list[str]:
    def pct(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2%}"

    return ["equality (mismatch rate)", pct(eq.candidate_rate), f"[{pct(eq.candidate_low)}, "
            f"{pct(eq.candidate_high)}]", f"excess ≤ {pct(eq.threshold)}", mark(eq.outcome)]


def equality_line(j: Judgment) -> str:
    """Equality in one paragraph: outcome, mismatches by kind, the bound, the floor."""
    eq = j.equality_verdict
    if eq is None or not j.equality:
        return "**Equality:** not judged (no outputs to compare)."
    main = j.equality[0]
    kinds = ", ".join(f"{main.summary.counts[c]} {c}" for c in ("divergent", "close", "drift")
                      if main.summary.counts.get(c))
    high = eq.candidate_high
    bound = "" if high is None else f"; a mismatch rate above {high:.2%} is ruled out"
    floor = (f"; A/A' floor {eq.floor_rate:.2%}" if eq.floor_measured and eq.floor_rate is not None
             else "; no A/A' floor measured")
    return clip(f"**Equality ({'critical' if eq.critical else 'reported'}): {mark(eq.outcome)}** — "
                f"{main.summary.mismatches} mismatches of {main.comparable} comparable requests"
                f"{f' ({kinds})' if kinds else ''}, {main.left} vs {main.right}{bound}{floor}.")


def _flags(args: Sequence[str]) -> dict[str, str]:
    """``--flag value`` pairs of a server command line (a bare flag: empty value)."""
    out: dict[str, str] = {}
    for i, a in enumerate(args):
        if a.startswith("--"):
            key, _, val = a.partition("=")
            nxt = args[i + 1] if i + 1 < len(args) else ""
            out[key] = val or ("" if nxt.startswith("--") else nxt)
    return out


IGNORED_FLAGS = ("--port", "--host")  # differ between any two arms: not the change


def flags_differ(args: Sequence[str], baseline: Sequence[str]) -> str:
    """The flags of ``args`` that the baseline's command line lacks or sets otherwise."""
    mine, base = _flags(args), _flags(baseline)
    diff = [f"{k} {v}".strip() for k, v in mine.items() if k not in IGNORED_FLAGS and base.get(k) != v]
    return " ".join(f"`{d}`" for d in diff) or "—"


def arm_rows(js: Sequence[Judgment]) -> list[str]:
    """One row per arm of the judgments; an arm judged in several (a family's baseline, or a
    candidate that is ``other`` in its siblings' judgments) in the role it was judged in."""
    seen: dict[str, tuple[str, str]] = {}  # name -> (role, row)
    for j in js:
        base = next((a for a in j.arms.values() if a.role == "baseline"), None)
        for name, a in j.arms.items():
            if name in seen and (a.role == "other" or seen[name][0] != "other"):
                continue
            proof = (a.proven_lookup and f"proven {a.proven_lookup}") or (
                f"NOT proven {a.expected_lookup}" if a.expected_lookup else "untouched")
            differ = ("(baseline)" if a is base else "—" if base is None
                      else flags_differ(a.server_args, base.server_args))
            seen[name] = (a.role, row(name, a.role, a.vllm_version or "unknown", proof, differ))
    return [r for _, r in seen.values()]


def sentence_lines(j: Judgment, base: str) -> list[str]:
    return [f"- {clip(s.text)} ([{s.link}]({link(base, 'report.html' + s.anchor)}))" for s in first_screen(j)]


def gate_rows(j: Judgment, critical: bool, prefix: Sequence[str] = ()) -> list[str]:
    """Rows of the critical gates (equality first), or of the reported gates that did not pass."""
    def shown(is_critical: bool, outcome: str) -> bool:
        return is_critical if critical else not is_critical and outcome != "pass"

    eq = j.equality_verdict
    rows = [row(*prefix, *equality_cells(eq))] if eq is not None and shown(eq.critical, eq.outcome) else []
    return rows + [row(*prefix, *gate_cells(m)) for m in j.metrics if shown(m.critical, m.outcome)]


def reported_blocks(j: Judgment, more: str) -> list[Block]:
    """The reported (non-critical) gates that did not pass, or one line saying there are none."""
    rows = gate_rows(j, False)
    if not rows:
        return ["**Reported gates:** every reported (non-critical) gate passed."]
    return ["**Reported gates that did not pass** (not critical: shown, skipped in junit.xml)",
            Rows(list(table(*GATE_HEAD)), rows, more)]


GATE_HEAD = ("gate", "effect (candidate − baseline)", "interval", "allowance", "outcome")
ARM_HEAD = ("arm", "role", "vLLM", "lookup", "flags that differ from the baseline")


REPORT_FILES = ("report.html", "report.md", "report.json", "junit.xml")
FAMILY_FILES = REPORT_FILES[1:]  # a family's own files; each candidate's four are in vs-<candidate>/


def files_line(base: str, names: Sequence[str] = REPORT_FILES) -> str:
    return "Full report: " + " · ".join(f"[{n}]({link(base, n)})" for n in names)


def run_blocks(j: Judgment, base: str) -> list[Block]:
    """The two-arm summary's blocks, in reading order."""
    more = f"[report.md]({link(base, 'report.md')})"
    config, policy = j.provenance.experiment, j.provenance.policy_name
    head = (f"### abserve sign-off `{j.run_id}`: {MARK.get(j.verdict, OPEN)} **{j.verdict.upper()}** "
            f"(exit {j.exit_code})")
    facts = (f"{f'Config `{config}`, ' if config else ''}{j.exchanges_judged} exchanges judged "
             f"({j.exchanges_warmup} warm-up excluded of {j.exchanges_total}); run {j.run_status}; "
             f"policy `{'unknown' if policy is None else policy}`.")
    return [clip(head), clip(facts), Rows([], sentence_lines(j, base), more),
            "**Critical gates**", Rows(list(table(*GATE_HEAD)), gate_rows(j, True), more),
            *reported_blocks(j, more),
            equality_line(j),
            "**Arms**", Rows(list(table(*ARM_HEAD)), arm_rows([j]), more),
            files_line(base)]


def family_blocks(judged: FamilyJudgment, run_id: str, base: str) -> list[Block]:
    """The family summary's blocks: verdict, candidates, their sentences, one gates table."""
    more = f"[report.md]({link(base, 'report.md')})"
    head = (f"### abserve family sign-off `{run_id}`: {MARK.get(judged.verdict, OPEN)} "
            f"**{judged.verdict.upper()}** (exit {judged.exit_code})")
    cands = [row(name, mark(line.verdict), f"{line.alpha:.4g}", "; ".join(line.reasons),
                 f"[vs-{name}/report.html]({link(base, f'vs-{name}/report.html')})")
             for name, line in judged.candidates.items()]
    said: list[str] = []
    for name, j in judged.judgments.items():
        said.append(f"- **{judged.baseline} vs {name}: {judged.candidates[name].verdict.upper()}**")
        said += [f"  {s}" for s in sentence_lines(j, link(base, f"vs-{name}"))]
    gates = [r for name, j in judged.judgments.items() for r in gate_rows(j, True, (name,))]
    return [clip(head), clip(f"**Multiplicity:** {judged.correction}."),
            Rows(list(table("candidate", "verdict", "Holm level (alpha)", "reasons", "full report")), cands,
                 more),
            Rows([], said, more),
            "**Critical gates**", Rows(list(table("candidate", *GATE_HEAD)), gates, more),
            "**Arms**", Rows(list(table(*ARM_HEAD)), arm_rows(list(judged.judgments.values())), more),
            files_line(base, FAMILY_FILES)]


def fit(blocks: Sequence[Block], limit: int = MAX_CHARS) -> str:
    """The blocks as Markdown within ``limit`` characters: every fixed block kept, table rows
    taken in order while they fit, each table's rows left out counted on a line of their own."""
    fixed = sum(len(b) + 2 for b in blocks if isinstance(b, str))
    fixed += sum(sum(len(h) + 1 for h in b.head) + 2 + len(note(10**9, b.more_in)) + 2
                 for b in blocks if isinstance(b, Rows))
    room = limit - fixed
    parts: list[str] = []
    for b in blocks:
        if isinstance(b, str):
            parts.append(b)
            continue
        kept: list[str] = []
        for r in b.rows:
            if len(r) + 1 > room:
                break
            kept.append(r)
            room -= len(r) + 1
        left = len(b.rows) - len(kept)
        parts.append("\n".join([*b.head, *kept]) + (f"\n\n{note(left, b.more_in)}" if left else ""))
    text = "\n\n".join(p for p in parts if p) + "\n"
    if len(text) > limit:  # fixed blocks alone too long: cannot happen with clipped blocks, but never over
        text = text[: limit - 80] + "\n\n… cut at GitHub's comment limit: see report.md\n"
    return text


def note(left: int, more_in: str) -> str:
    return f"*{left:,} more rows in {more_in}*"


def run_summary(j: Judgment, base: str = ".", limit: int = MAX_CHARS) -> str:
    """The first screen of a two-arm sign-off as Markdown (``base``: where the report is)."""
    return fit(run_blocks(j, base), limit)


def family_summary(judged: FamilyJudgment, run_id: str, base: str = ".", limit: int = MAX_CHARS) -> str:
    """The first screen of a family sign-off (several candidates) as Markdown."""
    return fit(family_blocks(judged, run_id, base), limit)


def problem_summary(command: str, what: str, message: str, code: int) -> str:
    """A run that wrote no report (refused, failed to start): what happened, in one paragraph."""
    return (f"### abserve {command}: {MARK['invalid']} **{what}** (exit {code})\n\n"
            f"{clip(' '.join(message.split()))}\n")
