"""Traffic files for the prefix-cache runs: a multi-turn file (OpenAI JSON Lines, one turn per line)
and a Mooncake-style trace whose lines share prefix blocks (``trace_lines``).

Each session opens with a long user message (``words`` everyday words, so its prefill takes many
chunks) and goes on with short turns; turn ``k`` carries the whole history as recorded (the
assistant's answers are fixed text, never an arm's live output), so both arms receive identical
requests and a server whose prefix cache works prefills only what is new. Sessions are marked as
the sessions reader expects (``session_id``, ``turn``); ``tagged=True`` writes the tags instead
(``session``, ``turn``, ``shared-prefix``), for a reader without sessions.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from abserve.traffic.corpus import WORDS


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def conversation_lines(sessions: int, turns: int = 3, *, words: int = 400, seed: int = 0,
                       max_tokens: int = 8, model: str = "tiny-llava", tagged: bool = False
                       ) -> list[dict[str, Any]]:
    """The lines of ``sessions`` sessions of ``turns`` turns each, session after session."""
    rng = random.Random(seed)
    lines: list[dict[str, Any]] = []
    for s in range(1, sessions + 1):
        history: list[dict[str, str]] = []
        for turn in range(1, turns + 1):
            ask = _text(rng, words if turn == 1 else 24)
            history.append({"role": "user", "content": ask})
            body = {"model": model, "messages": list(history), "max_tokens": max_tokens, "temperature": 0,
                    "stream": True}
            shared = "yes" if turn > 1 else "no"
            marks: dict[str, Any] = (
                {"tags": {"session": f"s{s}", "turn": str(turn), "shared-prefix": shared}}
                if tagged else {"session_id": f"s{s}", "turn": turn})
            lines.append({**marks, **body})
            history.append({"role": "assistant", "content": _text(rng, 16)})
    return lines


def write_conversations(path: Path, sessions: int, turns: int = 3, **kw: Any) -> Path:
    """``conversation_lines`` written to ``path`` as JSON Lines."""
    path.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n"
                            for line in conversation_lines(sessions, turns, **kw)))
    return path


def trace_lines(documents: int, readers: int = 4, *, shared_blocks: int = 12, block_size: int = 64,
                output_length: int = 8, gap_ms: int = 500) -> list[dict[str, Any]]:
    """A Mooncake-style trace (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``):
    ``documents`` long prefixes of ``shared_blocks`` blocks, each read by ``readers`` lines in a row
    that add one block of their own, so every line but a document's first shares its prefix."""
    lines: list[dict[str, Any]] = []
    for doc in range(documents):
        shared = [doc * 100 + block for block in range(shared_blocks)]
        for _ in range(readers):
            own = 10_000 + len(lines)
            lines.append({"timestamp": gap_ms * len(lines), "input_length": (shared_blocks + 1) * block_size,
                          "output_length": output_length, "hash_ids": [*shared, own]})
    return lines


def write_trace(path: Path, documents: int, **kw: Any) -> Path:
    """``trace_lines`` written to ``path`` as JSON Lines."""
    path.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n"
                            for line in trace_lines(documents, **kw)))
    return path
