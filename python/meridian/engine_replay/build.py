"""vLLM's scheduler classes built as the engine builds them, sized like the
simulated GPU: the KV pool has the roofline's block count (block size 16),
prefix caching on, [engine]'s max_num_seqs and max_num_batched_tokens."""
from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from meridian._meridian import sim

MODEL_DIR = pathlib.Path(__file__).resolve().parent / "model"  # Qwen3's config.json (no weights, no tokenizer)
BLOCK = 16
MAX_MODEL_LEN = 40960  # Qwen3's max_position_embeddings: every workload request fits


@dataclass
class SimClock:
    """The simulated time the run is at; the Meridian adapter plans on it."""

    now_s: float = 0.0

    def ns(self) -> int:
        return int(self.now_s * 1e9)


def prepare_process_env() -> None:
    """What `meridian engine-replay` sets for its own process (offline, no GPU needed, no usage
    reports); values already in the environment win. Library callers keep their environment."""
    for key, value in {"VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                       "VLLM_NO_USAGE_STATS": "1", "VLLM_DO_NOT_TRACK": "1"}.items():
        os.environ.setdefault(key, value)


# The Meridian configuration of the meridian-* arms unless $MERIDIAN_CONFIG names one: the
# defaults (the simulator's meridian policies run them too), with no Prometheus port (every
# worker process builds schedulers) and errors only in the log (docs/replay.md says what the
# adapter's warnings in a replay mean).
REPLAY_CONFIG = """[telemetry]
prometheus_enabled = false
[logging]
level = "error"
"""


@contextlib.contextmanager
def _env_for_construction(values: dict[str, str]) -> Iterator[None]:
    """Sets each variable not already set for the scheduler's construction only, then restores."""
    added = [k for k, v in values.items() if not os.environ.get(k)]
    for k in added:
        os.environ[k] = values[k]
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


@contextlib.contextmanager
def _replay_config(slo: Any) -> Iterator[str]:
    """The Meridian arms' meridian.toml: no metrics port, and the SLO the run is judged by, as
    the simulator gives its Meridian policies (ADR-0026, ADR-0027) and an operator sets theirs.
    Yields its path; the file lives only while the scheduler is constructed (it reads its
    configuration then), so a replay leaves nothing in the temporary directory."""
    text = REPLAY_CONFIG + (
        "[scheduler]\n"
        f"output_tpot_budget_ms = {float(slo.output_tpot_ms)!r}\n"
        f"think_tpot_budget_ms = {float(slo.think_tpot_ms)!r}\n"
        f"ttft_slo_ms = {float(slo.ttft_ms)!r}\n"
        f"ttfv_slo_ms = {float(slo.ttfv_ms)!r}\n")
    with tempfile.TemporaryDirectory(prefix="meridian-engine-replay-") as tmp:
        path = pathlib.Path(tmp) / "meridian.toml"
        path.write_text(text)
        yield str(path)


def scheduler_class(name: str) -> Any:
    """'vllm-*' arms: vLLM's stock class for that stepping; 'meridian-*': meridian.vllm.Scheduler."""
    if name.startswith("meridian"):
        from meridian.vllm import Scheduler

        return Scheduler
    if name.endswith("async"):
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler

        return AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler as StockScheduler

    return StockScheduler


def build_scheduler(cls: Any, params: Any, *, two_in_flight: bool, clock: SimClock,
                    max_num_batched_tokens: int | None = None, priority: bool = False) -> Any:
    """``cls`` constructed as EngineCore constructs its scheduler, with the [engine] settings
    (``priority``: ``--scheduling-policy priority``)."""
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    num_blocks = sim.RooflineCostModel(params.cost_model).kv_capacity_blocks(BLOCK)
    model = ModelConfig(model=str(MODEL_DIR), skip_tokenizer_init=True, dtype="float16", max_model_len=MAX_MODEL_LEN,
                        seed=0)
    sched_cfg = SchedulerConfig(
        max_num_seqs=params.engine.max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens or params.engine.max_num_batched_tokens,
        max_model_len=MAX_MODEL_LEN, is_encoder_decoder=False, async_scheduling=two_in_flight,
        long_prefill_token_threshold=params.engine.long_prefill_token_threshold,
        policy="priority" if priority else "fcfs")
    cache = CacheConfig(block_size=BLOCK, gpu_memory_utilization=0.9, cache_dtype="auto", enable_prefix_caching=True)
    cache.num_gpu_blocks = num_blocks
    config = VllmConfig(model_config=model, scheduler_config=sched_cfg, cache_config=cache)
    kv = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[
        KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=1,
                                                      dtype=torch.float32))])
    # meridian.vllm.Scheduler picks its model preset from the reasoning parser; the replay serves
    # no tokenizer, so $MERIDIAN_MODEL names the preset whose ids tokens.py emits.
    with _replay_config(params.slo) as config_path, \
            _env_for_construction({"MERIDIAN_MODEL": "qwen3", "MERIDIAN_CONFIG": config_path}):
        sched = cls(vllm_config=config, kv_cache_config=kv,
                    structured_output_manager=StructuredOutputManager(config), block_size=BLOCK, log_stats=False)
    adapter = getattr(sched, "meridian", None)
    if adapter is not None:
        adapter.clock_ns = clock.ns
    return sched
