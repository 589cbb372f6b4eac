"""The tiny LLaVA builder: same bytes every build, the layout vLLM loads, useful outputs.

One default build is shared by the module (about 5 s); the determinism test makes a second one
in a fresh interpreter with another hash seed, so per-process randomness would show.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from pydantic import ValidationError
from safetensors import safe_open
from typer.testing import CliRunner

from abserve.arms import tiny_model as tm
from abserve.cli import app

# imports torch and transformers: make test runs it, make test-fast does not even collect it
pytestmark = pytest.mark.slow

PROMPTS = (
    "Describe the picture in detail.",
    "The quick brown fox jumps over the lazy dog. What do you see?",
    "Count the red squares in every frame, then summarize the images above in one sentence.",
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tm.build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def loaded(built: Path) -> tuple[Any, Any]:
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    torch.set_num_threads(1)
    processor = AutoProcessor.from_pretrained(str(built))
    model = LlavaForConditionalGeneration.from_pretrained(str(built)).eval()
    return processor, model


def _images(count: int, seed: int) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (28, 28, 3), dtype=np.uint8)) for _ in range(count)]


def _inputs(processor: Any, images: list[Image.Image], text: str) -> Any:
    content = [{"type": "image"}] * len(images) + [{"type": "text", "text": text}]
    prompt = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
    return processor(text=prompt, images=images or None, return_tensors="pt", add_special_tokens=False)


def _file_digests(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_tokens_per_image_follows_image_and_patch_size() -> None:
    assert tm.TinyModelSpec().tokens_per_image == 4
    assert tm.TinyModelSpec(image_size=112, patch_size=14).tokens_per_image == 64
    with pytest.raises(ValidationError, match="not a multiple of patch_size"):
        tm.TinyModelSpec(image_size=30, patch_size=14)
    with pytest.raises(ValidationError, match="not divisible by 3 heads"):
        tm.TinyModelSpec(text_heads=3)
    with pytest.raises(ValidationError):
        tm.TinyModelSpec(weight_std=0.0)


def test_spec_hash_tracks_every_field() -> None:
    base = tm.TinyModelSpec()
    assert base.spec_hash() == tm.TinyModelSpec().spec_hash()
    assert base.spec_hash() != tm.TinyModelSpec(seed=base.seed + 1).spec_hash()
    assert base.spec_hash() != tm.TinyModelSpec(weight_std=0.1).spec_hash()


@pytest.mark.slow
@pytest.mark.process
def test_build_is_byte_identical_across_processes(built: Path, tmp_path: Path) -> None:
    other = tmp_path / "again"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    code = "import sys; from abserve.arms.tiny_model import build_tiny_model as b; b(sys.argv[1])"
    subprocess.run([sys.executable, "-c", code, str(other)], check=True, env=env, timeout=300)
    first, second = _file_digests(built), _file_digests(other)
    assert first == second
    assert {"config.json", "model.safetensors", "tokenizer.json", tm.SPEC_FILE} <= set(first)
    assert tm.model_identity_hash(built) == tm.model_identity_hash(other)


def test_checkpoint_has_the_layout_vllm_loads(built: Path) -> None:
    with safe_open(str(built / "model.safetensors"), framework="pt") as handle:
        keys = list(handle.keys())
        dtypes = {handle.get_tensor(k).dtype for k in keys}
    prefixes = {k.split(".")[0] for k in keys}
    assert prefixes == {"vision_tower", "multi_modal_projector", "language_model"}
    assert all(k.startswith("vision_tower.vision_model.") for k in keys if "vision" in k)
    assert "language_model.lm_head.weight" in keys
    assert dtypes == {torch.float32}
    config = json.loads((built / "config.json").read_text())
    assert config["architectures"] == ["LlavaForConditionalGeneration"]
    assert config["image_seq_length"] == 4
    assert config["text_config"]["max_position_embeddings"] == 8192


def test_chat_template_puts_one_image_token_per_image_part(loaded: tuple[Any, Any]) -> None:
    processor, _ = loaded
    content = [
        {"type": "text", "text": "first"},
        {"type": "image_url", "image_url": {"url": "data:,"}},
        {"type": "text", "text": "second"},
        {"type": "image"},
    ]
    prompt = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
    assert prompt == "<s>USER: first<image>second<image>\nASSISTANT:"
    encoded = processor(text=prompt, images=_images(2, 0), return_tensors="pt", add_special_tokens=False)
    ids = encoded["input_ids"][0]
    assert int((ids == processor.tokenizer.bos_token_id).sum()) == 1
    image_id = processor.tokenizer.convert_tokens_to_ids(tm.IMAGE_TOKEN)
    assert int((ids == image_id).sum()) == 2 * tm.TinyModelSpec().tokens_per_image


@pytest.mark.parametrize("count", [0, 1, 8, 64])
def test_greedy_outputs_are_not_degenerate(loaded: tuple[Any, Any], count: int) -> None:
    processor, model = loaded
    for text in PROMPTS:
        inputs = _inputs(processor, _images(count, 1), text)
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=24, do_sample=False)
        new = out[0, inputs["input_ids"].shape[1] :].tolist()
        assert len(new) == 24
        most_common = max(new.count(t) for t in set(new))
        assert len(set(new)) >= 8, (text, new)
        assert most_common <= 6, (text, new)


def test_every_image_of_64_moves_the_next_token_logprobs(loaded: tuple[Any, Any]) -> None:
    processor, model = loaded
    images, spare = _images(64, 2), _images(1, 3)[0]
    text = "Describe each image briefly."

    def batch_logprobs(variants: list[list[Image.Image]]) -> torch.Tensor:
        encoded = [_inputs(processor, v, text) for v in variants]
        stacked = {k: torch.cat([e[k] for e in encoded]) for k in encoded[0]}
        with torch.no_grad():
            return torch.log_softmax(model(**stacked).logits[:, -1], dim=-1)

    base = batch_logprobs([images])[0]
    replaced = batch_logprobs([[*images[:i], spare, *images[i + 1 :]] for i in range(64)])
    dropped = batch_logprobs([images[:i] + images[i + 1 :] for i in range(64)])
    for variants in (replaced, dropped):
        change = (variants - base).abs().amax(dim=-1)
        assert float(change.min()) > 1e-3


def test_ensure_builds_only_when_missing_or_spec_changed(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tm.TinyModelSpec] = []
    real_build = tm.build_tiny_model

    def counting_build(out_dir: Path, spec: tm.TinyModelSpec | None = None) -> Path:
        calls.append(spec or tm.TinyModelSpec())
        return real_build(out_dir, spec)

    monkeypatch.setattr(tm, "build_tiny_model", counting_build)
    target = tmp_path / "model"
    shutil.copytree(built, target)
    original = tm.model_identity_hash(target)

    assert tm.ensure_tiny_model(target) == target
    assert calls == []

    reseeded = tm.TinyModelSpec(seed=7)
    tm.ensure_tiny_model(target, reseeded)
    assert calls == [reseeded]
    assert tm.stored_spec_hash(target) == reseeded.spec_hash()
    assert tm.model_identity_hash(target) != original
    tm.ensure_tiny_model(target, reseeded)
    assert len(calls) == 1

    (target / tm.SPEC_FILE).write_text("not json")
    assert tm.stored_spec_hash(target) is None
    tm.ensure_tiny_model(target)
    assert len(calls) == 2
    assert tm.model_identity_hash(target) == original


@pytest.mark.process
def test_ensure_waits_for_a_build_in_another_process(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another process holds the model's lock (it is building), ensure waits, then finds
    the finished model and builds nothing itself."""
    target = tmp_path / "model"
    lock_file = tmp_path / ".model.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time\n"
         f"f = open({str(lock_file)!r}, 'a'); fcntl.flock(f, fcntl.LOCK_EX)\n"
         "print('locked', flush=True); sys.stdin.readline()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None
    assert holder.stdin is not None
    assert holder.stdout.readline().strip() == "locked"
    calls: list[Path] = []

    def recording_build(out_dir: Path, spec: tm.TinyModelSpec | None = None) -> Path:
        calls.append(out_dir)
        return out_dir

    monkeypatch.setattr(tm, "build_tiny_model", recording_build)
    worker = threading.Thread(target=tm.ensure_tiny_model, args=(target,))
    worker.start()
    worker.join(timeout=1.0)
    assert worker.is_alive(), "ensure_tiny_model did not wait for the other process's lock"
    shutil.copytree(built, target)  # what the other process built
    holder.stdin.write("done\n")
    holder.stdin.flush()
    holder.wait(timeout=30)
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert calls == []


def test_identity_hash_sees_any_changed_byte(built: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    assert tm.model_identity_hash(copy) == tm.model_identity_hash(built)
    (copy / "generation_config.json").write_text("{}\n")
    assert tm.model_identity_hash(copy) != tm.model_identity_hash(built)
    with pytest.raises(FileNotFoundError):
        tm.model_identity_hash(tmp_path / "absent")


def test_cli_build_model_reuses_a_matching_directory(built: Path, tmp_path: Path) -> None:
    target = tmp_path / "cli-model"
    shutil.copytree(built, target)
    before = {p.name: p.stat().st_mtime_ns for p in target.iterdir()}
    result = CliRunner().invoke(app, ["build-model", "--out", str(target)])
    assert result.exit_code == 0, result.output
    assert "tokens per image: 4" in result.output
    assert tm.model_identity_hash(built) in result.output
    assert {p.name: p.stat().st_mtime_ns for p in target.iterdir()} == before
