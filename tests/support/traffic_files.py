"""Sample traffic files of every format ``abserve.traffic.sources`` reads, written by the tests
themselves (images drawn with PIL, nothing downloaded): OpenAI request JSONL (chat and
completions, arrival times, tags), ``vllm bench serve`` custom / custom_mm JSONL and ShareGPT
JSON, and abserve's own corpus JSONL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PIL import Image

from abserve.traffic.corpus import build_corpus
from abserve.traffic.corpus import write_jsonl as write_corpus
from abserve.traffic.profiles import load_profile

WORDS = "the morning light came slowly over hills and small town woke to sound of bells".split()


def write_images(folder: Path, n: int = 3, size: int = 28) -> list[Path]:
    """``n`` small PNG/JPEG images (distinct colours) under ``folder/images``."""
    out = folder / "images"
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(n):
        fmt = "png" if k % 2 == 0 else "jpeg"
        path = out / f"img{k}.{'png' if fmt == 'png' else 'jpg'}"
        Image.new("RGB", (size, size), (40 * k % 256, 90, 200 - 30 * k % 200)).save(path, fmt)
        paths.append(path)
    return paths


def text(k: int, n: int = 12) -> str:
    return " ".join(WORDS[(k + i) % len(WORDS)] for i in range(n))


def chat_body(k: int, images: list[str], model: str = "gateway-model", **extra: Any) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text(k)}]
    content += [{"type": "image_url", "image_url": {"url": ref}} for ref in images]
    return {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 8,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}, **extra}


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def openai_file(folder: Path, n: int = 6, gap_s: float = 0.05) -> Path:
    """Chat requests with 0-2 local images (relative paths), one completions request, arrival
    timestamps ``gap_s`` apart (ISO and epoch mixed) and a tag per line."""
    write_images(folder)
    rows: list[Any] = []
    for k in range(n):
        refs = [f"images/img{j}.{'png' if j % 2 == 0 else 'jpg'}" for j in range(k % 3)]
        row: dict[str, Any] = {"body": chat_body(k, refs), "url": "/v1/chat/completions",
                               "timestamp": 1_700_000_000 + k * gap_s, "tags": {"tenant": f"t{k % 2}"}}
        rows.append(row)
    rows.append({"model": "gateway-model", "prompt": text(99), "max_tokens": 4, "temperature": 0,
                 "timestamp": 1_700_000_000 + n * gap_s})
    return write_jsonl(folder / "gateway.jsonl", rows)


def bench_custom_file(folder: Path) -> Path:
    """``vllm bench serve`` custom and custom_mm lines (text, image_files, interleaved content)."""
    write_images(folder)
    rows = [{"prompt": text(1), "output_tokens": 6},
            {"prompt": text(2), "image_files": ["images/img0.png", "images/img1.jpg"]},
            {"content": [{"type": "text", "text": "compare "}, {"type": "image", "image": "images/img2.png"},
                         {"type": "text", "text": " and "},
                         {"type": "image_url", "image_url": {"url": "images/img0.png"}}]}]
    return write_jsonl(folder / "custom.jsonl", rows)


def sharegpt_file(folder: Path, n: int = 4) -> Path:
    """A ShareGPT JSON array (pretty-printed over many lines) with image paths."""
    write_images(folder)
    rows = []
    for k in range(n):
        entry: dict[str, Any] = {"id": f"c{k}", "conversations": [
            {"from": "human", "value": ("<image>\n" if k % 2 else "") + text(k)},
            {"from": "gpt", "value": text(k + 1, 5)}]}
        if k:
            entry["image"] = "images/img1.jpg" if k % 2 else ["images/img0.png", "images/img2.png"]
        rows.append(entry)
    path = folder / "sharegpt.json"
    path.write_text(json.dumps(rows, indent=2))
    return path


def corpus_file(folder: Path, n: int = 4) -> Path:
    """abserve's own corpus JSONL (``abserve corpus --out``) of the many-items profile."""
    profile = load_profile("many-items", {"images.count": [1, 3], "max_tokens": 8})
    path = folder / "corpus.jsonl"
    write_corpus(build_corpus(profile, 3, n, "tiny-llava"), path)
    return path


def session_rows(sessions: int = 2, turns: int = 3, think_s: float = 0.0) -> list[dict[str, Any]]:
    """OpenAI request lines of ``sessions`` sessions (``session_id``, ``turn``, ``think_s``),
    each turn's body with the recorded history, sessions one after another."""
    rows: list[dict[str, Any]] = []
    for s in range(sessions):
        messages: list[dict[str, Any]] = [{"role": "system", "content": f"be brief {s}"}]
        for t in range(1, turns + 1):
            messages = [*messages, {"role": "user", "content": text(10 * s + t)}]
            rows.append({**chat_body(0, []), "messages": messages, "session_id": f"chat-{s}",
                         "turn": t, **({"think_s": think_s} if t > 1 else {})})
            messages = [*messages, {"role": "assistant", "content": text(t, 4)}]
    return rows


def sharegpt_sessions_file(folder: Path) -> Path:
    """A ShareGPT array: a conversation of three human turns (a system turn, two images, one
    placed by a mark in the second turn) and one of a single turn."""
    write_images(folder)
    rows = [{"id": "conv-a", "think_s": 0.5, "image": ["images/img0.png", "images/img1.jpg"],
             "conversations": [{"from": "system", "value": "you describe images"},
                               {"from": "human", "value": text(1)},
                               {"from": "gpt", "value": "reply one"},
                               {"from": "human", "value": "and this <image> one?"},
                               {"from": "gpt", "value": "reply two"},
                               {"from": "human", "value": text(3), "think_s": 2}]},
            {"id": "single", "conversations": [{"from": "human", "value": text(4)},
                                               {"from": "gpt", "value": "only"}]}]
    path = folder / "chats.json"
    path.write_text(json.dumps(rows, indent=2))
    return path
