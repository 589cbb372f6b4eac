"""``abserve router`` as a subprocess of ``abserve run``: its settings file, start and drain.

The router is its own process (as on a GPU host) so the run measures the same server users
deploy; it is started with the run's API key in its environment only and stopped with SIGTERM,
so it drains the arms and flushes every acknowledged exchange before the judgment reads them.
It is told the run's pid (``parent_pid``): if ``abserve run`` is killed (SIGKILL) and cannot
stop it, the router stops by itself and marks the run ``interrupted`` (``abserve.base.parent_watch``).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from urllib.parse import urlsplit

import httpx
import yaml

from abserve.arms import arm_servers
from abserve.arms.run_paths import RunError, RunPaths, RunRefused
from abserve.arms.server import VllmServer
from abserve.compare.policy import Policy
from abserve.config import ExperimentConfig
from abserve.runs.provenance import start_provenance


def router_settings(config: ExperimentConfig, servers: dict[str, VllmServer], paths: RunPaths,
                    run_id: str, port: int, policy: Policy | None = None) -> dict[str, object]:
    """The router's settings file; with ``policy`` (the one the run is judged with) the run is
    created with it recorded (``abserve.runs.provenance.start_provenance``)."""
    arms, _ = arm_servers.router_arms(config, servers)
    settings: dict[str, object] = {
        "max_images": config.server.max_images, "top_logprobs": 5, **config.router,
        "arms": arms, "primary": config.router.get("primary", config.baseline),  # the arm the client hears
        "run_id": run_id, "run_dir": str(paths.out),
        "database_url": paths.database_url, "host": listen_host(config), "port": port,
        "parent_pid": os.getpid(),  # killed, this run leaves no router behind: abserve.base.parent_watch
    }
    if policy is not None:
        settings["run_provenance"] = start_provenance(config, policy).model_dump(mode="json")
    return settings


ROUTER_API_KEY_ENV = "ABSERVE_ROUTER_API_KEY"  # RouterSettings.api_key from the environment


def run_api_key(config: ExperimentConfig) -> str:
    """The run's router API key: a fresh random one; with router replicas on other hosts
    (``load.replicas``) the one in ``ABSERVE_ROUTER_API_KEY``, which they are given too."""
    if config.load.replicas:
        key = os.environ.get(ROUTER_API_KEY_ENV, "")
        if not key:
            raise RunRefused(f"load.replicas: set {ROUTER_API_KEY_ENV} for abserve run and for "
                             "every replica (abserve router --join): they share the run's key")
        return key
    return secrets.token_urlsafe(24)


def listen_host(config: ExperimentConfig) -> str:
    """Where the run's router listens: loopback, or with load workers on other hosts
    (``load.workers``) the master's bind address, which they reach."""
    return config.load.workers.host if config.load.workers is not None else "127.0.0.1"


def load_url(config: ExperimentConfig, url: str) -> str:
    """The router's URL as the load sends to it: with load workers on other hosts, at the
    address they reach this host at (``LoadWorkers.reachable_host``)."""
    if config.load.workers is None:
        return url
    parts = urlsplit(url)
    return parts._replace(netloc=f"{config.load.workers.reachable_host}:{parts.port}").geturl()


class RouterProcess:
    """``abserve router`` as a subprocess; stopped with SIGTERM so it drains and flushes."""

    def __init__(self, settings: dict[str, object], paths: RunPaths, api_key: str,
                 arms_with_keys: str | None = None) -> None:
        self.config_path = paths.out / "router.yaml"
        self.config_path.write_text(yaml.safe_dump(settings, sort_keys=True))
        host = str(settings.get("host", "127.0.0.1"))
        local = host in ("0.0.0.0", "::") or host.startswith("127.")
        self.url = f"http://{'127.0.0.1' if local else host}:{settings['port']}"
        self.log_path = paths.log("router")
        self.api_key = api_key
        self.arms_with_keys = arms_with_keys  # external arms' keys: for the router's env, never a file
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        env = {**os.environ, "ABSERVE_ROUTER_API_KEY": self.api_key}
        if self.arms_with_keys:
            env["ABSERVE_ROUTER_ARMS"] = self.arms_with_keys
        cmd = [sys.executable, "-m", "abserve", "router", "--config", str(self.config_path)]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RunError(f"router exited ({self.process.returncode}); see {self.log_path}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise RunError(f"router not ready after {timeout_s:.0f} s; see {self.log_path}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
