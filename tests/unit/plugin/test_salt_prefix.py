"""The ``salt-prefix`` mutant breaks prefix reuse exactly as vLLM hashes blocks, and only that.

vLLM is imported at collection (as ``test_lookup``): its first import spawns a child process.
"""

from __future__ import annotations

import os
from types import ModuleType

import pytest
from vllm import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core import kv_cache_utils
from vllm.v1.request import Request

from abserve import vllm_plugin
from abserve.model.telemetry import ProcessTelemetry
from abserve.vllm_plugin import mutants

# imports torch and vLLM: make test runs it, make test-fast does not even collect it
pytestmark = pytest.mark.slow


def test_salt_prefix_gives_every_request_its_own_block_hashes_with_vllms_own_hasher() -> None:
    """Two requests with one prompt share every block hash in vLLM; under ``salt-prefix`` none,
    so the prefix cache can never hand one request's blocks to the other."""
    kv_cache_utils.init_none_hash(sha256)
    hasher = kv_cache_utils.get_request_block_hasher(4, sha256)

    class Salted(Request):  # a subclass: vLLM's own class stays untouched for other tests
        pass

    salted: list[int] = []
    mutants.install_cache_salt(Salted, lambda: salted.append(1))
    mutants.install_cache_salt(Salted, lambda: salted.append(1))  # installing twice wraps once

    def make(cls: type[Request], request_id: str, salt: str | None = None) -> Request:
        return cls(request_id=request_id, prompt_token_ids=list(range(12)), cache_salt=salt,
                   sampling_params=SamplingParams(max_tokens=1), pooling_params=None, block_hasher=hasher)

    plain = [make(Request, "r1"), make(Request, "r2")]
    assert plain[0].block_hashes == plain[1].block_hashes
    assert len(plain[0].block_hashes) == 3
    one, two = make(Salted, "r1"), make(Salted, "r2", salt="user")
    assert len(one.block_hashes) == 3
    assert not set(one.block_hashes) & set(two.block_hashes)
    assert not set(one.block_hashes) & set(plain[0].block_hashes)
    assert two.cache_salt == mutants.salted("r2", "user")
    assert salted == [1, 1]


def test_the_plugin_salts_the_request_module_it_is_given_and_counts_each_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``vllm.v1.request`` is patched (and listed as patched) in a process whose mutant is
    ``salt-prefix``; each salted request counts as an injected fault in its telemetry."""
    state = ProcessTelemetry(pid=os.getpid(), process_name="EngineCore", role="engine", mode="linear",
                             scope="runner", vllm_version=None, mutant="salt-prefix")
    monkeypatch.setattr(vllm_plugin, "_state", state)

    class Salted(Request):
        pass

    module = ModuleType(mutants.SALT_MODULE)
    module.Request = Salted  # type: ignore[attr-defined]
    vllm_plugin.patch_module(module)
    assert state.patched == [mutants.SALT_MODULE]
    request = Salted(request_id="r9", prompt_token_ids=[1, 2, 3],
                     sampling_params=SamplingParams(max_tokens=1), pooling_params=None)
    assert request.cache_salt == mutants.salted("r9", None)
    assert state.counters.faults_injected == 1
