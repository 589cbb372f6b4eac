"""Arms started by abserve may fetch media from no http(s) host unless told which: their
arguments, parsed by vLLM 0.32's own server parser, restrict ``allowed_media_domains``, and
vLLM's media connector then refuses a metadata-service URL before any network access.
(No server is started; importing vLLM's parser takes ~15 s on the development machine.)"""

from __future__ import annotations

import pytest
from urllib3.util import parse_url
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.multimodal.media.connector import MediaConnector
from vllm.multimodal.media.image import ImageMediaIO
from vllm.utils.argparse_utils import FlexibleArgumentParser

from abserve.arms.server import NO_MEDIA_DOMAIN, ServerSpec

# imports torch and vLLM: make test runs it, make test-fast does not even collect it
pytestmark = pytest.mark.slow

METADATA = "http://169.254.169.254/latest/meta-data/x.png"


def parsed_domains(spec: ServerSpec) -> list[str] | None:
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(spec.args(8000))
    domains: list[str] | None = args.allowed_media_domains
    return domains


def test_arms_get_no_media_domain_by_default() -> None:
    domains = parsed_domains(ServerSpec(model="/models/tiny"))
    assert domains == [NO_MEDIA_DOMAIN]
    connector = MediaConnector(allowed_media_domains=domains)
    with pytest.raises(ValueError, match="allowed domains"):
        connector.load_from_url(METADATA, ImageMediaIO())


def test_named_domains_are_passed_and_extra_args_still_win() -> None:
    assert parsed_domains(ServerSpec(model="m", allowed_media_domains=["a.example", "b.example"])
                          ) == ["a.example", "b.example"]
    spec = ServerSpec(model="m", extra_args=["--allowed-media-domains", "c.example"])
    assert parsed_domains(spec) == ["c.example"]


def test_an_unrestricted_vllm_would_fetch_the_metadata_url() -> None:
    """Why the flag matters: vLLM's default (no list) lets the URL through its check."""
    connector = MediaConnector(allowed_media_domains=None)
    connector._assert_url_in_allowed_media_domains(parse_url(METADATA))  # no error: fetched
