"""``ForceThinkEnd`` on vLLM's legacy V1 logits-processor interface (the
runner the CPU platform uses, and GPUs with ``VLLM_USE_V2_MODEL_RUNNER=0``).

vLLM describes the persistent batch with ``BatchUpdate`` (removed, then
added, then moved) and hands each added request's *live* output-token list,
which it appends to as tokens are sampled. Token ids are read from that list
in ``apply`` only: under async scheduling the list holds -1 placeholders
until vLLM resolves them right before the logits processors run.

vLLM removes a request from the batch whenever a step does not schedule it
(and when it is preempted) and adds it again later with the same
``SamplingParams`` object. Such a request is parked: its router and probe
state are kept, keyed by that object (held, so its ``id`` cannot be reused),
and picked up again on re-admission, for ``scheduler.reap_idle_after_s``
seconds. Requests that finished (EOS seen, ``max_tokens`` reached) are
released at once.

Thread-safety: used from the model runner's thread only. Ownership: holds
references to the prompt and output lists of the requests in the batch (not
of parked ones).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from vllm.v1.sample.logits_processor.interface import BatchUpdate, MoveDirectionality

from ._lp_core import ForcingCore, TrackedRequest
from ._lp_params import parse_overrides

#: vLLM's placeholder for a sampled token not yet copied back (async scheduling).
PLACEHOLDER = -1
#: Parked requests are checked for expiry at most this often.
_REAP_EVERY_S = 1.0


@dataclass(eq=False)
class _Entry:
    req: TrackedRequest
    prompt: list[int] | None
    output: list[int]


class V1Batch:
    """The persistent batch as this processor sees it: batch row -> entry."""

    def __init__(self, core: ForcingCore) -> None:
        self.core = core
        self.rows: dict[int, _Entry] = {}
        self.parked: dict[int, TrackedRequest] = {}
        self._last_reap = time.monotonic()

    # -- update_state ------------------------------------------------------

    def update(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None or not self.core.active:
            return
        try:
            self._update(batch_update)
        except Exception as exc:  # noqa: BLE001 - fail-safe: never kill the engine
            self.core.fail("update_state", exc)
            self._drop_all()

    def _update(self, batch_update: BatchUpdate) -> None:
        rows = self.rows
        for index in batch_update.removed:
            self._park(rows.pop(index, None))
        for index, params, prompt, output in batch_update.added:
            self._park(rows.pop(index, None))
            entry = self._admit(params, prompt, output)
            if entry is not None:
                rows[index] = entry
        for a, b, direction in batch_update.moved:
            entry_a = rows.pop(a, None)
            entry_b = rows.pop(b, None)
            if entry_a is not None:
                rows[b] = entry_a
            if direction == MoveDirectionality.SWAP:
                if entry_b is not None:
                    rows[a] = entry_b
            else:
                self._park(entry_b)  # a one-way move replaces whatever sat at b

    def _admit(self, params: Any, prompt: list[int] | None, output: list[int]) -> _Entry | None:
        try:
            overrides = parse_overrides(params.extra_args)
        except ValueError as exc:  # validate_params normally rejected it already
            self.core.fail("update_state", exc)
            return None
        if not overrides.forcing:
            return None
        req = self.parked.pop(id(params), None)
        if req is not None and req.params is not params:  # cannot happen while parked holds params
            self.core.release(req)
            req = None
        if req is None:
            req = self.core.new_request(params, overrides)
        elif len(output) < req.fed:  # the engine discarded tokens the router saw
            self.core.restart(req)
        return _Entry(req, prompt, output)

    def _park(self, entry: _Entry | None) -> None:
        if entry is None:
            return
        req = entry.req
        max_tokens = getattr(req.params, "max_tokens", None)
        if req.completed or (max_tokens is not None and len(entry.output) >= max_tokens):
            self.core.release(req)  # finished: it will not come back
            return
        req.parked_at = time.monotonic()
        stale = self.parked.pop(id(req.params), None)
        if stale is not None and stale is not req:
            self.core.release(stale)
        self.parked[id(req.params)] = req

    def _reap(self) -> None:
        now = time.monotonic()
        if now - self._last_reap < _REAP_EVERY_S:
            return
        self._last_reap = now
        cutoff = now - self.core.reap_after_s
        for key in [k for k, req in self.parked.items() if req.parked_at < cutoff]:
            self.core.release(self.parked.pop(key))

    def _drop_all(self) -> None:
        """After a failed update the row map cannot be trusted: forget every
        request (their rows get vLLM's stock behaviour)."""
        entries, parked = list(self.rows.values()), list(self.parked.values())
        self.rows.clear()
        self.parked.clear()
        for req in [e.req for e in entries] + parked:
            try:
                self.core.release(req)
            except Exception:  # noqa: BLE001 - already failing; keep going
                pass

    # -- apply ---------------------------------------------------------------

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.rows and not self.parked:
            return logits
        try:
            self._apply(logits)
        except Exception as exc:  # noqa: BLE001 - fail-safe: never kill the engine
            self.core.fail("apply", exc)
        return logits

    def _apply(self, logits: torch.Tensor) -> None:
        core = self.core
        if self.parked:
            self._reap()
        reqs: list[TrackedRequest] = []
        news: list[list[int]] = []
        for entry in self.rows.values():
            req = entry.req
            if req.done:
                continue
            output = entry.output
            if not req.begun or len(output) < req.fed:
                if req.begun:  # the engine discarded tokens the router saw: replay
                    core.restart(req)
                core.begin(req, entry.prompt)
                if req.done:
                    continue
            if len(output) > req.fed:
                new = output[req.fed :]
                if PLACEHOLDER in new:  # not resolved yet: feed what is known
                    new = new[: new.index(PLACEHOLDER)]
                if new:
                    reqs.append(req)
                    news.append(new)
        core.feed(reqs, news)
        batch_rows = logits.shape[0]
        core.decide_and_mask(
            logits,
            [(row, e.req) for row, e in self.rows.items() if row < batch_rows and e.req.thinking],
        )
