"""A real vLLM 0.32 scheduler built offline and stepped by hand.

The configuration comes from tests/data/qwen3-tiny (a Qwen3 config and the
real Qwen3 tokenizer), so vLLM derives the real think ids; the scheduler is
vLLM's own class (or Meridian's subclass); each step hands
``update_from_output`` a real ``ModelRunnerOutput`` with one token per
scheduled request, chosen by the test. Nothing of vLLM is faked: only the
model's choice of tokens is the test's.
"""
from __future__ import annotations

import os
import pathlib
from collections import deque
from collections.abc import Callable, Iterable

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("VLLM_DO_NOT_TRACK", "1")

import torch  # noqa: E402
from vllm.config import (  # noqa: E402
    CacheConfig, KVTransferConfig, ModelConfig, SchedulerConfig, SpeculativeConfig, StructuredOutputsConfig, VllmConfig)
from vllm.config.reasoning import ReasoningConfig  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

TINY_MODEL = pathlib.Path(__file__).resolve().parents[1] / "data" / "qwen3-tiny"

THINK = 151667  # <think>
END_THINK = 151668  # </think>
EOS = 151645  # <|im_end|>
TOOL_CALL = 151657  # <tool_call>
WORD = 1000  # an ordinary token

BLOCK = 16
_hasher_ready = False


def vllm_config(*, max_num_seqs: int = 64, max_num_batched_tokens: int = 8192, num_blocks: int = 1000,
                reasoning_parser: str | None = "qwen3", max_model_len: int = 8192,
                spec_tokens: int = 0, kv_connector_dir: str | None = None) -> VllmConfig:
    model = ModelConfig(model=str(TINY_MODEL), tokenizer=str(TINY_MODEL), dtype="float16",
                        max_model_len=max_model_len, seed=0)
    sched = SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                            max_model_len=max_model_len, is_encoder_decoder=False)
    cache = CacheConfig(block_size=BLOCK, gpu_memory_utilization=0.9, cache_dtype="auto",
                        enable_prefix_caching=True)
    cache.num_gpu_blocks = num_blocks
    kwargs = {}
    if reasoning_parser:
        kwargs["structured_outputs_config"] = StructuredOutputsConfig(reasoning_parser=reasoning_parser)
        kwargs["reasoning_config"] = ReasoningConfig(reasoning_parser=reasoning_parser)
    config = VllmConfig(model_config=model, scheduler_config=sched, cache_config=cache, **kwargs)
    if spec_tokens:
        # n-gram drafts: speculative decoding with no draft model to load.
        config.speculative_config = SpeculativeConfig(
            method="ngram", num_speculative_tokens=spec_tokens, prompt_lookup_max=3, prompt_lookup_min=2,
            target_model_config=config.model_config, target_parallel_config=config.parallel_config)
    if kv_connector_dir:
        # vLLM's ExampleConnector (KV saved to and loaded from files): a real KV connector whose
        # scheduler side runs on CPU; it makes vLLM drop a victim's in-flight output.
        config.scheduler_config.disable_hybrid_kv_cache_manager = True
        config.kv_transfer_config = KVTransferConfig(kv_connector="ExampleConnector", kv_role="kv_both",
                                                     kv_connector_extra_config={"shared_storage_path": kv_connector_dir})
    return config


def build(cls: type = AsyncScheduler, **kwargs) -> AsyncScheduler:
    """vLLM's scheduler class `cls`, constructed as the engine does."""
    global _hasher_ready
    config = vllm_config(**kwargs)
    num_blocks = config.cache_config.num_gpu_blocks
    kv = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[
        KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=1,
                                                      dtype=torch.float32))])
    if not _hasher_ready:
        init_none_hash(sha256)
        _hasher_ready = True
    return cls(vllm_config=config, kv_cache_config=kv, structured_output_manager=StructuredOutputManager(config),
               block_size=BLOCK, log_stats=False)


def request(rid: str, prompt: list[int], *, max_tokens: int = 4096, extra_args: dict | None = None,
            arrival: float | None = None) -> Request:
    params = SamplingParams(max_tokens=max_tokens, stop_token_ids=[EOS], extra_args=extra_args)
    return Request(request_id=rid, prompt_token_ids=list(prompt), sampling_params=params, pooling_params=None,
                   arrival_time=arrival, block_hasher=get_request_block_hasher(BLOCK, sha256))


def prompt(n: int, salt: int = 0) -> list[int]:
    """n ordinary prompt tokens, distinct per salt (no accidental prefix hits)."""
    return [2000 + (salt * 7919 + i) % 50000 for i in range(n)]


def isolate_config(tmp_path: pathlib.Path, monkeypatch) -> None:
    """No meridian.toml or preset from the developer's machine leaks into a test."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("MERIDIAN_CONFIG", raising=False)
    monkeypatch.delenv("MERIDIAN_MODEL", raising=False)


def write_config(tmp_path: pathlib.Path, monkeypatch, text: str) -> None:
    """A meridian.toml for the scheduler under test ($MERIDIAN_CONFIG)."""
    path = tmp_path / "meridian-test.toml"
    path.write_text(text)
    monkeypatch.setenv("MERIDIAN_CONFIG", str(path))


def slow_model_config(tmp_path: pathlib.Path, monkeypatch) -> None:
    """A static step-cost model in which only 16 decodes fit the answer
    ceiling, so the plan leaves think decodes out. The rig's steps take far
    less wall time than the model predicts, so the answers have always banked
    slack and their ceiling is its largest, 0.9 x 1.5 x 20 ms = 27 ms
    (ADR-0029): 3 + 1.5 x 16. The think budget is scaled with the costs (80 ms
    x 1.5), so steps without answers hold the same tokens as at 2 + 1 x n."""
    write_config(tmp_path, monkeypatch, "[scheduler]\nstep_cost_online = false\nstep_cost_base_ms = 3.0\n"
                 "step_cost_per_token_ms = 1.5\nstep_cost_per_kv_token_us = 0.0\nmin_prefill_tokens_per_step = 16\n"
                 "think_tpot_budget_ms = 120.0\n")


TokenChooser = Callable[[Request], int]


def step(sched: AsyncScheduler, choose: TokenChooser):
    """One engine step: schedule(), one token per scheduled request whose
    prefill completes (chosen by `choose`), update_from_output().
    Returns (scheduler_output, engine outputs)."""
    out = sched.schedule()
    req_ids = list(out.num_scheduled_tokens)
    sampled = []
    for rid in req_ids:
        r = sched.requests[rid]
        done_prefill = r.num_computed_tokens >= r.num_tokens
        sampled.append([choose(r)] if done_prefill else [])
    mro = ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
                            sampled_token_ids=sampled)
    engine_out = sched.update_from_output(out, mro)
    return out, engine_out


class TwoInFlight:
    """Steps a scheduler as vLLM's engine core does on a GPU
    (``EngineCore.step_with_batch_queue``, async scheduling): step N+1 is
    scheduled while step N still runs, so every request scheduled at step N
    still has an output placeholder when N+1 is planned; N's output is
    applied only after N+1 was scheduled. Tokens are chosen when a step's
    output comes back, by `choose`, as the model would sample them then.
    ``sampled(r)`` may return several tokens (speculative decoding: the
    accepted drafts and the bonus token)."""

    def __init__(self, sched: AsyncScheduler, choose: TokenChooser,
                 sampled: Callable[[Request, int], list[int]] | None = None) -> None:
        self.sched = sched
        self.choose = choose
        self.sampled = sampled
        self.queue: deque = deque()
        self.outputs: list = []  # every SchedulerOutput, in order

    def _apply(self) -> object:
        out, samples = self.queue.popleft()
        req_ids = list(out.num_scheduled_tokens)
        tokens = []
        for rid in req_ids:
            r = self.sched.requests.get(rid)
            if r is None or not samples[rid]:
                tokens.append([])
            elif self.sampled is not None:
                tokens.append(self.sampled(r, len(out.scheduled_spec_decode_tokens.get(rid, ()))))
            else:
                tokens.append([self.choose(r)])
        mro = ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                sampled_token_ids=tokens)
        return self.sched.update_from_output(out, mro)

    def schedule(self) -> object:
        """Schedules one step, which joins the steps in flight."""
        out = self.sched.schedule()
        self.outputs.append(out)
        samples = {rid: not self.sched.requests[rid].is_prefill_chunk for rid in out.num_scheduled_tokens}
        self.queue.append((out, samples))
        return out

    def apply_due(self, out) -> bool:
        """Whether the oldest step's output comes back now, after `out` was
        scheduled: once two are in flight, or when nothing was scheduled."""
        return len(self.queue) >= 2 or not out.total_num_scheduled_tokens

    def apply(self) -> object:
        """Applies the oldest in-flight step's output; returns the engine outputs."""
        return self._apply()

    def step(self):
        """Schedules one step; applies the oldest in-flight step's output once
        two are in flight (or nothing was scheduled). Returns (the new
        SchedulerOutput, the engine outputs applied or None)."""
        out = self.schedule()
        if not self.apply_due(out):
            return out, None
        return out, self._apply()

    def drain(self) -> None:
        while self.queue:
            self._apply()


def script(tokens_by_request: dict[str, Iterable[int]], default: int = WORD) -> TokenChooser:
    """Each request emits its scripted tokens in order, then `default`."""
    iters = {rid: iter(toks) for rid, toks in tokens_by_request.items()}

    def choose(r: Request) -> int:
        it = iters.get(r.request_id)
        return next(it, default) if it is not None else default

    return choose


__all__ = ["AsyncScheduler", "Request", "RequestStatus", "SamplingParams", "build", "request", "prompt",
           "step", "script", "TwoInFlight", "isolate_config", "write_config", "slow_model_config", "THINK", "END_THINK", "EOS", "TOOL_CALL", "WORD", "TINY_MODEL", "vllm_config"]
