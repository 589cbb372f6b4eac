"""Session-affinity headers: the names the router forwards are plain header names it does not
set itself, and only plain values are forwarded (and recorded)."""

from __future__ import annotations

import pytest

from abserve.router.affinity import affinity_headers, checked_header_names, header_bytes
from abserve.router.settings import RouterSettings


def test_the_default_names_cover_the_load_production_stack_and_dynamo() -> None:
    settings = RouterSettings(arms={"a": {"url": "http://127.0.0.1:1"}}, primary="a", dev_mode=True)
    assert settings.session_headers == ["x-session-id", "x-user-id", "x-dynamo-session-id"]
    assert checked_header_names([" X-Session-ID", "x-session-id", "x-tenant"]) == [
        "x-session-id", "x-tenant"]


@pytest.mark.parametrize("name", ["authorization", "Host", "content-length", "x-abserve-turn",
                                  "x-request-id", "bad name", ""])
def test_a_header_the_router_sets_or_no_header_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="session header"):
        checked_header_names([name])


def test_only_plain_values_are_forwarded() -> None:
    names = ["x-session-id", "x-user-id", "x-dynamo-session-id"]
    sent = {"x-session-id": "chat-1", "x-user-id": "é", "x-dynamo-session-id": "x" * 257,
            "x-other": "kept out"}
    assert affinity_headers(sent, names) == {"x-session-id": "chat-1"}
    assert header_bytes({"x-session-id": "chat-1"}) == b"x-session-id: chat-1\r\n"
