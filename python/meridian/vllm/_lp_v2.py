"""``ForceThinkEnd`` on vLLM's Model Runner V2 logits-processor interface
(the default runner on GPUs with Triton in vLLM 0.32).

V2 keys requests by a recycled slot index: ``add_request`` (re)initialises a
slot; there is no removal callback. A slot is forgotten as soon as its
request needs nothing more (``</think>`` or EOS seen, the request's last
token under ``max_tokens`` sampled, ``forcing: false``), and otherwise when
the slot is reused. A request that ends any other way (aborted, a stop
string, preempted: V2 adds it again in a new slot) keeps its slot's state
until the slot is reused; it costs nothing per step meanwhile, because a
step only looks at the slots in its batch.

Device reads: ``ctx.idx_mapping_np`` tells on the host which slots a step
holds, so a step with none of the tracked slots returns at once, without
touching the device. Otherwise everything the step needs crosses to the host
in one copy (``read_device``):

* the rows' positions and input ids (``ctx.pos``, ``ctx.input_ids``; with
  speculative decoding also ``ctx.expanded_idx_mapping`` and
  ``ctx.expanded_local_pos``): the newest committed token of a row is the
  input id at its position ``pos`` (``pos + 1`` tokens are visible to the
  token being sampled);
* from ``all_token_ids``, what the router has not seen below that position:
  a new request's prompt (``prompt_len``, on the host), and tokens that
  arrived several at once (accepted drafts, a resumed request's replayed
  output), bounded on the host by ``ctx.seq_lens_upper_bound_np``.

Rows of a partial prefill chunk (``pos + 1`` below what the router has
seen) are skipped. Under speculative decoding only a request's first row
(``expanded_local_pos == 0``, the first position not yet committed) is
probed and forced; draft positions are left alone.

Thread-safety: used from the model runner's thread only. Ownership: the
request-state tensors belong to vLLM and are only read.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._lp_core import ForcingCore, TrackedRequest
from ._lp_params import parse_overrides


def read_device(parts: list[torch.Tensor]) -> list[int]:
    """The one device-to-host copy of a step: ``parts`` (1-D integer
    tensors) concatenated, as Python ints."""
    return torch.cat(parts).cpu().tolist()


class V2Slots:
    """Slot index -> tracked request, and the per-step token reading."""

    def __init__(self, core: ForcingCore, req_states: Any) -> None:
        self.core = core
        self.req_states = req_states
        self.slots: dict[int, TrackedRequest] = {}
        # Host mask of self.slots, indexed by slot: a step's batch is checked
        # against it without a Python loop.
        self.tracked = np.zeros(int(req_states.max_num_reqs), dtype=bool)

    def add_request(self, req_idx: int, sampling_params: Any) -> bool:
        if not self.core.active:
            return False
        try:
            self.drop(req_idx)  # the slot's previous occupant, if still tracked
            overrides = parse_overrides(sampling_params.extra_args)
            if not overrides.forcing:
                return False
            self.slots[req_idx] = self.core.new_request(sampling_params, overrides)
            self.tracked[req_idx] = True
            return True
        except Exception as exc:  # noqa: BLE001 - fail-safe: never kill the engine
            self.core.fail("add_request", exc)
            return False

    def drop(self, slot: int) -> None:
        """Forget the request in ``slot`` (nothing more to do for it)."""
        req = self.slots.pop(slot, None)
        if 0 <= slot < len(self.tracked):
            self.tracked[slot] = False
        if req is not None:
            self.core.release(req)

    def apply(self, logits: torch.Tensor, ctx: Any) -> torch.Tensor:
        if not self.slots:
            return logits
        try:
            self._apply(logits, ctx)
        except Exception as exc:  # noqa: BLE001 - fail-safe: never kill the engine
            self.core.fail("apply", exc)
        return logits

    def _apply(self, logits: torch.Tensor, ctx: Any) -> None:
        batch_slots = np.asarray(ctx.idx_mapping_np)
        hit = np.flatnonzero(self.tracked[batch_slots])
        if hit.size == 0:
            return  # nothing of ours in this step: no device read
        upper = ctx.seq_lens_upper_bound_np
        all_token_ids = self.req_states.all_token_ids.gpu
        width = int(all_token_ids.shape[1])
        num_rows = int(logits.shape[0])
        # One row per request, in batch order (no drafts this step), or rows
        # expanded by speculative decoding: then the row layout is read too.
        expanded = num_rows != len(batch_slots)
        layout = [ctx.pos, ctx.input_ids]
        if expanded:
            layout = [ctx.expanded_idx_mapping, ctx.expanded_local_pos, *layout]
        parts = [t[:num_rows].to(torch.long) for t in layout]
        # Per tracked request: the slice of all_token_ids the router has not
        # seen, up to the host's upper bound of the row's position.
        windows: dict[int, tuple[int, int, int]] = {}  # slot -> (start, stop, offset in the copy)
        offset = num_rows * len(layout)
        for i in hit.tolist():
            slot = int(batch_slots[i])
            req = self.slots[slot]
            if req.done:  # not expected: done requests are dropped when they get there
                self.drop(slot)
                continue
            start = 0 if not req.begun else req.fed
            stop = int(upper[i]) - 1
            if not req.begun:
                stop = max(stop, int(self.req_states.prompt_len.np[slot]))
            stop = min(stop, width)
            if stop > start:
                parts.append(all_token_ids[slot, start:stop].to(torch.long))
            windows[slot] = (start, max(stop, start), offset)
            offset += max(stop - start, 0)
        if not windows:
            return
        host = read_device(parts)
        columns = [host[k * num_rows : (k + 1) * num_rows] for k in range(len(layout))]
        if expanded:
            row_slots, local_pos, positions, input_ids = columns
        else:
            positions, input_ids = columns
            row_slots, local_pos = batch_slots.tolist(), None

        def tokens(slot: int, start: int, stop: int) -> list[int]:
            w_start, w_stop, w_offset = windows[slot]
            if w_start <= start and stop <= w_stop:
                return host[w_offset + start - w_start : w_offset + stop - w_start]
            # Beyond the host's upper bound (not expected): a second read.
            return read_device([all_token_ids[slot, start:stop].to(torch.long)])

        core = self.core
        rows: list[tuple[int, TrackedRequest]] = []
        reqs: list[TrackedRequest] = []
        news: list[list[int]] = []
        for row, slot in enumerate(row_slots):
            if slot not in windows or (local_pos is not None and local_pos[row] != 0):
                continue
            req = self.slots[slot]
            if not req.begun:
                prompt_len = int(self.req_states.prompt_len.np[slot])
                core.begin(req, tokens(slot, 0, prompt_len), fed=prompt_len)
                if req.done:
                    continue
            seen = positions[row] + 1
            if seen < req.fed:  # a prefill chunk short of what the router has seen
                continue
            if seen > req.fed:
                new = tokens(slot, req.fed, seen - 1) if seen - 1 > req.fed else []
                new.append(input_ids[row])
                reqs.append(req)
                news.append(new)
            rows.append((row, req))
        core.feed(reqs, news)
        core.decide_and_mask(logits, rows)
        for row, req in rows:
            max_tokens = getattr(req.params, "max_tokens", None)
            prompt_len = int(self.req_states.prompt_len.np[row_slots[row]])
            # This step samples the request's output token number pos + 2 - prompt_len.
            if max_tokens is not None and positions[row] + 2 - prompt_len >= max_tokens:
                self.drop(row_slots[row])  # its last token: the request finishes with this step
        for slot in windows:
            req = self.slots.get(slot)
            if req is not None and req.done:
                self.drop(slot)  # </think> or EOS seen, or an answer from its first token
