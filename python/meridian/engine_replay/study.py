"""The studies of `meridian engine-replay`: runs at one rate (ab-report), the
goodput search per arm and seed, and the fidelity of the simulator against the
real scheduler. Each (arm, seed) job runs in its own process (--jobs)."""
from __future__ import annotations

import math
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from meridian._meridian import sim

ARMS = ("vllm-async", "vllm-sync", "meridian-async", "meridian-sync")
# Goodput search: rates as multiples of the simulator's vllm-fcfs goodput (the
# engine's goodput is near it), then bisection to the tolerance, as `meridian replay --goodput`.
GRID = (0.5, 0.7, 0.85, 1.0, 1.15, 1.3, 1.5, 1.75, 2.0, 2.5)
TOLERANCE = 0.03
FIDELITY_LOADS = (0.5, 0.9, 1.1)
# What fidelity compares: (label, metric). tokens_per_step and goodput are derived.
FIDELITY_METRICS = (
    ("TTFT P50", "ttft_p50_ms"), ("TTFT P90", "ttft_p90_ms"), ("TTFT P99", "ttft_p99_ms"),
    ("output TPOT P50", "output_tpot_p50_ms"), ("output TPOT P90", "output_tpot_p90_ms"),
    ("think TPOT P50", "think_tpot_p50_ms"), ("think TPOT P90", "think_tpot_p90_ms"),
    ("E2E P50", "e2e_p50_ms"), ("tokens per step", "tokens_per_step"), ("preemptions", "preemptions"),
)
# The simulator's policy that models each arm.
SIM_POLICY = {"vllm-async": "vllm-fcfs", "vllm-sync": "vllm-fcfs", "meridian-async": "meridian-no-forcing",
              "meridian-sync": "meridian-no-forcing"}


@dataclass(frozen=True)
class Job:
    """What a worker process needs: everything as plain values (the params as TOML)."""

    params_toml: str
    arm: str
    seed: int
    scheduler_cpu_ms: float


def _params(job: Job) -> Any:
    return sim.parse_replay_params(job.params_toml, "<engine-replay>")


def run_once(job: Job, rate: float, stop_after_misses: int = 0) -> dict[str, float]:
    """One engine run of job.arm on the seed's workload at `rate`: its metrics."""
    from .build import SimClock, build_scheduler, scheduler_class
    from .engine import Arm, EngineRun

    params = _params(job)
    params.workload.arrival_rate = rate
    requests = sim.generate_workload(params.workload, job.seed)
    clock = SimClock()
    two = job.arm.endswith("async")
    cls = scheduler_class(job.arm)
    sched = build_scheduler(cls, params, two_in_flight=two, clock=clock)
    try:
        result = EngineRun(Arm(job.arm, cls, two), sched, params, requests, clock=clock,
                           scheduler_cpu_ms=job.scheduler_cpu_ms, stop_after_misses=stop_after_misses).run()
    finally:
        sched.shutdown()
    m = dict(result.metrics)
    m["tokens_per_step"] = m["simulated_tokens"] / m["steps"] if m["steps"] else 0.0
    m["schedule_wall_s"] = result.schedule_s
    m["driver_wall_s"] = result.driver_s
    m["rate"] = rate
    return m


def search(job: Job, base_rate: float) -> dict[str, Any]:
    """The goodput search of one arm on one seed (the simulator's search, on engine runs)."""
    params = _params(job)
    target = params.slo.attainment_pct
    runs: list[dict[str, float]] = []

    def attainment(rate: float, for_plot: bool) -> tuple[float, float, float, bool]:
        n = len(_workload_at(params, rate, job.seed))
        allowed = 0 if for_plot else int(math.floor(n * (1 - target / 100.0)))
        m = run_once(job, rate, stop_after_misses=allowed)
        runs.append(m)
        return m["slo_attainment_pct"], m["slo_attainment_chat_pct"], m["slo_attainment_reasoning_pct"], \
            bool(m["stopped_early"])

    rate, at_least, points = sim.search_goodput(attainment, base_rate, target, list(GRID), TOLERANCE, 50.0)
    return {"arm": job.arm, "seed": job.seed, "goodput_rps": rate, "at_least": at_least,
            "points": [{"rate": r, "attainment_pct": a, "stopped_early": s, "scan": g} for r, a, s, g in points],
            "schedule_wall_s": sum(m["schedule_wall_s"] for m in runs),
            "driver_wall_s": sum(m["driver_wall_s"] for m in runs), "runs": len(runs)}


def _workload_at(params: Any, rate: float, seed: int) -> list[Any]:
    params.workload.arrival_rate = rate
    return sim.generate_workload(params.workload, seed)


def _run_job(args: tuple[Job, float]) -> dict[str, float]:
    return run_once(*args)


def _search_job(args: tuple[Job, float]) -> dict[str, Any]:
    return search(*args)


def pool_map(fn: Any, items: list[Any], jobs: int) -> list[Any]:
    """fn over items, in `jobs` processes (1: here). Each process imports vLLM once."""
    if jobs <= 1 or len(items) <= 1:
        return [fn(i) for i in items]
    import multiprocessing

    with ProcessPoolExecutor(max_workers=min(jobs, len(items)),
                             mp_context=multiprocessing.get_context("spawn")) as ex:
        return list(ex.map(fn, items))


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def simulator_goodput(params: Any, seeds: list[int]) -> dict[str, list[float]]:
    return dict(sim.find_goodput(params, ["vllm-fcfs", "meridian-no-forcing"], seeds))


def simulator_run(params: Any, policy: str, seed: int, rate: float) -> dict[str, float]:
    params.workload.arrival_rate = rate
    m = dict(sim.run_replay(params, policy, seed))
    m["tokens_per_step"] = m["simulated_tokens"] / m["steps"] if m["steps"] else 0.0
    return m


def relative_error(simulated: float, engine: float) -> float | None:
    """(simulator - engine) / engine; None where the engine's value is 0 and the simulator's is not."""
    if engine == 0:
        return 0.0 if simulated == 0 else None
    return (simulated - engine) / abs(engine)
