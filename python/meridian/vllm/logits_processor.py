"""``ForceThinkEnd``: Meridian's budget-forcing logits processor for vLLM.

    vllm serve Qwen/Qwen3-8B --reasoning-parser qwen3 \\
      --logits-processors meridian.vllm:ForceThinkEnd

Opt-in: vLLM builds it only in engines that list it (``--logits-processors``,
or ``LLM(logits_processors=[...])``). The package registers no
``vllm.logits_processors`` entry point (vLLM would load one into every engine
of the environment), so installing Meridian changes nothing in an engine that
does not ask for it: no forcing, no ``extra_args`` validation, and an invalid
``meridian.toml`` is reported only by engines that enabled a Meridian part.

Where it is listed, it forces only with a model preset whose think ids fit
the served model (``_lp_core.resolve_model``): vLLM derived them from the
served tokenizer (``--reasoning-parser``), or the served tokenizer decodes
them to ``<think>`` and ``</think>``. Otherwise it logs why once and stays
inert (``model`` is None): ``add_request`` returns False and ``apply``
returns at once.

What it does, per request in the batch:

* follows the request's tokens (prompt, then each generated token) with
  Meridian's C++ ``PhaseRouter`` for the model preset of the served model,
  chosen as Meridian's scheduler chooses it (``$MERIDIAN_MODEL``, else the
  preset of vLLM's ``--reasoning-parser`` whose think ids match the served
  tokenizer; ``qwen3`` when vLLM has no reasoning parser and the served
  tokenizer confirms its ids), configured from
  ``meridian.toml`` found the usual way (``$MERIDIAN_CONFIG``,
  ``./meridian.toml``, ``~/.config/meridian/meridian.toml``, else defaults);
* for the rows still thinking, computes the entropy signals with one
  ``meridian.EntropyProbe.compute_batch`` call per step, on the logits
  where they live (EAT from the in-step proxy, RPDI; ADR-0011);
* ends thinking when the probe says it converged or is overthinking (not
  before ``min_think_tokens``), or at the hard cap ``max_think_tokens``:
  the row is masked so that the only possible next token is the preset's
  first end-of-think id (``</think>``, 151668 for Qwen3; the same single
  token vLLM's own ``thinking_token_budget`` forces). Every other logit
  becomes -inf. The mask is applied again every step until ``</think>`` is
  actually in the output (a forced step can be overridden by a later stage);
* never forces inside an open ``<tool_call>`` block; a due force waits for
  the block to close;
* per request, ``SamplingParams.extra_args["meridian"]`` may set
  ``forcing`` (false: leave the request alone), ``max_think_tokens`` and
  ``min_think_tokens`` (see ``_lp_params``); ``validate_params`` rejects
  anything else with a ValueError naming the key.

What it does not do:

* nothing after ``</think>`` (answer tokens are never touched), nothing for
  requests that never enter the think phase, nothing for presets without an
  end-of-think token (Granite's prose markers), nothing at all when vLLM's
  reasoning parser matches no preset (logged at start-up);
* no probe forward pass (a logits processor cannot run one): EAT is the
  documented in-step proxy;
* it does not replace vLLM's ``thinking_token_budget``: both may be set,
  whichever fires first ends thinking, and a ``</think>`` forced by vLLM
  simply ends the request's think phase here too. vLLM applies its budget
  after this processor, so its forced token wins when both act on one step;
* think tokens are counted from the first generated token: tokens after
  ``<think>`` inside the prompt do not count (vLLM's budget counts them);
* it never raises into the engine: an exception inside Meridian's code
  leaves that step's logits (or that batch update) as vLLM made them, is
  counted in ``counters.fallbacks`` and logged once on logger
  ``meridian.vllm``;
* the hard cap and the per-request limits never depend on the entropy
  probe: when the probe raises, that step forces on the hard cap only
  (``counters.probe_errors``, logged once); when its CUDA kernel fails, or
  this build has none, the probe runs on the CPU kernel on a host copy of
  the think rows (``counters.probe_on_host``).

One class serves both of vLLM 0.32's interfaces: the legacy V1 one
(``__init__(vllm_config, device, is_pin_memory)``, ``update_state``,
``apply(logits)``; the CPU runner) and Model Runner V2's
(``__init__(vllm_config, req_states)``, ``add_request``,
``apply_staged_writes``, ``apply(logits, ctx)``). Both loaders accept it.

Thread-safety: vLLM builds one instance per model runner and calls it from
that runner's thread; an instance is not safe for concurrent calls.
"""
from __future__ import annotations

import gc
import logging
import weakref
from typing import TYPE_CHECKING

import torch
from vllm.v1.sample.logits_processor.interface import BatchUpdate
from vllm.v1.sample.logits_processor.interface import LogitsProcessor as V1LogitsProcessor
from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsProcessor as V2LogitsProcessor
from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsProcRequestState

from ._lp_core import ForcingCore, ForcingCounters
from ._lp_params import parse_overrides
from ._lp_v1 import V1Batch
from ._lp_v2 import V2Slots

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.sampling_params import SamplingParams
    from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsContext

__all__ = ["ForceThinkEnd", "ForcingCounters"]

logger = logging.getLogger("meridian.vllm")

# Listed twice (e.g. under two spellings), vLLM builds two instances for one
# engine. The first one per (engine config, runner interface) works; later
# ones stay idle and report its counters, so the probe runs once.
_ACTIVE: dict[tuple[int, str], tuple[weakref.ref, weakref.ref]] = {}


def _claim(instance: ForceThinkEnd, vllm_config: object, runner: str) -> ForceThinkEnd | None:
    """Registers `instance` as the working one for this engine, or returns
    the one already working."""
    key = (id(vllm_config), runner)
    held = _ACTIVE.get(key)
    if held is not None and held[0]() is vllm_config and held[1]() is not None:
        # Only a live instance counts: one left in a reference cycle by an
        # engine that is gone must not idle this one (start-up only, so the
        # collection's cost does not matter).
        gc.collect()
        active = held[1]()
        if active is not None:
            return active
    try:
        config_ref = weakref.ref(vllm_config)
    except TypeError:  # not weak-referenceable: no dedupe, both work
        return None
    _ACTIVE[key] = (config_ref, weakref.ref(instance))
    return None


class ForceThinkEnd(V1LogitsProcessor, V2LogitsProcessor):
    """Force ``</think>`` when Meridian's signals or the hard cap say so.

    ``counters`` (a ``ForcingCounters`` snapshot) reports what it did;
    ``model`` is the preset in use and ``end_token_id`` the forced token.
    """

    def __init__(
        self,
        vllm_config: VllmConfig,
        device_or_req_states: torch.device | LogitsProcRequestState | str | None = None,
        is_pin_memory: bool | None = None,
    ) -> None:
        self._v1: V1Batch | None = None
        self._v2: V2Slots | None = None
        self._idle = False
        runner = "v2" if isinstance(device_or_req_states, LogitsProcRequestState) else "v1"
        self._runner = runner
        active = _claim(self, vllm_config, runner)
        if active is not None:
            self._idle = True
            self._core = active._core
            self.device = active.device
            logger.info("meridian: ForceThinkEnd is loaded twice for this engine; the second instance "
                        "stays idle")
            return
        if isinstance(device_or_req_states, LogitsProcRequestState):
            self.device = device_or_req_states.device
            self._core = ForcingCore(vllm_config, self.device)
            self._v2 = V2Slots(self._core, device_or_req_states)
        else:
            if is_pin_memory is None:
                raise TypeError(
                    "ForceThinkEnd(vllm_config, device, is_pin_memory) (V1 interface) or "
                    "ForceThinkEnd(vllm_config, req_states) (Model Runner V2); got "
                    f"{type(device_or_req_states).__name__} and is_pin_memory=None"
                )
            self.device = torch.device(device_or_req_states) if device_or_req_states is not None else None
            self._core = ForcingCore(vllm_config, self.device)
            self._v1 = V1Batch(self._core)

    # -- shared ----------------------------------------------------------------

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        """Reject bad ``extra_args["meridian"]`` (ValueError naming the key)."""
        parse_overrides(sampling_params.extra_args)

    @property
    def counters(self) -> ForcingCounters:
        """A copy of this instance's counters."""
        return self._core.counters.copy()

    @property
    def model(self) -> str | None:
        """The model preset in use; None when no preset fits the served model."""
        return self._core.model

    @property
    def end_token_id(self) -> int | None:
        return self._core.end_id

    def apply(self, logits: torch.Tensor, ctx: LogitsContext | None = None) -> torch.Tensor:
        """V1: ``apply(logits)``; V2: ``apply(logits, ctx)``. Masks in place."""
        if self._idle:
            return logits
        if self._v2 is not None:
            if ctx is None:
                raise TypeError("ForceThinkEnd was built for Model Runner V2: apply(logits, ctx) needs ctx")
            return self._v2.apply(logits, ctx)
        assert self._v1 is not None
        return self._v1.apply(logits)

    # -- legacy V1 interface -----------------------------------------------------

    def is_argmax_invariant(self) -> bool:
        """Forcing changes the argmax, so greedy requests go through it too."""
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if self._idle:
            return
        if self._v1 is None:
            raise TypeError("update_state is the V1 interface; this instance was built for Model Runner V2")
        self._v1.update(batch_update)

    # -- Model Runner V2 interface ---------------------------------------------

    def add_request(self, req_idx: int, sampling_params: SamplingParams) -> bool:
        if self._idle:
            return False
        if self._v2 is None:
            raise TypeError("add_request is the Model Runner V2 interface; this instance was built for V1")
        return self._v2.add_request(req_idx, sampling_params)

    def apply_staged_writes(self) -> None:
        """Nothing to flush: all per-request state lives on the host."""

    def __repr__(self) -> str:
        idle = ", idle duplicate" if self._idle else ""
        return f"ForceThinkEnd(model={self.model!r}, end_token_id={self.end_token_id}, runner={self._runner}{idle})"

