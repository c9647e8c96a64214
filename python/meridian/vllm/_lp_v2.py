"""``ForceThinkEnd`` on vLLM's Model Runner V2 logits-processor interface
(the default runner on GPUs with Triton in vLLM 0.32).

V2 keys requests by a recycled slot index: ``add_request`` (re)initialises a
slot; there is no removal callback, so a slot's previous occupant is
released when the slot is reused. Tokens come from the runner's request
state and the step's ``LogitsContext``:

* the prompt, once per request, from ``all_token_ids[slot, :prompt_len]``;
* each step's newest committed token from ``ctx.input_ids`` at the row's
  position ``ctx.pos`` (``pos + 1`` tokens are visible to the token being
  sampled); earlier positions the router has not seen (several tokens
  accepted at once, or a resumed request's replayed output) are read from
  ``all_token_ids``.

Rows of a partial prefill chunk (``pos + 1`` below what the router has
seen) are skipped. Under speculative decoding only a request's first row
(``expanded_local_pos == 0``, the first position not yet committed) is
probed and forced; draft positions are left alone.

Thread-safety: used from the model runner's thread only. Ownership: the
request-state tensors belong to vLLM and are only read.
"""
from __future__ import annotations

from typing import Any

import torch

from ._lp_core import ForcingCore, TrackedRequest
from ._lp_params import parse_overrides


class V2Slots:
    """Slot index -> tracked request, and the per-step token reading."""

    def __init__(self, core: ForcingCore, req_states: Any) -> None:
        self.core = core
        self.req_states = req_states
        self.slots: dict[int, TrackedRequest] = {}

    def add_request(self, req_idx: int, sampling_params: Any) -> bool:
        if not self.core.active:
            return False
        try:
            previous = self.slots.pop(req_idx, None)
            if previous is not None:
                self.core.release(previous)
            overrides = parse_overrides(sampling_params.extra_args)
            if not overrides.forcing:
                return False
            self.slots[req_idx] = self.core.new_request(sampling_params, overrides)
            return True
        except Exception as exc:  # noqa: BLE001 - fail-safe: never kill the engine
            self.core.fail("add_request", exc)
            return False

    def apply(self, logits: torch.Tensor, ctx: Any) -> torch.Tensor:
        if not self.slots:
            return logits
        try:
            self._apply(logits, ctx)
        except Exception as exc:  # noqa: BLE001 - fail-safe: never kill the engine
            self.core.fail("apply", exc)
        return logits

    def _apply(self, logits: torch.Tensor, ctx: Any) -> None:
        core = self.core
        # One device-to-host copy for the step's layout.
        layout = torch.stack(
            [
                ctx.expanded_idx_mapping.to(torch.long),
                ctx.expanded_local_pos.to(torch.long),
                ctx.pos.to(torch.long),
                ctx.input_ids.to(torch.long),
            ]
        ).cpu()
        slots, local_pos, positions, input_ids = layout.tolist()
        all_token_ids = self.req_states.all_token_ids.gpu
        rows: list[tuple[int, TrackedRequest]] = []
        reqs: list[TrackedRequest] = []
        news: list[list[int]] = []
        for row, slot in enumerate(slots):
            req = self.slots.get(slot)
            if req is None or req.done or local_pos[row] != 0:
                continue
            if not req.begun:
                prompt_len = int(self.req_states.prompt_len.np[slot])
                core.begin(req, all_token_ids[slot, :prompt_len].tolist(), fed=prompt_len)
                if req.done:
                    continue
            seen = positions[row] + 1
            if seen < req.fed:  # a prefill chunk short of what the router has seen
                continue
            if seen > req.fed:
                new = all_token_ids[slot, req.fed : seen - 1].tolist() if seen - 1 > req.fed else []
                new.append(input_ids[row])
                reqs.append(req)
                news.append(new)
            rows.append((row, req))
        core.feed(reqs, news)
        core.decide_and_mask(logits, rows)
