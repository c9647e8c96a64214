"""Per-run metrics with the replay's names and definitions (docs/replay.md, "Metrics").

A run is one arm on one seed's workload. Client-side numbers come from the
request records; preemptions, the prefix-cache hit rate and prefill work from
the server's Prometheus ``/metrics`` (before/after differences).
"""
from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable

from .client import Record


@dataclasses.dataclass(frozen=True)
class Slo:
    """The replay's ``[slo]`` defaults."""

    ttft_ms: float = 1000
    output_tpot_ms: float = 20
    think_tpot_ms: float = 80
    attainment_pct: float = 90


LOWER, HIGHER, NEITHER = "lower", "higher", "neither"

# (name, better, label): the replay's catalog (src/sim/report.cpp) where a
# client or /metrics can measure it, then the real engine's own checks.
CATALOG: list[tuple[str, str, str]] = [
    ("requests", NEITHER, "requests in the workload"),
    ("arrived", NEITHER, "requests sent"),
    ("completed", HIGHER, "requests completed"),
    ("aborted", LOWER, "requests failed (HTTP or engine error)"),
    ("unfinished", LOWER, "requests unfinished at --max-run-s"),
    ("never_arrived", LOWER, "follow-up turns never sent"),
    ("slo_attainment_pct", HIGHER, "SLO attainment %"),
    ("slo_attainment_chat_pct", HIGHER, "SLO attainment: chat %"),
    ("slo_attainment_reasoning_pct", HIGHER, "SLO attainment: reasoning %"),
    ("slo_miss_ttft_pct", LOWER, "SLO missed on TTFT %"),
    ("slo_miss_output_tpot_pct", LOWER, "SLO missed on output TPOT %"),
    ("slo_miss_think_tpot_pct", LOWER, "SLO missed on think TPOT %"),
    ("slo_miss_incomplete_pct", LOWER, "SLO missed: not completed %"),
    ("ttft_p50_ms", LOWER, "TTFT P50 (ms)"),
    ("ttft_p95_ms", LOWER, "TTFT P95 (ms)"),
    ("ttft_p99_ms", LOWER, "TTFT P99 (ms)"),
    ("ttfv_p50_ms", LOWER, "TTFV P50 (ms): first visible token"),
    ("ttfv_p95_ms", LOWER, "TTFV P95 (ms)"),
    ("ttfv_chat_p50_ms", LOWER, "TTFV chat P50 (ms)"),
    ("ttfv_chat_p95_ms", LOWER, "TTFV chat P95 (ms)"),
    ("ttfv_reasoning_p50_ms", LOWER, "TTFV reasoning P50 (ms)"),
    ("ttfv_reasoning_p95_ms", LOWER, "TTFV reasoning P95 (ms)"),
    ("ttot_p50_ms", LOWER, "TTOT P50 (ms; </think> to first visible token)"),
    ("ttot_p95_ms", LOWER, "TTOT P95 (ms; </think> to first visible token)"),
    ("ttot_p99_ms", LOWER, "TTOT P99 (ms; </think> to first visible token)"),
    ("output_tpot_p50_ms", LOWER, "output TPOT P50 (ms, per request)"),
    ("output_tpot_p95_ms", LOWER, "output TPOT P95 (ms, per request)"),
    ("output_itl_p50_ms", LOWER, "output ITL P50 (ms)"),
    ("output_itl_p95_ms", LOWER, "output ITL P95 (ms)"),
    ("output_itl_p99_ms", LOWER, "output ITL P99 (ms)"),
    ("output_itl_max_ms", LOWER, "output ITL max (ms)"),
    ("think_tpot_p50_ms", LOWER, "think TPOT P50 (ms)"),
    ("think_tpot_p99_ms", LOWER, "think TPOT P99 (ms)"),
    ("think_itl_p99_ms", LOWER, "think ITL P99 (ms)"),
    ("think_itl_max_ms", LOWER, "think ITL max (ms)"),
    ("e2e_p50_ms", LOWER, "E2E P50 (ms)"),
    ("e2e_p95_ms", LOWER, "E2E P95 (ms)"),
    ("think_tokens_avg", NEITHER, "think tokens avg"),
    ("think_tokens_p95", NEITHER, "think tokens P95"),
    ("think_tokens_total", NEITHER, "think tokens total"),
    ("think_tokens_saved_pct", NEITHER, "think tokens saved % (vs the requested length)"),
    ("output_tokens_total", NEITHER, "answer tokens total"),
    ("preemptions", LOWER, "preemptions (vllm:num_preemptions)"),
    ("preemptions_per_completed", LOWER, "preemptions per completed request (thrash)"),
    ("prefix_hit_rate", HIGHER, "prompt prefix-hit rate (vllm:prefix_cache_hits / queries)"),
    ("prefill_tokens", LOWER, "prefill tokens computed (incl. recompute)"),
    ("throughput_tokens_per_s", NEITHER, "throughput (tokens/s; demand, not capacity)"),
    ("think_throughput_tokens_per_s", NEITHER, "think throughput (tokens/s)"),
    ("arrival_window_throughput_tokens_per_s", NEITHER, "throughput while arrivals last (tokens/s)"),
    ("makespan_s", NEITHER, "makespan (s)"),
    # The real engine's own checks (not replay metrics).
    ("prompt_tokens_avg", NEITHER, "prompt tokens avg (measured by the server)"),
    ("client_lag_p99_ms", LOWER, "client send lag P99 (ms; > 10 means the client is late)"),
    ("multi_token_chunks_pct", NEITHER, "streamed chunks carrying > 1 token %"),
    ("split_mismatch_chunks", LOWER, "chunks whose delta fields disagree with the token-id split"),
    ("reasoning_without_answer", LOWER, "reasoning requests that never reached </think>"),
]
CATALOG_NAMES = [name for name, _, _ in CATALOG]
BETTER = {name: better for name, better, _ in CATALOG}
LABEL = {name: label for name, _, label in CATALOG}

# The replay's metrics this benchmark does not report, and why.
NOT_MEASURED = {
    "rejected": "the replay engine's bound on requests held; a real server's refusals are HTTP errors, under aborted",
    "stopped_early": "the replay's goodput search only; a real run is never cut short by its verdict",
    "forced_pct, forced_converged_pct, forced_overthinking_pct, forced_hard_cap_pct":
        "a client cannot tell a forced </think> from a natural one (Meridian's telemetry counts its own)",
    "forced_before_answer_pct": "a proxy of the replay's signal model; a real engine needs an accuracy evaluation",
    "evictions_think_complete, evictions_think_active, evictions_output_critical, output_critical_eviction_events":
        "vLLM exposes no per-tier KV eviction counters on /metrics",
    "preemptions_recompute, preemptions_swap": "vllm:num_preemptions has no reclaim-mode label",
    "preempted_answer_phase, answer_phase_evicted_blocks":
        "needs the scheduler's phase of each victim; vLLM's /metrics has no phase",
    "probe_passes": "EAT probe passes happen inside the engine; not exported on /metrics",
    "simulated_tokens, steps, gpu_busy_pct, sim_wall_s, sim_tokens_per_s": "the simulator's own work",
}


def percentile(values: Iterable[float], q: float) -> float:
    """Nearest rank, as the replay (src/sim/metrics.h); 0 for no values."""
    v = sorted(values)
    if not v:
        return 0.0
    rank = math.ceil(q / 100.0 * len(v))
    return v[min(max(rank, 1) - 1, len(v) - 1)]


def _ms(seconds: float) -> float:
    return 1000.0 * seconds


@dataclasses.dataclass
class Outcome:
    """A request's SLO-relevant numbers in ms (-1: not applicable)."""

    completed: bool
    reasoning: bool
    ttft_ms: float = -1
    ttfv_ms: float = -1
    output_tpot_ms: float = -1
    think_tpot_ms: float = -1

    def meets(self, slo: Slo) -> bool:
        """``meets_slo`` of src/sim/engine.cpp."""
        if not self.completed or self.ttft_ms < 0 or self.ttft_ms > slo.ttft_ms:
            return False
        if self.output_tpot_ms >= 0 and self.output_tpot_ms > slo.output_tpot_ms:
            return False
        return not (self.think_tpot_ms >= 0 and self.think_tpot_ms > slo.think_tpot_ms)


def outcome(r: Record) -> Outcome:
    o = Outcome(completed=r.status == "completed", reasoning=r.reasoning)
    if r.first_token >= 0:
        o.ttft_ms = _ms(r.first_token)
    if r.first_visible >= 0:
        o.ttfv_ms = _ms(r.first_visible)
    if r.answer_tokens >= 2:
        o.output_tpot_ms = _ms(r.last_token - r.first_visible) / (r.answer_tokens - 1)
    if r.think_end >= 0 and r.think_tokens > 1 and r.first_token >= 0:
        o.think_tpot_ms = _ms(r.think_end - r.first_token) / r.think_tokens
    return o


def run_metrics(records: list[Record], makespan_s: float, server_delta: dict[str, float], slo: Slo,
                exact_lengths: bool) -> dict[str, float]:
    """One run's metrics, keyed as in CATALOG (think_tokens_saved_pct only with exact lengths)."""
    m: dict[str, float] = {}
    outcomes = [outcome(r) for r in records]
    sent = [r for r in records if r.status != "never_arrived"]
    done = [r for r in records if r.status == "completed"]
    pct = lambda part, whole: 100.0 * part / whole if whole else 0.0  # noqa: E731
    chat = [o for o in outcomes if not o.reasoning]
    reasoning = [o for o in outcomes if o.reasoning]
    m["requests"] = len(records)
    m["arrived"] = len(sent)
    m["completed"] = len(done)
    m["aborted"] = sum(r.status == "aborted" for r in records)
    m["unfinished"] = sum(r.status == "unfinished" for r in records)
    m["never_arrived"] = len(records) - len(sent)
    m["slo_attainment_pct"] = pct(sum(o.meets(slo) for o in outcomes), len(outcomes))
    m["slo_attainment_chat_pct"] = pct(sum(o.meets(slo) for o in chat), len(chat))
    m["slo_attainment_reasoning_pct"] = pct(sum(o.meets(slo) for o in reasoning), len(reasoning))
    m["slo_miss_ttft_pct"] = pct(sum(o.ttft_ms > slo.ttft_ms for o in outcomes), len(outcomes))
    m["slo_miss_output_tpot_pct"] = pct(sum(o.output_tpot_ms > slo.output_tpot_ms for o in outcomes), len(outcomes))
    m["slo_miss_think_tpot_pct"] = pct(sum(o.think_tpot_ms > slo.think_tpot_ms for o in outcomes), len(outcomes))
    m["slo_miss_incomplete_pct"] = pct(sum(not o.completed for o in outcomes), len(outcomes))
    ttft = [o.ttft_ms for o in outcomes if o.ttft_ms >= 0]
    ttfv = [o.ttfv_ms for o in outcomes if o.ttfv_ms >= 0]
    for q in (50, 95, 99):
        m[f"ttft_p{q}_ms"] = percentile(ttft, q)
    for q in (50, 95):
        m[f"ttfv_p{q}_ms"] = percentile(ttfv, q)
        m[f"ttfv_chat_p{q}_ms"] = percentile([o.ttfv_ms for o in chat if o.ttfv_ms >= 0], q)
        m[f"ttfv_reasoning_p{q}_ms"] = percentile([o.ttfv_ms for o in reasoning if o.ttfv_ms >= 0], q)
    ttot = [_ms(r.first_visible - r.think_end) for r in records if r.think_end >= 0 and r.first_visible >= 0]
    for q in (50, 95, 99):
        m[f"ttot_p{q}_ms"] = percentile(ttot, q)
    tpot = [o.output_tpot_ms for o in outcomes if o.output_tpot_ms >= 0]
    m["output_tpot_p50_ms"] = percentile(tpot, 50)
    m["output_tpot_p95_ms"] = percentile(tpot, 95)
    itl = [_ms(g) for r in records for g in r.answer_gaps]
    for q in (50, 95, 99):
        m[f"output_itl_p{q}_ms"] = percentile(itl, q)
    m["output_itl_max_ms"] = max(itl, default=0.0)
    think_tpot = [o.think_tpot_ms for o in outcomes if o.think_tpot_ms >= 0]
    m["think_tpot_p50_ms"] = percentile(think_tpot, 50)
    m["think_tpot_p99_ms"] = percentile(think_tpot, 99)
    think_itl = [_ms(g) for r in records for g in r.think_gaps]
    m["think_itl_p99_ms"] = percentile(think_itl, 99)
    m["think_itl_max_ms"] = max(think_itl, default=0.0)
    e2e = [_ms(r.last_token) for r in done if r.last_token >= 0]
    m["e2e_p50_ms"] = percentile(e2e, 50)
    m["e2e_p95_ms"] = percentile(e2e, 95)
    think_counts = [r.think_tokens for r in done if r.reasoning]
    m["think_tokens_avg"] = sum(think_counts) / len(think_counts) if think_counts else 0.0
    m["think_tokens_p95"] = percentile(think_counts, 95)
    m["think_tokens_total"] = sum(r.think_tokens for r in records)
    if exact_lengths:
        natural = sum(r.requested_think for r in done if r.reasoning)
        m["think_tokens_saved_pct"] = 100.0 * (1.0 - sum(think_counts) / natural) if natural else 0.0
    m["output_tokens_total"] = sum(r.answer_tokens for r in records)
    preemptions = server_delta.get("preemptions", 0.0)
    m["preemptions"] = preemptions
    m["preemptions_per_completed"] = preemptions / len(done) if done else preemptions
    queries = server_delta.get("prefix_cache_queries", 0.0)
    m["prefix_hit_rate"] = server_delta.get("prefix_cache_hits", 0.0) / queries if queries else 0.0
    m["prefill_tokens"] = server_delta.get("prefill_tokens", 0.0)
    generated = m["think_tokens_total"] + m["output_tokens_total"]
    m["throughput_tokens_per_s"] = generated / makespan_s if makespan_s > 0 else 0.0
    m["think_throughput_tokens_per_s"] = m["think_tokens_total"] / makespan_s if makespan_s > 0 else 0.0
    window = max((r.scheduled_s for r in records if r.turn == 0 and r.status != "never_arrived"), default=0.0)
    window_tokens = sum(r.window_tokens for r in records)
    m["arrival_window_throughput_tokens_per_s"] = window_tokens / window if window > 0 else 0.0
    m["makespan_s"] = makespan_s
    m["prompt_tokens_avg"] = sum(r.prompt_tokens for r in sent) / len(sent) if sent else 0.0
    m["client_lag_p99_ms"] = percentile([_ms(r.sent_s - r.scheduled_s) for r in sent], 99)
    chunks = sum(r.chunks for r in records)
    m["multi_token_chunks_pct"] = pct(sum(r.multi_token_chunks for r in records), chunks)
    m["split_mismatch_chunks"] = sum(r.split_mismatches for r in records)
    m["reasoning_without_answer"] = sum(r.reasoning and r.status == "completed" and r.think_end < 0 for r in records)
    return m


# ---- Prometheus /metrics -----------------------------------------------------

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)')


def parse_prometheus(text: str) -> dict[str, float]:
    """Sums each counter over its label sets; ``name{source="x"}`` keys keep a ``source`` label."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, labels, value = match.groups()
        try:
            v = float(value)
        except ValueError:
            continue
        key = name
        if labels:
            source = re.search(r'source="([^"]*)"', labels)
            if source:
                key = f'{name}{{source="{source.group(1)}"}}'
        out[key] = out.get(key, 0.0) + v
    return out


def server_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The run's share of vLLM's counters (names from vllm/v1/metrics/loggers.py)."""
    def d(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    prefill = d('vllm:prompt_tokens_by_source_total{source="local_compute"}')
    if 'vllm:prompt_tokens_by_source_total{source="local_compute"}' not in after:
        prefill = d("vllm:prompt_tokens_total") - d("vllm:prompt_tokens_cached_total")
    return {
        "preemptions": d("vllm:num_preemptions_total"),
        "prefix_cache_queries": d("vllm:prefix_cache_queries_total"),
        "prefix_cache_hits": d("vllm:prefix_cache_hits_total"),
        "prefill_tokens": prefill,
        "generation_tokens": d("vllm:generation_tokens_total"),
    }
