""""What changed since the last accepted release" names real changes only (issue 57, item 8): two
sign-offs of one build whose servers listened on other random ports show no change, a flag's
value is never a flag of its own, and a real flag change is named with its value."""

from __future__ import annotations

from tests.support import ledger_site as ls
from tests.unit.ledger.test_ledger_site_views import accepted, signoff

from abserve.ledger.site_changed import ChangedPage, changed_page
from abserve.model.server_flags import server_flags

# A managed arm's command line as abserve records it (abserve.arms.server.ServerSpec.args).
ARGS = ("--model", "/builds/job-{job}/.abserve/models/tiny-llava", "--served-model-name", "tiny",
        "--host", "127.0.0.1", "--port", "{port}", "--max-model-len", "2048", "--limit-mm-per-prompt",
        '{{"image": 8}}', "--seed", "0", "--allowed-media-domains", "127.0.0.1", "localhost",
        "--enable-prefix-caching")


def argv(port: int, job: int = 1, *extra: str) -> tuple[str, ...]:
    return (*(a.format(port=port, job=job) for a in ARGS), *extra)


def page(accepted_args: tuple[str, ...], latest_args: tuple[str, ...]) -> ChangedPage:
    old = ls.entry("old", t=ls.T0, candidate=ls.arm("b", "candidate", "0.32.0", args=accepted_args))
    new = ls.entry("new", t=ls.T0 + 9, candidate=ls.arm("b", "candidate", "0.32.0", args=latest_args))
    return changed_page("cpu-default", [signoff(new), signoff(old)], [accepted(old)],
                        {"old": old, "new": new}, {}, "config-x.html")


def test_builds_that_differ_only_in_their_ports_show_no_change() -> None:
    c = page(argv(55979, job=1), argv(50175, job=2))
    assert (c.flags_added, c.flags_removed) == ([], [])
    assert [f.label for f in c.fields if f.changed] == []
    (args,) = [f for f in c.fields if f.label == "server arguments"]
    assert "55979" not in args.accepted
    assert "50175" not in args.latest


def test_a_real_flag_change_is_named_with_its_value() -> None:
    c = page(argv(55979), argv(50175, 1, "--max-num-seqs", "8", "--kv-cache-dtype=fp8"))
    assert c.flags_added == ["--kv-cache-dtype fp8", "--max-num-seqs 8"]
    assert c.flags_removed == []
    assert [f.label for f in c.fields if f.changed] == ["server arguments"]
    c = page(argv(55979, 1, "--seed", "1"), argv(50175, 1, "--seed", "-1"))  # a value that starts with "-"
    assert (c.flags_added, c.flags_removed) == (["--seed -1"], ["--seed 1"])


def test_server_flags_keep_each_value_with_its_flag() -> None:
    assert server_flags(argv(50175)) == [
        "--max-model-len 2048", '--limit-mm-per-prompt {"image": 8}', "--seed 0",
        "--allowed-media-domains 127.0.0.1 localhost", "--enable-prefix-caching"]
    assert server_flags(["--api-key", "sk-123", "--port=8000", "--dtype=bfloat16"]) == ["--dtype bfloat16"]
