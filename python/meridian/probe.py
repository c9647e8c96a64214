"""The entropy probe from Python: per-request EAT/RPDI signals and the
budget-forcing decision, computed from logits tensors where they live.

``EntropyProbe`` holds one C++ ``meridian::EntropyProbe`` per request id and
reads logits through DLPack, in place: NumPy arrays and CPU tensors go to the
CPU kernel (Highway SIMD), CUDA tensors to the CUDA kernel on the tensor's
current stream (no host copy of the logits). The statistics are computed with
the GIL released. docs/api-python.md#entropy-probe has the full contract.

Importing this module imports neither torch nor NumPy; torch is imported only
when a torch CUDA tensor is passed (to read its current stream).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Real
from typing import TYPE_CHECKING, Any

from ._meridian import EntropySignal, MeridianConfig, _EntropyProbeCore

if TYPE_CHECKING:
    import numpy

__all__ = ["EntropyProbe"]

# DLPack device types (dlpack.h: kDLCUDA, kDLCUDAManaged).
_DL_CUDA = 2
_DL_CUDA_MANAGED = 13
# The CLI's default model (`meridian replay --model`), used when a config
# defines several models and none is named.
_DEFAULT_MODEL = "qwen3"
# compute_batch's logits when none is passed (`None` is not a tensor either).
_NO_LOGITS: Any = object()


def _cuda_stream(logits: Any) -> int:
    """The CUDA stream (a cudaStream_t as int) to run on for `logits`: 0 for
    host memory; for CUDA memory, torch's or CuPy's current stream on the
    tensor's device, else the legacy default stream (0)."""
    dlpack_device = getattr(logits, "__dlpack_device__", None)
    if dlpack_device is None:
        return 0
    device_type, device_id = dlpack_device()
    if int(device_type) not in (_DL_CUDA, _DL_CUDA_MANAGED):
        return 0
    framework = type(logits).__module__.partition(".")[0]
    if framework == "torch":
        import torch  # only here: the tensor is already a torch CUDA tensor

        return int(torch.cuda.current_stream(int(device_id)).cuda_stream)
    if framework == "cupy":
        import cupy

        with cupy.cuda.Device(int(device_id)):
            return int(cupy.cuda.get_current_stream().ptr)
    return 0


def _resolve_end_ids(config: MeridianConfig, model: str | None,
                     think_end_token_ids: Sequence[int] | None) -> list[int]:
    """The end-of-think ids: explicit ids win; else the ids of the config's
    model `model` (default: the only model the config defines, else qwen3)."""
    if think_end_token_ids is not None:
        if isinstance(think_end_token_ids, (str, bytes)) or not isinstance(think_end_token_ids, Sequence):
            raise TypeError("EntropyProbe: think_end_token_ids must be a sequence of ints (e.g. [151668]); got "
                            f"{type(think_end_token_ids).__name__}")
        ids = list(think_end_token_ids)
        for i, token in enumerate(ids):
            if isinstance(token, bool) or not isinstance(token, int):
                raise TypeError(f"EntropyProbe: think_end_token_ids[{i}] = {token!r} is not a token id "
                                f"(an int); got {type(token).__name__}")
            if not 0 <= token < 2**32:
                raise ValueError(f"EntropyProbe: think_end_token_ids[{i}] = {token!r} is not a token id "
                                 f"(an int in [0, 2**32))")
        return ids
    names = config.model_names
    if model is None:
        if len(names) == 1:
            model = names[0]
        elif _DEFAULT_MODEL in names:
            model = _DEFAULT_MODEL
        else:
            raise ValueError("EntropyProbe: no end-of-think ids: pass think_end_token_ids=, or model= naming one "
                             f"of the config's models ({', '.join(names) or 'none defined'})")
    if not isinstance(model, str):
        raise TypeError(f"EntropyProbe: model must be a str naming a config model; got {type(model).__name__}")
    ids = list(config.model(model).think_end_token_ids)  # ValueError naming the known models
    if not ids:
        raise ValueError(f"EntropyProbe: model.{model}.think_end_token_ids is empty (the model marks the end of "
                         "thinking with prose markers); pass think_end_token_ids=")
    return ids


def _check_ema_alpha(ema_alpha: float | None) -> float | None:
    """`ema_alpha` as a float after the checks of entropy.ema_alpha."""
    if ema_alpha is None:
        return None
    if isinstance(ema_alpha, bool) or not isinstance(ema_alpha, Real):
        raise TypeError(f"EntropyProbe: ema_alpha must be a float in (0, 1]; got {type(ema_alpha).__name__}")
    value = float(ema_alpha)
    if not (math.isfinite(value) and 0.0 < value <= 1.0):
        raise ValueError(f"EntropyProbe: ema_alpha must be in (0, 1]; got {ema_alpha!r}")
    return value


def _slot_is_set(probe: EntropyProbe) -> bool:
    try:
        object.__getattribute__(probe, "_core")
    except AttributeError:
        return False
    return True


class EntropyProbe:
    """Entropy signals and the forcing decision for many requests, keyed by
    an integer request id (state is created on a request's first token and
    dropped by :meth:`release`).

    Args:
        config: settings of ``[entropy]`` and the think-token bounds of
            ``[scheduler]``; default ``MeridianConfig.defaults()``.
            Validated (``ValueError`` with dotted paths).
        model: the config model whose ``think_end_token_ids`` to use;
            default the config's only model, else ``qwen3``.
        think_end_token_ids: explicit end-of-think ids (1 to 8); wins over
            ``model``.
        backend: ``"cpu"`` (host tensors only), ``"cuda"`` (CUDA tensors
            only; ``KernelError`` at construction if CUDA is unavailable) or
            ``"auto"`` (the tensor's device decides, per call).
        ema_alpha: this probe's EMA decay, in (0, 1]; default the config's
            ``entropy.ema_alpha``, which it overrides for this probe only
            (the config is not changed).

    Wrong argument types raise ``TypeError``, bad values ``ValueError``
    naming the argument.

    Logits: a NumPy array or any DLPack tensor (torch, CuPy, JAX) of
    float32, bfloat16 or float16 with a contiguous last (vocab) dimension,
    in host or CUDA memory. Wrong dtype, shape, strides, device or row
    indices raise ``ValueError`` (not a tensor: ``TypeError``); a CUDA
    failure or missing CUDA support raises :class:`meridian.KernelError`.

    Thread-safety: use one EntropyProbe from one thread at a time; a second
    thread calling a compute method while one runs gets ``RuntimeError``.
    Other threads keep running while a kernel runs (the GIL is released).
    """

    __slots__ = ("_core",)

    def __init__(self, config: MeridianConfig | None = None, *, model: str | None = None,
                 think_end_token_ids: Sequence[int] | None = None, backend: str = "auto",
                 ema_alpha: float | None = None) -> None:
        if config is None:
            config = MeridianConfig.defaults()
        elif not isinstance(config, MeridianConfig):
            raise TypeError("EntropyProbe: config must be a MeridianConfig (meridian.load_config(path)); got "
                            f"{type(config).__name__}")
        if not isinstance(backend, str):
            raise TypeError(f"EntropyProbe: backend must be 'auto', 'cpu' or 'cuda'; got {type(backend).__name__}")
        alpha = _check_ema_alpha(ema_alpha)
        ids = _resolve_end_ids(config, model, think_end_token_ids)
        self._core = _EntropyProbeCore(config, ids, backend, alpha)

    def __getattr__(self, name: str) -> Any:
        # Reached only when normal lookup fails: the `_core` slot is unset
        # when the object came from `EntropyProbe.__new__` (copy, pickle
        # tricks, a subclass skipping `super().__init__`).
        if name == "_core":
            raise RuntimeError("EntropyProbe: this object was never initialised (created without "
                               "EntropyProbe.__init__); construct it as EntropyProbe(config, ...)")
        raise AttributeError(f"'EntropyProbe' object has no attribute {name!r}")

    def compute(self, req_id: int, logits: Any, *, think_tokens: int | None = None,
                tool_call_open: bool = False) -> EntropySignal:
        """Feeds request `req_id` one think token whose next-token logits are
        `logits` ([vocab] or [1, vocab]).

        token_entropy is the row's entropy (RPDI); when an EAT sample is due
        at `think_tokens` it is the in-step proxy, the same row's entropy
        (ADR-0011: a logits processor cannot run the probe pass).
        `think_tokens` (this token included) defaults to the request's
        previous count + 1 and may not go back. With `tool_call_open`, a due
        force is reported in ``held_by_tool_call`` instead of ``force``.
        """
        return self._core.compute(req_id, logits, think_tokens, tool_call_open, _cuda_stream(logits))

    def compute_batch(self, req_ids: Sequence[int], logits: Any = _NO_LOGITS, *,
                      rows: Sequence[int] | None = None, think_tokens: Sequence[int] | None = None,
                      tool_call_open: Sequence[bool] | None = None,
                      logits_batch: Any = _NO_LOGITS) -> list[EntropySignal]:
        """:meth:`compute` for a batch: ``req_ids[i]`` reads row ``rows[i]``
        (default ``i``; then the batch must have ``len(req_ids)`` rows) of the
        2-D `logits`. All rows are computed in one C++ call: on the CPU only
        the selected rows are read (runs of consecutive rows as one kernel
        call each); on CUDA one launch covers rows ``min(rows)..max(rows)``.
        Sequence lengths must match; req_ids must be distinct.

        ``logits_batch=`` is the seeds' name for `logits` (pass one of the
        two; both or neither is a ``TypeError``).
        """
        if logits_batch is not _NO_LOGITS:
            if logits is not _NO_LOGITS:
                raise TypeError("EntropyProbe.compute_batch: pass logits or logits_batch (the same argument), "
                                "not both")
            logits = logits_batch
        elif logits is _NO_LOGITS:
            raise TypeError("EntropyProbe.compute_batch: missing the logits (logits= or logits_batch=)")
        return self._core.compute_batch(req_ids, logits, rows, think_tokens, tool_call_open,
                                        _cuda_stream(logits))

    def row_stats(self, logits: Any, rows: Sequence[int] | None = None) -> dict[str, numpy.ndarray]:
        """The raw statistics of `logits` ([vocab] or [batch, vocab]; the
        selected `rows`, default all), no per-request state: ``entropy``,
        ``max_logit``, ``log_sum_exp``, ``end_think_mass`` (float32, nats),
        ``argmax`` (int32, -1 for a row of only -inf) and ``flags`` (uint32:
        1 NaN, 2 +inf, 4 every logit -inf)."""
        return self._core.row_stats(logits, rows, _cuda_stream(logits))

    def release(self, req_id: int) -> bool:
        """Drops request `req_id`'s state; True if it was tracked."""
        return self._core.release(req_id)

    def __len__(self) -> int:
        return len(self._core)

    def __contains__(self, req_id: object) -> bool:
        return isinstance(req_id, int) and 0 <= req_id < 2**64 and req_id in self._core

    @property
    def backend(self) -> str:
        """``"auto"``, ``"cpu"`` or ``"cuda"``."""
        return self._core.backend

    @property
    def think_end_token_ids(self) -> list[int]:
        return list(self._core.think_end_token_ids)

    @staticmethod
    def cuda_available() -> bool:
        """Whether this build has the CUDA kernel and a CUDA device is visible."""
        return not _EntropyProbeCore.cuda_unavailable_reason()

    def __repr__(self) -> str:
        if not _slot_is_set(self):
            return "EntropyProbe(<uninitialised>)"
        return (f"EntropyProbe(backend={self.backend!r}, think_end_token_ids={self.think_end_token_ids}, "
                f"requests={len(self)})")
