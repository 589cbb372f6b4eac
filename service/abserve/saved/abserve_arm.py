"""Reader of one arm of a stored abserve run (``RUN_ID:ARM``), so this month's candidate can be
set against last month's baseline run.

The store is ``--db URL`` or, without it, the one SQLite store under ``runs/`` that holds the
run (``abserve.report.locate.find_store``, as ``abserve report`` finds it). Exchanges are read
page by page as stored (``Store.iter_raw_exchanges``: token data as packed columns, never
validated into one object per token). For the arm: TTFT, TPOT, end-to-end time and every
inter-token gap from the router's clock (as ``abserve.compare.latency`` measures them), the
output token ids and text for equality, prompt and output token counts from the usage.

``prompt_key``: from the stored prompt text and image hashes (``abserve.saved.keys``) when the
router stored the text (``store_prompt_text``), so it matches other tools' keys; otherwise from
the request fingerprint (BLAKE3 of the whole request, images hashed), which matches only
another abserve run without stored text. Two abserve runs judged together should therefore
agree on ``store_prompt_text``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from abserve.model.records import RunInfo
from abserve.model.token_columns import ArmColumns, RawExchange, slim_outcome
from abserve.saved.keys import prompt_key, tpot
from abserve.saved.model import SavedRequest, SavedRun, SavedRunError, SavedRunHeader
from abserve.store import Store
from abserve.store.layout import StoreError


def split_source(source: str) -> tuple[str, str] | None:
    """``(run_id, arm)`` of ``RUN_ID:ARM``; None when the source has no such form."""
    run_id, sep, arm = source.rpartition(":")
    if not sep or not run_id or not arm or "/" in arm:
        return None
    return run_id, arm


def store_url(run_id: str, db: str | None, runs: Path, source: str) -> str:
    """The store that holds ``run_id``: ``db``, else the one SQLite file under ``runs``."""
    if db is not None:
        if db.startswith("sqlite:///") and not Path(db.removeprefix("sqlite:///")).exists():
            raise SavedRunError(f"{source}: no store at {db.removeprefix('sqlite:///')}")
        return db
    from abserve.report.locate import LocateError, find_store

    try:
        return f"sqlite:///{find_store(run_id, runs)}"
    except LocateError as exc:
        raise SavedRunError(f"{source}: {exc}") from None


def _model(run: RunInfo, arm: str) -> str | None:
    for facts in (run.arms[arm].model if arm in run.arms else {}, run.provenance.model):
        for name in ("served_name", "id", "path"):
            if facts.get(name):
                return str(facts[name])
    return None


def read(source: str, db: str | None, runs: Path = Path("runs")) -> SavedRun:
    """The requests arm ``ARM`` of stored run ``RUN_ID`` served (``source`` is ``RUN_ID:ARM``)."""
    parts = split_source(source)
    if parts is None:
        raise SavedRunError(f"{source}: not RUN_ID:ARM")
    run_id, arm = parts
    url = store_url(run_id, db, runs, source)
    try:
        with Store.open(url) as store:
            run = store.get_run(run_id)
            count = store.count_exchanges(run_id) if run is not None else 0
    except StoreError as exc:
        raise SavedRunError(f"{source}: the store cannot be read ({exc})") from None
    if run is None:
        raise SavedRunError(f"{source}: no run {run_id!r} in the store")
    if run.arms and arm not in run.arms:
        raise SavedRunError(f"{source}: run {run_id!r} has no arm {arm!r} (its arms: "
                            f"{', '.join(sorted(run.arms))})")
    if count == 0:
        raise SavedRunError(f"{source}: run {run_id!r} recorded no exchanges")
    header = SavedRunHeader(tool="abserve", source=source, model=_model(run, arm), started_at=run.started_at,
                            duration_s=None if run.ended_at is None else run.ended_at - run.started_at)
    return SavedRun(header, _requests(url, run_id, arm, source))


def _requests(url: str, run_id: str, arm: str, source: str) -> Iterator[SavedRequest]:
    """The arm's requests, page by page from a store opened for this pass alone."""
    seen = 0
    try:
        with Store.open(url) as store:
            for raw in store.iter_raw_exchanges(run_id):
                columns = raw.arms.get(arm)
                if columns is not None:
                    seen += 1
                    yield _request(raw, columns)
    except StoreError as exc:
        raise SavedRunError(f"{source}: the store cannot be read ({exc})") from None
    if seen == 0:  # a run that recorded no arm list: the arm named is known only here
        raise SavedRunError(f"{source}: no exchange of run {run_id!r} went to arm {arm!r}")


def _key(raw: RawExchange) -> str:
    if raw.prompt_text is not None:
        return prompt_key(raw.prompt_text, raw.image_hashes)
    return hashlib.sha256(f"abserve-fingerprint:{raw.fingerprint}".encode()).hexdigest()


def _ids(columns: ArmColumns) -> tuple[int, ...] | None:
    if not columns.packed:
        ids = columns.doc.get("token_ids") or []
        return None if any(i is None for i in ids) else tuple(int(i) for i in ids)
    values, mask = columns.array("ids"), columns.array("idsnone")
    if values is None or (mask is not None and bool(np.any(mask))):
        return None
    return tuple(int(i) for i in values.tolist())


def _text(columns: ArmColumns) -> str:
    if not columns.packed:
        return str(columns.doc.get("text") or "")
    text = columns.array("text")
    return "" if text is None else text.tobytes().decode("utf-8", "surrogatepass")


def _request(raw: RawExchange, columns: ArmColumns) -> SavedRequest:
    slim = slim_outcome(columns)
    usage = slim.usage or {}
    inputs = usage.get("prompt_tokens")
    key = _key(raw)
    if not slim.ok or slim.truncated or slim.t_first_token is None:
        error = slim.error_class or ("truncated" if slim.truncated else f"HTTP {slim.status}")
        return SavedRequest(ok=False, error=error, input_tokens=inputs, prompt_key=key)
    outputs = int(usage["completion_tokens"]) if "completion_tokens" in usage else slim.tokens
    ttft = slim.t_first_token - slim.t_send
    e2e = None if slim.t_end is None else slim.t_end - slim.t_send
    times = columns.times()
    itl = tuple(np.diff(times).tolist()) if len(times) > 1 else None
    return SavedRequest(ok=True, ttft=ttft, tpot=tpot(e2e, ttft, outputs), e2e=e2e, itl=itl,
                        input_tokens=inputs, output_tokens=outputs, prompt_key=key,
                        output_text=_text(columns), output_token_ids=_ids(columns))
