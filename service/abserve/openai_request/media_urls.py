"""The media-URL policy: what arms may be told to fetch.

``check_media_url``: vLLM servers fetch ``http(s)`` media URLs themselves (an SSRF path,
see CVE-2025-6242), so the router lets through ``data:`` URLs always, ``http(s)`` URLs
only when the host is on the allowlist AND every address it names or resolves to is
globally routable, and nothing else (``file:``, ``ftp:``, no scheme...). Address tricks
are decoded before checking: decimal/hex/octal/short IPv4 (``2130706433``,
``0x7f000001``, ``127.1``), IPv4-mapped/6to4/Teredo IPv6, zone ids, userinfo, percent
escapes in the host.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Collection
from urllib.parse import urlsplit

from abserve.openai_request.errors import RouterError

_HOST_RE = re.compile(r"^[a-z0-9.-]+$")
_LEGACY_V4_RE = re.compile(r"^(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}$")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_ip_literal(host: str) -> IPAddress | None:
    """The address a host string denotes if it is any IP literal form, else None."""
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        pass
    if _LEGACY_V4_RE.match(host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def is_public(addr: IPAddress) -> bool:
    """True when ``addr`` (and any IPv4 it embeds) is globally routable."""
    if isinstance(addr, ipaddress.IPv6Address):
        for inner in (addr.ipv4_mapped, addr.sixtofour):
            if inner is not None and not is_public(inner):
                return False
        if addr.teredo is not None:
            return False
    return bool(addr.is_global) and not addr.is_multicast


def _refuse(reason: str) -> RouterError:
    return RouterError(400, f"media URL refused: {reason}", param="image_url")


def media_host(url: str, allowed_hosts: Collection[str]) -> str | None:
    """Check a media URL's form; return the host to resolve (None for ``data:``)."""
    if url[:5].lower() == "data:":
        return None
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError as exc:
        raise _refuse("malformed URL") from exc
    if parts.scheme.lower() not in ("http", "https"):
        raise _refuse("only data: URLs, or http(s) URLs to allowed hosts, are accepted")
    if not host or "@" in parts.netloc or "%" in parts.netloc:
        raise _refuse("URL host is missing or disguised")
    host = host.lower().rstrip(".")
    if host not in allowed_hosts:
        raise _refuse("host is not on the allowlist")
    literal = parse_ip_literal(host)
    if literal is None and not _HOST_RE.match(host):
        raise _refuse("host name has characters outside [a-z0-9.-]")
    if literal is not None and not is_public(literal):
        raise _refuse("address is not public")
    return host


async def check_media_url(url: str, allowed_hosts: Collection[str]) -> None:
    """Raise 400 unless the URL is ``data:`` or an allowed host with public addresses only."""
    host = media_host(url, allowed_hosts)
    if host is None or parse_ip_literal(host) is not None:
        return
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise _refuse("host does not resolve") from exc
    for info in infos:
        addr = parse_ip_literal(str(info[4][0]))
        if addr is None or not is_public(addr):
            raise _refuse("host resolves to an address that is not public")
