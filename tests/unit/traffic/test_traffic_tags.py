"""Extra run tags (block, placement) travel from ``run_load(tags=...)`` to request headers."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

import pytest

from abserve.traffic.corpus import CorpusEntry, format_tags, parse_tags
from abserve.traffic.run_state import RunOptions
from abserve.traffic.runner import LoadSpec, locust_args
from abserve.traffic.sender import CONNECT_RETRY_S


def _entry() -> CorpusEntry:
    return CorpusEntry(0, b"{}", {"x-abserve-profile": "p", "x-abserve-items": "2"}, 2, 0, (), 10)


def test_tags_become_prefixed_headers_beside_the_corpus_tags() -> None:
    headers = _entry().headers("run-1", {"block": "3", "placement": "a:0,b:1"})
    assert headers["x-abserve-block"] == "3"
    assert headers["x-abserve-placement"] == "a:0,b:1"
    assert headers["x-abserve-profile"] == "p"
    assert headers["x-abserve-run-id"] == "run-1"
    assert _entry().headers("run-1") == _entry().headers("run-1", {})


def test_tags_round_trip_through_the_option_string() -> None:
    tags = {"block": "0", "placement": "a:0+1,b:2+3"}
    assert parse_tags(format_tags(tags)) == tags
    assert parse_tags("") == {}


@pytest.mark.parametrize("bad", ["block", "Block=1", "profile=x", "block=a\nb", "run-id=x",
                                 "k=" + "v" * 300])
def test_bad_or_reserved_tags_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_tags(bad)


def test_run_load_passes_tags_as_a_locust_option(tmp_path: Path) -> None:
    args = locust_args(LoadSpec("many-items", "http://127.0.0.1:1", requests=4, duration=None, users=1,
                       seed=0, run_id="r", out_dir=tmp_path, shape="closed", rate=0.0,
                       max_error_rate=0.2, model=None, tokenize_url=None, overrides=[],
                       timeout_s=5.0, corpus=None, sweep_rates=None,
                       tags={"block": "1", "placement": "a:1,b:0"}))
    value = args[args.index("--abserve-tags") + 1]
    assert parse_tags(value) == {"block": "1", "placement": "a:1,b:0"}
    plain = locust_args(LoadSpec("many-items", "http://127.0.0.1:1", requests=4, duration=None, users=1,
                        seed=0, run_id="r", out_dir=tmp_path, shape="closed", rate=0.0,
                        max_error_rate=0.2, model=None, tokenize_url=None, overrides=[],
                        timeout_s=5.0, corpus=None, sweep_rates=None))
    assert "--abserve-tags" not in plain


def test_run_options_parse_the_locust_option(tmp_path: Path) -> None:
    ns = Namespace(abserve_shape="closed", abserve_duration=0.0, abserve_requests=4,
                   abserve_set="", abserve_sweep_rates="", abserve_profile="many-items",
                   abserve_corpus="", abserve_corpus_size=4, abserve_rate=0.0, abserve_steps=1,
                   abserve_seed=0, abserve_run_id="r", abserve_out=str(tmp_path),
                   abserve_max_error_rate=0.2, abserve_min_requests=1, abserve_model="m",
                   abserve_tokenize_url="", abserve_timeout=5.0,
                   abserve_tags="block=2;placement=a:0,b:1")
    opts = RunOptions.from_namespace(ns, "http://127.0.0.1:1", 0, 1, "local")
    assert opts.tags == {"block": "2", "placement": "a:0,b:1"}


def test_abserve_run_never_retries_a_refused_request_and_locust_defaults_to_a_window(tmp_path: Path) -> None:
    # abserve run owns its router (it never restarts); the locustfile keeps its default
    args = locust_args(LoadSpec("many-items", "http://127.0.0.1:1", requests=4, duration=None, users=1,
                       seed=0, run_id="r", out_dir=tmp_path, shape="closed", rate=0.0,
                       max_error_rate=0.2, model=None, tokenize_url=None, overrides=[],
                       timeout_s=5.0, corpus=None, sweep_rates=None))
    assert float(args[args.index("--abserve-connect-retry") + 1]) == 0.0
    ns = Namespace(abserve_shape="closed", abserve_duration=0.0, abserve_requests=4,
                   abserve_set="", abserve_sweep_rates="", abserve_profile="many-items",
                   abserve_corpus="", abserve_corpus_size=4, abserve_rate=0.0, abserve_steps=1,
                   abserve_seed=0, abserve_run_id="r", abserve_out=str(tmp_path),
                   abserve_max_error_rate=0.2, abserve_min_requests=1, abserve_model="m",
                   abserve_tokenize_url="", abserve_timeout=5.0, abserve_tags="",
                   abserve_connect_retry=0.0)
    host = "http://127.0.0.1:1"
    assert RunOptions.from_namespace(ns, host, 0, 1, "local").connect_retry_s == 0.0
    del ns.abserve_connect_retry
    assert RunOptions.from_namespace(ns, host, 0, 1, "local").connect_retry_s == CONNECT_RETRY_S
