"""The namespaced-hosts harness (``tests.support.netns``): hosts reach each other over the
bridge, a PostgreSQL host serves the others, a killed host's processes are gone, and nothing
the harness made is left after the block, also when the block fails."""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest
from tests.support.netns import postgres_on, private_net, wait_port

TOKEN = "abserve-netns-token"
SERVE = ("import http.server, sys\n"
         "class H(http.server.BaseHTTPRequestHandler):\n"
         "    def do_GET(self):\n"
         "        self.send_response(200); self.end_headers(); self.wfile.write(sys.argv[2].encode())\n"
         "http.server.HTTPServer((sys.argv[1], 8000), H).serve_forever()\n")
pytestmark = [pytest.mark.postgres]  # a PostgreSQL host of its own
GET = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@pytest.mark.timeout(120)
def test_hosts_talk_over_the_bridge_and_vanish_afterwards() -> None:
    with pytest.raises(RuntimeError, match="on purpose"), private_net("a", "b", "db") as hosts:
        a, b = hosts["a"], hosts["b"]
        server = a.popen([sys.executable, "-c", SERVE, a.ip, TOKEN], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        wait_port(b, a.ip, 8000, proc=server)
        got = b.run([sys.executable, "-c", GET, f"http://{a.ip}:8000/"])
        assert got.stdout.strip() == TOKEN, got.stderr
        # b sees only its own link and loopback, in the private range
        links = b.run(["ip", "-o", "-4", "addr"]).stdout
        assert b.ip in links
        assert a.ip not in links
        with postgres_on(hosts["db"]) as url:
            query = ("import sys, psycopg; c = psycopg.connect(sys.argv[1]); "
                     "print(c.execute('select 41 + 1').fetchone()[0])")
            dsn = url.replace("postgresql+psycopg", "postgresql")
            assert b.run([sys.executable, "-c", query, dsn]).stdout.strip() == "42"
            with pytest.raises(psycopg.OperationalError):  # not from this machine's namespace
                psycopg.connect(dsn, connect_timeout=3)
        a.kill()
        assert server.poll() is not None
        assert hosts["a"].ns in _namespaces()
        raise RuntimeError("on purpose: the harness must clean up after a failure")
    assert hosts["a"].ns not in _namespaces()
    assert hosts["b"].ns not in _namespaces()
