"""The engine-independent part of ``ForceThinkEnd``: which model preset, the
phase router and the entropy probe, per-request state, the forcing decision
and the logits mask. ``logits_processor.py`` adapts it to vLLM's two
logits-processor interfaces (``_lp_v1.py``, ``_lp_v2.py``).

Thread-safety: a ``ForcingCore`` belongs to one logits processor and is used
from the model runner's thread only (vLLM calls a processor from one thread).
Ownership: it owns its ``PhaseRouter`` and ``EntropyProbe``; a
``TrackedRequest`` is owned by the adapter that created it and is released
through ``ForcingCore.release``.
"""
from __future__ import annotations

import copy
import itertools
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

import meridian

from . import _setup
from ._lp_params import RequestOverrides
from ._telemetry import LpReporter

logger = logging.getLogger("meridian.vllm")

#: Router and probe run without their own min/max (per-request limits are
#: applied here); this stands for "no limit".
UNBOUNDED_THINK_TOKENS = 1 << 62
#: The preset used when vLLM has no reasoning parser and $MERIDIAN_MODEL is unset
#: (only once the served tokenizer confirmed its ids: ``check_think_ids``).
DEFAULT_MODEL = "qwen3"
#: What a preset's think start and end ids must decode to with the served
#: tokenizer, unless vLLM derived the ids itself (from its reasoning parser).
THINK_MARKERS = ("<think>", "</think>")

_REASON_NAMES = {
    meridian.ForceReason.CONVERGED: "converged",
    meridian.ForceReason.OVERTHINKING: "overthinking",
    meridian.ForceReason.HARD_CAP: "hard_cap",
}
_ENTROPY_REASONS = (meridian.ForceReason.CONVERGED, meridian.ForceReason.OVERTHINKING)
_Phase = meridian.Phase
_EventKind = meridian.PhaseEventKind
_ForceResult = meridian.ForceResult


@dataclass
class ForcingCounters:
    """Monotonic totals of one processor instance, for telemetry.

    ``forced`` counts requests whose end of thinking was forced, by reason
    (``converged``, ``overthinking``, ``hard_cap``); ``forced_rows`` counts
    logits rows masked (a force pending for several steps counts once per
    step); ``forced_landed`` counts forced ``</think>`` tokens seen in the
    output; ``held_by_tool_call`` counts steps in which a due force waited
    for an open tool call; ``probe_errors`` counts steps in which the entropy
    probe raised (that step's entropy signals are skipped: only the hard cap
    forces; a failure of the CUDA kernel moves the probe to the CPU kernel);
    ``probe_on_host`` says whether the probe now runs on the CPU kernel on a
    host copy of the think rows (the CUDA kernel failed or is not built);
    ``fallbacks`` counts calls (``apply``/``update_state``/``add_request``)
    in which an exception left vLLM's stock behaviour in place, and probe
    failures (the ``meridian_failsafe_fallbacks_total`` metric);
    ``resyncs`` counts requests whose token history had to be replayed
    (output tokens discarded by the engine, or router state lost).
    """

    forced: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_REASON_NAMES.values(), 0))
    forced_rows: int = 0
    forced_landed: int = 0
    held_by_tool_call: int = 0
    probe_errors: int = 0
    probe_on_host: bool = False
    fallbacks: int = 0
    requests_tracked: int = 0
    resyncs: int = 0

    def copy(self) -> ForcingCounters:
        return copy.deepcopy(self)


@dataclass(eq=False)
class TrackedRequest:
    """One request the processor may force. ``fed`` counts the tokens the
    router has seen, in the adapter's unit (V1: output tokens; V2: sequence
    positions, prompt included)."""

    rid: int
    params: Any
    min_think_tokens: int
    max_think_tokens: int
    begun: bool = False
    thinking: bool = False
    done: bool = False  # left the think phase, or completed: nothing more to do
    completed: bool = False  # EOS seen: the router forgot it already
    fed: int = 0
    probed_at: int = -1
    forced_reason: str | None = None
    parked_at: float = 0.0


def _token_ids(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


def _served_reasoning_parser(vllm_config: Any) -> str:
    for holder in ("structured_outputs_config", "reasoning_config"):
        parser = getattr(getattr(vllm_config, holder, None), "reasoning_parser", "")
        if parser:
            return str(parser)
    return ""


def _vllm_verified_ids(vllm_config: Any) -> bool:
    """Whether vLLM derived both think ids from the served tokenizer (its
    reasoning parser's strings, encoded): ``resolve_setup`` then compared the
    preset's ids with them."""
    _, start, end = _setup._served_reasoning(vllm_config)
    return start is not None and end is not None


def _served_tokenizer(model_config: Any) -> Any:
    """The served model's tokenizer, loaded the way vLLM loads it (also when
    vLLM itself skips it: ``skip_tokenizer_init``)."""
    from vllm.tokenizers.registry import cached_get_tokenizer

    return cached_get_tokenizer(
        model_config.tokenizer,
        runner_type=model_config.runner_type,
        tokenizer_mode=model_config.tokenizer_mode,
        revision=model_config.tokenizer_revision,
        trust_remote_code=model_config.trust_remote_code,
    )


#: (tokenizer, mode, revision, start ids, end ids) -> the problem found, or "".
_VERIFIED: dict[tuple[Any, ...], str] = {}


def check_think_ids(vllm_config: Any, model: Any) -> str | None:
    """None when the served tokenizer decodes the preset's think ids to the
    think markers (``<think>``, ``</think>``); else what disagrees. The ids
    are also checked against the served vocabulary size."""
    model_config = getattr(vllm_config, "model_config", None)
    start, end = list(model.think_start_token_ids), list(model.think_end_token_ids)
    if model_config is None:
        return "vLLM's config has no model_config to check the think ids against"
    vocab = int(model_config.get_vocab_size())
    outside = [t for t in start + end if not 0 <= t < vocab]
    if outside:
        return f"think ids {outside} are outside the served vocabulary of {vocab} tokens"
    key = (str(model_config.tokenizer), model_config.tokenizer_mode, model_config.tokenizer_revision,
           tuple(start), tuple(end))
    if key not in _VERIFIED:
        try:
            tokenizer = _served_tokenizer(model_config)
            problems = []
            for ids, marker in ((start, THINK_MARKERS[0]), (end, THINK_MARKERS[1])):
                if not ids:
                    continue
                text = tokenizer.decode(ids, skip_special_tokens=False)
                if text.strip() != marker:
                    problems.append(f"{ids} is {text!r} in the served tokenizer, not {marker!r}")
            _VERIFIED[key] = "; ".join(problems)
        except Exception as exc:  # noqa: BLE001 - no tokenizer: cannot verify, so do not force
            return (f"the served tokenizer ({model_config.tokenizer}) could not be loaded to check the think "
                    f"ids ({type(exc).__name__}: {exc})")
    return _VERIFIED[key] or None


def resolve_model(vllm_config: Any) -> tuple[meridian.MeridianConfig, str | None]:
    """Meridian's config and the model preset for the served model, or None
    (the processor is then inert).

    Only engines that list the processor (``--logits-processors``) build
    it; there an invalid meridian.toml is an error (``MeridianSetupError``).
    The preset is chosen as Meridian's scheduler chooses it
    (``_setup.resolve_setup``: ``$MERIDIAN_MODEL``, else the preset of
    vLLM's ``--reasoning-parser`` whose think ids match the ids vLLM derived
    from the served tokenizer); without ``--reasoning-parser`` (and no
    ``$MERIDIAN_MODEL``) it is ``qwen3``. Unless vLLM derived both think ids
    from the served tokenizer, they are checked by decoding them with the
    served tokenizer (``check_think_ids``): they must read ``<think>`` and
    ``</think>``. A preset named by ``$MERIDIAN_MODEL`` that is unknown or
    fails a check is an error; otherwise a preset that cannot be chosen or
    fails a check is logged once (logger ``meridian.vllm``) and the
    processor leaves every request alone.
    """
    config, _ = _setup.load_meridian_config()  # raises on an invalid file
    explicit = bool(os.environ.get(_setup.MODEL_ENV, "").strip())
    try:
        model = _setup.resolve_setup(vllm_config).model_name
        verified = _vllm_verified_ids(vllm_config)
    except _setup.MeridianSetupError as exc:
        if explicit:
            raise
        if _served_reasoning_parser(vllm_config):
            logger.error("%s ForceThinkEnd leaves every request alone.", exc)
            return config, None
        model, verified = DEFAULT_MODEL, False
    if not verified:
        problem = check_think_ids(vllm_config, config.model(model))
        if problem:
            message = f"meridian: model preset {model!r} does not match the served tokenizer: {problem}."
            if explicit:
                raise _setup.MeridianSetupError(
                    f"{message} Set ${_setup.MODEL_ENV} to the right preset or correct [model.{model}].")
            logger.error(
                "%s ForceThinkEnd leaves every request alone (start vLLM with the model's --reasoning-parser, "
                "or set $%s to a preset for this model).", message, _setup.MODEL_ENV)
            return config, None
    return config, model


def _extra_eos(vllm_config: Any) -> list[int]:
    """EOS ids the engine knows from the model's config (added to the preset's)."""
    model_config = getattr(vllm_config, "model_config", None)
    hf_config = getattr(model_config, "hf_text_config", None) if model_config is not None else None
    try:
        return _token_ids(getattr(hf_config, "eos_token_id", None))
    except (TypeError, ValueError):
        return []


def _make_probe(config: meridian.MeridianConfig, model: str, end_ids: Sequence[int]) -> Any | None:
    probe_cls = getattr(meridian, "EntropyProbe", None)  # absent from builds before the probe API
    if probe_cls is None:
        logger.warning(
            "meridian.vllm: this meridian build has no EntropyProbe; only the hard cap "
            "(max_think_tokens) forces the end of thinking."
        )
        return None
    return probe_cls(config, model=model, think_end_token_ids=list(end_ids))


class ForcingCore:
    """Router, probe and forcing decisions for one processor instance."""

    def __init__(self, vllm_config: Any, device: torch.device | None = None) -> None:
        cfg, model = resolve_model(vllm_config)
        self.model = model
        end_ids = list(cfg.model(model).think_end_token_ids) if model is not None else []
        #: The token forced at the end of thinking: the preset's first
        #: end-of-think id (vLLM's own thinking budget forces the same
        #: single token, "</think>", for Qwen3 and DeepSeek-R1).
        self.end_id: int | None = end_ids[0] if end_ids else None
        self.default_min = int(cfg.scheduler.min_think_tokens)
        self.default_max = int(cfg.scheduler.max_think_tokens)
        self.reap_after_s = float(cfg.scheduler.reap_idle_after_s)
        self.counters = ForcingCounters()
        # Forced ends by reason, forced exits and fallbacks as catalog metrics
        # (meridian.vllm._telemetry: the engine's registry when it shares this process).
        self.reporter = LpReporter(self.counters)
        self.router: Any = None
        self.probe: Any = None
        self._by_rid: dict[int, TrackedRequest] = {}
        self._ids = itertools.count(1)
        self._logged_failure = False
        self._logged_probe_failure = False
        if self.end_id is None:
            if model is not None:
                logger.warning(
                    "meridian.vllm: model preset %r has no think_end_token_ids (prose markers); "
                    "ForceThinkEnd leaves its requests alone.",
                    model,
                )
            return
        # Per-request min/max are applied here, so the router and the probe
        # get none of their own (the config object is this instance's copy).
        cfg.scheduler.min_think_tokens = 0
        cfg.scheduler.max_think_tokens = UNBOUNDED_THINK_TOKENS
        self.router = meridian.PhaseRouter(cfg, model, _extra_eos(vllm_config))
        if cfg.entropy.enabled:
            self.probe = _make_probe(cfg, model, end_ids)
        if self.probe is not None and device is not None and torch.device(device).type == "cuda":
            cuda_available = getattr(type(self.probe), "cuda_available", None)
            if cuda_available is not None and not cuda_available():
                self.counters.probe_on_host = True
                logger.warning(
                    "meridian.vllm: this meridian build has no usable CUDA kernel for the entropy probe; "
                    "ForceThinkEnd probes on the CPU kernel (one host copy of the think rows per step). "
                    "Install a wheel built with CUDA, or set entropy.enabled = false for the hard cap only.")

    @property
    def active(self) -> bool:
        """False when the model has no end-of-think token to force."""
        return self.router is not None

    # -- request lifetime ------------------------------------------------

    def new_request(self, params: Any, overrides: RequestOverrides) -> TrackedRequest:
        lo, hi = overrides.limits(self.default_min, self.default_max)
        req = TrackedRequest(rid=next(self._ids), params=params, min_think_tokens=lo, max_think_tokens=hi)
        self._by_rid[req.rid] = req
        self.counters.requests_tracked += 1
        return req

    def begin(self, req: TrackedRequest, prompt_ids: Sequence[int] | None, fed: int = 0) -> None:
        """Start routing ``req`` from its prompt; ``fed`` tokens count as seen."""
        phase = self.router.begin(req.rid, list(prompt_ids) if prompt_ids else [])
        req.begun = True
        req.fed = fed
        req.thinking = phase == _Phase.THINK_DECODE
        if phase == _Phase.OUTPUT_DECODE:
            self._finish(req)

    def release(self, req: TrackedRequest) -> None:
        """Forget ``req`` (it left the batch for good)."""
        if not req.done:
            self._finish(req)
        self._by_rid.pop(req.rid, None)

    def restart(self, req: TrackedRequest) -> None:
        """Drop ``req``'s router and probe state; it is begun and replayed again."""
        self.release(req)
        req.rid = next(self._ids)
        self._by_rid[req.rid] = req
        req.begun = req.thinking = req.done = req.completed = False
        req.fed = 0
        req.probed_at = -1
        self.counters.resyncs += 1

    def _finish(self, req: TrackedRequest) -> None:
        req.done = True
        req.thinking = False
        if self.router is not None and not req.completed:
            self.router.end(req.rid)
        if self.probe is not None:
            self.probe.release(req.rid)

    # -- per step ----------------------------------------------------------

    def feed(self, reqs: Sequence[TrackedRequest], token_lists: Sequence[Sequence[int]]) -> None:
        """Feed new tokens of several requests to the router in one call."""
        ids: list[int] = []
        tokens: list[int] = []
        for req, new in zip(reqs, token_lists):
            ids.extend(itertools.repeat(req.rid, len(new)))
            tokens.extend(new)
            req.fed += len(new)
        if not ids:
            return
        for event in self.router.on_tokens(ids, tokens):
            req = self._by_rid.get(event.request_id)
            if req is None:
                continue
            if event.kind == _EventKind.ENTER_THINK:
                req.thinking = True
            elif event.kind == _EventKind.EXIT_THINK:
                if event.forced:
                    self.counters.forced_landed += 1
                self._finish(req)  # after </think> nothing more is done
            elif event.kind == _EventKind.COMPLETE:
                req.completed = True
                self._finish(req)
        for req in reqs:
            if not req.thinking and not req.done:
                # Still before the first think boundary: the first generated
                # token decides; an answer-phase request is never forced.
                snap = self.router.snapshot(req.rid)
                if snap is None or snap.phase != _Phase.PREFILL:
                    self._finish(req)

    def decide_and_mask(self, logits: torch.Tensor, rows: Sequence[tuple[int, TrackedRequest]]) -> None:
        """Probe the think-phase ``rows`` (logits row, request), decide, and
        mask the rows whose end of thinking is due."""
        self.reporter.report()
        think = [(row, req) for row, req in rows if req.thinking and not req.done]
        if not think:
            return
        snaps = []
        for _, req in think:
            snap = self.router.snapshot(req.rid)
            if snap is None:  # the router lost it (reaped): replay next step
                self.restart(req)
            snaps.append(snap)
        signals = self._probe(logits, think, snaps)
        forced_rows: list[int] = []
        for (row, req), snap, signal in zip(think, snaps, signals):
            if snap is None:
                continue
            if snap.force_pending:
                if snap.end_think_pending:
                    forced_rows.append(row)
                else:
                    self.counters.held_by_tool_call += 1
                continue
            reason = None
            if snap.think_tokens >= req.max_think_tokens:
                reason = meridian.ForceReason.HARD_CAP
            elif signal is not None and snap.think_tokens >= req.min_think_tokens:
                if signal.force in _ENTROPY_REASONS:
                    reason = signal.force
                elif signal.held_by_tool_call is not None:
                    self.counters.held_by_tool_call += 1
            if reason is None:
                continue
            result = self.router.request_force(req.rid, reason)
            if result in (_ForceResult.ISSUED, _ForceResult.DEFERRED_TOOL_CALL):
                req.forced_reason = _REASON_NAMES[reason]
                self.counters.forced[req.forced_reason] += 1
            if result == _ForceResult.ISSUED:
                forced_rows.append(row)
            elif result == _ForceResult.DEFERRED_TOOL_CALL:
                self.counters.held_by_tool_call += 1
        if forced_rows:
            force_token(logits, forced_rows, self.end_id)
            self.counters.forced_rows += len(forced_rows)
        self.reporter.report()

    def _probe(
        self, logits: torch.Tensor, think: Sequence[tuple[int, TrackedRequest]], snaps: Sequence[Any]
    ) -> list[Any]:
        """One ``compute_batch`` over the think rows with a new token since
        their last probe and no force pending; None for the others.

        Never raises: when the probe fails, the hard cap and the per-request
        limits still apply (the caller decides them without signals). A
        ``KernelError`` on device logits moves the probe to the CPU kernel
        for good (this step is retried there); any other failure skips this
        step's signals. Counted in ``probe_errors`` and ``fallbacks``; the
        first one is logged."""
        signals: list[Any] = [None] * len(think)
        if self.probe is None:
            return signals
        picked = [
            i
            for i, ((_, req), snap) in enumerate(zip(think, snaps))
            if snap is not None and not snap.force_pending and req.probed_at != req.fed
        ]
        if not picked:
            return signals
        ids = [think[i][1].rid for i in picked]
        rows = [think[i][0] for i in picked]
        kwargs = {
            # The row is the distribution of the next think token: the
            # probe counts it ("this token included").
            "think_tokens": [snaps[i].think_tokens + 1 for i in picked],
            "tool_call_open": [snaps[i].tool_call_open for i in picked],
        }
        try:
            try:
                if self.counters.probe_on_host and logits.device.type != "cpu":
                    results = self._probe_on_host(logits, ids, rows, kwargs)
                else:
                    results = self.probe.compute_batch(ids, logits, rows=rows, **kwargs)
            except meridian.KernelError as exc:
                if self.counters.probe_on_host or logits.device.type == "cpu":
                    raise
                self.counters.probe_on_host = True
                self._probe_failed(exc, "its CUDA kernel failed; it runs on the CPU kernel from now on "
                                        "(one host copy of the think rows per step)")
                results = self._probe_on_host(logits, ids, rows, kwargs)
        except Exception as exc:  # noqa: BLE001 - the hard cap must not depend on the probe
            self._probe_failed(exc, "this step's entropy signals are skipped; the hard cap and the "
                                    "per-request limits still apply")
            return signals
        for i, signal in zip(picked, results):
            think[i][1].probed_at = think[i][1].fed
            signals[i] = signal
        return signals

    def _probe_on_host(self, logits: torch.Tensor, ids: list[int], rows: list[int], kwargs: dict) -> list[Any]:
        index = torch.tensor(rows, dtype=torch.long, device=logits.device)
        host = logits.index_select(0, index).cpu()
        return self.probe.compute_batch(ids, host, rows=list(range(len(rows))), **kwargs)

    def _probe_failed(self, exc: BaseException, consequence: str) -> None:
        """Count a probe failure; log the first one (with its traceback)."""
        self.counters.probe_errors += 1
        self.counters.fallbacks += 1
        if self._logged_probe_failure:
            return
        self._logged_probe_failure = True
        logger.error(
            "meridian.vllm: ForceThinkEnd's entropy probe raised %s: %s; %s (later failures are only "
            "counted in .counters.probe_errors and meridian_failsafe_fallbacks_total)",
            type(exc).__name__, exc, consequence, exc_info=exc,
        )

    def fail(self, where: str, exc: BaseException) -> None:
        """Count an exception that left vLLM's stock behaviour in place; log
        the first one (with its traceback), count the rest silently."""
        self.counters.fallbacks += 1
        try:
            self.reporter.report()
        except Exception:  # noqa: BLE001 - counting must not raise out of the fail-safe
            pass
        if self._logged_failure:
            return
        self._logged_failure = True
        logger.error(
            "meridian.vllm: ForceThinkEnd.%s raised %s: %s; this step's logits are left as vLLM "
            "computed them (later failures are only counted in .counters.fallbacks)",
            where,
            type(exc).__name__,
            exc,
            exc_info=exc,
        )


def force_token(logits: torch.Tensor, rows: Sequence[int], token_id: int) -> None:
    """Make ``token_id`` the only possible token of each of ``rows``: every
    other logit becomes -inf; the token keeps its logit, or 0 where that was
    not finite (masked by another stage, or NaN), so the row never becomes
    all -inf. On failure the rows are restored before the error propagates."""
    index = torch.tensor(list(rows), dtype=torch.long, device=logits.device)
    original = logits.index_select(0, index)
    keep = original[:, token_id]
    keep = torch.where(torch.isfinite(keep), keep, torch.zeros_like(keep))
    try:
        logits.index_fill_(0, index, float("-inf"))
        logits[index, token_id] = keep
    except BaseException:
        logits.index_copy_(0, index, original)
        raise
