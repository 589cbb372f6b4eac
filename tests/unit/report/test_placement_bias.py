"""``abserve placement-bias RUN_ID``: the bias an A/A' run measured, read from a real SQLite store.

Synthetic runs with a known answer (``tests.support.records_factory``): arm b slower than a by a
known shift (the printed interval holds it, the printed bias is at least it), the same build
with the same timings (bias zero) or independent noise (bias small), and every refusal (exit 4,
one line): not two arms, two baselines, different builds, rotated arms, too few pairs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from tests.support.records_factory import ab_run, provenance, run_info
from typer.testing import CliRunner

from abserve.cli import app
from abserve.compare import load_policy
from abserve.compare.placement_bias import BiasRefused, BiasRow, aa_roles, round_up, snippet
from abserve.model.provenance import RunProvenance
from abserve.model.records import ArmProvenance, Exchange
from abserve.report.placement_bias import measure
from abserve.store import Store

ROOT = Path(__file__).resolve().parents[3]
GPU_POLICY = ROOT / "configs/policy/gpu.yaml"
TTFT_SHIFT, ITL_SHIFT = 0.004, 0.0005  # b slower than a (seconds); noise sd 2 ms and 0.4 ms
SAME = {"a": provenance(None), "b": provenance(None)}


def store_run(db: Path, run_id: str, exchanges: Sequence[Exchange],
              arms: dict[str, ArmProvenance] | None = None, policy_sha256: str | None = None) -> str:
    """Write one completed run into the SQLite store at ``db``; its URL."""
    url = f"sqlite:///{db}"
    with Store.open(url) as store:
        info = run_info(SAME if arms is None else arms, run_id=run_id, status="running")
        if policy_sha256:
            info.provenance = RunProvenance.model_validate(
                {**info.provenance.model_dump(), "policy_sha256": policy_sha256})
        store.create_run(info)
        store.write_exchanges([ex.model_copy(update={"run_id": run_id}) for ex in exchanges])
        store.finish_run(run_id, "completed")
    return url


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["placement-bias", *args])
    return result.exit_code, result.output


def pasted(text: str) -> dict[str, float]:
    """The ``unknown_placement_bias`` of the snippet the command printed (its last line)."""
    line = text.strip().splitlines()[-1]
    values = dict(yaml.safe_load(line)["sequential"]["unknown_placement_bias"])
    assert all(isinstance(v, float) for v in values.values()), line  # 9e-05 would be a string
    return values


def twin(exchanges: list[Exchange]) -> list[Exchange]:
    """Each exchange with arm b's outcome an exact copy of arm a's (the same timings)."""
    return [ex.model_copy(update={"arms": {"a": ex.arms["a"],
                                           "b": ex.arms["a"].model_copy(update={"arm": "b"})}})
            for ex in exchanges]


def test_a_known_shift_is_inside_the_interval_and_below_the_printed_bias(tmp_path: Path) -> None:
    url = store_run(tmp_path / "abserve.db", "shifted",
                    ab_run(400, ttft_shift=TTFT_SHIFT, itl_shift=ITL_SHIFT, arms=("a", "b"), seed=4))
    measured = measure(url, "shifted", load_policy(GPU_POLICY))
    rows = {r.metric: r for r in measured.rows}
    assert set(rows) == {"tpot", "ttft", "itl", "e2e"}
    for metric, shift in (("ttft", TTFT_SHIFT), ("tpot", ITL_SHIFT), ("itl", ITL_SHIFT)):
        row = rows[metric]
        assert row.pairs == 390  # after the 10 warm-up requests
        assert row.low is not None
        assert row.high is not None
        assert row.bias is not None
        assert row.low <= shift <= row.high, (metric, row)
        assert shift <= row.bias < 2 * shift, (metric, row)  # brackets it, and is not absurd

    rc, text = invoke("shifted", "--db", url, "--policy", str(GPU_POLICY))
    assert rc == 0, text
    bias = pasted(text)
    assert bias["ttft"] >= TTFT_SHIFT
    assert bias["tpot"] >= ITL_SHIFT
    assert bias["itl"] >= ITL_SHIFT
    assert bias["ttft"] == round_up(rows["ttft"].bias or 0.0)
    assert "arm b against baseline a" in text
    assert "95% anytime-valid intervals" in text
    mine = tmp_path / "my-gpu.yaml"  # the line pasted as is into a policy that extends gpu.yaml
    mine.write_text(f"extends: {GPU_POLICY}\nname: my-gpu\n{text.strip().splitlines()[-1]}\n")
    policy = load_policy(mine)
    assert policy.sequential.unknown_placement_bias == bias
    assert policy.sequential.drift == "guard"  # the rest of gpu.yaml's sequential block is kept


def test_the_same_build_with_the_same_timings_prints_a_bias_of_zero(tmp_path: Path) -> None:
    url = store_run(tmp_path / "abserve.db", "twins", twin(ab_run(200, arms=("a", "b"), seed=5)))
    rc, text = invoke("twins", "--db", url, "--policy", str(GPU_POLICY))
    assert rc == 0, text
    assert pasted(text) == {"tpot": 0.0, "ttft": 0.0, "itl": 0.0, "e2e": 0.0}


def test_the_same_build_with_its_own_noise_prints_a_small_bias(tmp_path: Path) -> None:
    url = store_run(tmp_path / "abserve.db", "aa", ab_run(400, arms=("a", "b"), seed=6))
    rc, text = invoke("aa", "--db", url, "--policy", str(GPU_POLICY))
    assert rc == 0, text
    bias = pasted(text)
    assert 0 < bias["ttft"] < 0.05 * 0.05  # under 5% of the 50 ms TTFT: a usable bound
    assert 0 < bias["tpot"] < 0.05 * 0.01


def test_the_store_and_policy_are_found_as_abserve_report_finds_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the policy the run recorded is looked for under configs/
    runs = tmp_path / "runs"
    (runs / "latest").mkdir(parents=True)
    digest = hashlib.sha256(GPU_POLICY.read_bytes()).hexdigest()
    store_run(runs / "latest" / "abserve.db", "found", ab_run(200, arms=("a", "b"), seed=7),
              policy_sha256=digest)
    rc, text = invoke("found", "--runs", str(runs))
    assert rc == 0, text
    assert f"store: {runs / 'latest' / 'abserve.db'}" in text
    assert "policy: gpu from" in text
    assert set(pasted(text)) == {"tpot", "ttft", "itl", "e2e"}


def rotated(n: int) -> list[Exchange]:
    """Exchanges in blocks of 20 whose arms swap places every block (a counterbalanced design)."""
    out = []
    for ex in ab_run(n, arms=("a", "b"), seed=8):
        block = int(ex.request_id.removeprefix("req-")) // 20
        where = "a:0,b:1" if block % 2 == 0 else "a:1,b:0"
        out.append(ex.model_copy(update={"tags": {**ex.tags, "block": str(block), "placement": where}}))
    return out


@pytest.mark.parametrize(("exchanges", "arms", "words"), [
    (ab_run(200, seed=1), None, "has 3 arms (a, a2, b)"),
    (ab_run(200, arms=("a", "b"), seed=1),
     {"a": ArmProvenance(role="baseline"), "b": ArmProvenance(role="baseline")}, "2 baseline arms"),
    (ab_run(200, arms=("a", "b"), seed=1), {"a": provenance("linear"), "b": provenance("bisect")},
     "is not an A/A' run: arms a and b differ (expected_lookup linear vs bisect)"),
    (rotated(200), None, "rotated its arms between placements"),
    (ab_run(35, arms=("a", "b"), seed=1), None, "too few paired requests to bound a bias: at most 25"),
])
def test_a_run_that_cannot_give_a_bias_is_refused_in_one_line(
        tmp_path: Path, exchanges: list[Exchange], arms: dict[str, ArmProvenance] | None, words: str) -> None:
    url = store_run(tmp_path / "abserve.db", "r", exchanges, arms)
    rc, text = invoke("r", "--db", url, "--policy", str(GPU_POLICY))
    assert rc == 4, text
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, text
    assert words in errors[0], text
    assert "unknown_placement_bias" not in text


def test_an_unknown_run_or_store_is_refused(tmp_path: Path) -> None:
    url = store_run(tmp_path / "abserve.db", "r", ab_run(40, arms=("a", "b"), seed=1))
    rc, text = invoke("nope", "--db", url, "--policy", str(GPU_POLICY))
    assert rc == 4
    assert "no run 'nope'" in text
    rc, text = invoke("r", "--db", f"sqlite:///{tmp_path / 'missing.db'}", "--policy", str(GPU_POLICY))
    assert rc == 4
    assert "no store at" in text


def test_roles_come_from_the_run_else_the_arm_named_a() -> None:
    info = run_info({"x": ArmProvenance(role="candidate"), "y": ArmProvenance(role="baseline")})
    roles = aa_roles(info, ())
    assert (roles.baseline, roles.candidate, roles.floor) == ("y", "x", None)
    bare = run_info({})
    roles = aa_roles(bare, ["b", "a"])  # a by-hand run: arms only in its exchanges
    assert (roles.baseline, roles.candidate) == ("a", "b")
    with pytest.raises(BiasRefused, match="has 0 arms"):
        aa_roles(bare, [])


@pytest.mark.parametrize(("value", "up"), [
    (0.000712, 0.00072), (0.0035, 0.0035), (0.1, 0.1), (0.10001, 0.11), (12.31, 13.0), (0.0, 0.0)])
def test_round_up_keeps_two_significant_digits_and_never_rounds_down(value: float, up: float) -> None:
    assert round_up(value) == up
    assert round_up(value) >= value


def test_the_snippet_is_yaml_floats_even_for_tiny_biases() -> None:
    rows = [BiasRow("tpot", 100, 0.0, -0.00009, 0.00008, True), BiasRow("ttft", 100, 0.0, -1.0, 0.2, True),
            BiasRow("itl", 10, 0.0, -0.1, 0.1, False)]
    text = snippet(rows)
    assert text == "sequential: {unknown_placement_bias: {tpot: 0.00009, ttft: 1.0}}"
    assert yaml.safe_load(text) == {"sequential": {"unknown_placement_bias": {"tpot": 9e-05, "ttft": 1.0}}}
