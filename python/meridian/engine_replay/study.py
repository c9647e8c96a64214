"""The studies of `meridian engine-replay`: runs at one rate (ab-report), the
goodput search per arm and seed, and the fidelity of the simulator against the
real scheduler. Each (arm, seed) job runs in its own process (--jobs)."""
from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from meridian._meridian import sim

# The standard study's arms, and vllm-best-async on request: vLLM's stock async scheduler run with
# the setting the simulator's vllm-best search found (max_num_batched_tokens,
# long_prefill_token_threshold, scheduling policy; ADR-0023).
DEFAULT_ARMS = ("vllm-async", "vllm-sync", "meridian-async", "meridian-sync")
ARMS = DEFAULT_ARMS + ("vllm-best-async",)
# Goodput search, seeded from the simulator: sim.seeded_search() from the simulator's goodput for
# the arm's model (SIM_POLICY and its stepping, per seed), to this tolerance.
TOLERANCE = 0.03
FIDELITY_LOADS = (0.5, 0.9, 1.1)
# What fidelity compares: (label, metric). tokens_per_step and goodput are derived.
FIDELITY_METRICS = (
    ("TTFT P50", "ttft_p50_ms"), ("TTFT P90", "ttft_p90_ms"), ("TTFT P99", "ttft_p99_ms"),
    ("output TPOT P50", "output_tpot_p50_ms"), ("output TPOT P90", "output_tpot_p90_ms"),
    ("think TPOT P50", "think_tpot_p50_ms"), ("think TPOT P90", "think_tpot_p90_ms"),
    ("TTOT P50", "ttot_p50_ms"), ("TTOT P95", "ttot_p95_ms"),
    ("E2E P50", "e2e_p50_ms"), ("tokens per step", "tokens_per_step"), ("preemptions", "preemptions"),
    ("prefix hit rate", "prefix_hit_rate"),
)
# The simulator's policy that models each arm, and whether it models two steps in flight.
SIM_POLICY = {"vllm-async": "vllm-fcfs", "vllm-sync": "vllm-fcfs", "meridian-async": "meridian-no-forcing",
              "meridian-sync": "meridian-no-forcing", "vllm-best-async": "vllm-best"}
# The simulator's corrections from the engine replay (docs/replay.md#fidelity): each an
# [engine] switch, on by default; fidelity.json reports the error with each one off, and all off.
CORRECTIONS = ("scheduler_reserve_full_isl", "kv_free_tail_first", "async_scheduling")


def sim_async(arm: str) -> bool:
    """Whether the simulator models `arm` with two steps in flight."""
    return arm.endswith("async")


def sim_params(params: Any, arm: str, off: tuple[str, ...] = ()) -> Any:
    """A copy of `params` modelling `arm`: its stepping, with the corrections in `off` switched off."""
    params = sim.parse_replay_params(params.to_toml(), "<engine-replay>")
    e = params.engine
    e.async_scheduling = sim_async(arm) and "async_scheduling" not in off
    e.scheduler_reserve_full_isl = "scheduler_reserve_full_isl" not in off
    e.kv_free_tail_first = "kv_free_tail_first" not in off
    return params


@dataclass(frozen=True)
class Job:
    """What a worker process needs: everything as plain values (the params as TOML)."""

    params_toml: str
    arm: str
    seed: int
    scheduler_cpu_ms: float
    # vllm-best-async: (max_num_batched_tokens, long_prefill_token_threshold, priority)
    setting: tuple[int, int, bool] | None = None
    ruler: str = "sustainable"


def _params(job: Job) -> Any:
    params = sim.parse_replay_params(job.params_toml, "<engine-replay>")
    if job.setting is not None:
        params = vllm_setting(job.setting).apply(params)
    return params


def vllm_setting(values: tuple[int, int, bool]) -> Any:
    setting = sim.VllmSetting()
    setting.max_num_batched_tokens, setting.long_prefill_token_threshold, setting.priority = values
    return setting


def setting_values(setting: Any) -> tuple[int, int, bool]:
    return (int(setting.max_num_batched_tokens), int(setting.long_prefill_token_threshold), bool(setting.priority))


def parse_setting(label: str) -> tuple[int, int, bool]:
    """A vllm-best setting from its label ("max_num_batched_tokens=512 long_prefill_token_threshold=0
    fcfs"), one of the grid's (sim.vllm_best_settings())."""
    for setting in sim.vllm_best_settings():
        if setting.label() == " ".join(label.split()):
            return setting_values(setting)
    known = "; ".join(s.label() for s in sim.vllm_best_settings())
    raise ValueError(f"--vllm-best-setting: {label!r} is not a setting of the vllm-best grid; known: {known}")


def setting_goodput(params: Any, values: tuple[int, int, bool], seeds: list[int],
                    ruler: str = "sustainable") -> list[float]:
    """The simulator's goodput per seed of vLLM run with one setting, stepped async."""
    setting = vllm_setting(values)
    goodput, _ = sim.find_goodput(setting.apply(sim_params(params, "async")), [setting.policy], seeds, ruler)
    return goodput[0][1]


def find_vllm_best(params: Any, seeds: list[int], ruler: str = "sustainable") -> tuple[tuple[int, int, bool],
                                                                                        list[float]]:
    """The simulator's vllm-best search (async stepping, as the arm runs): the winning setting and
    its goodput per seed."""
    p = sim_params(params, "async")
    goodput, best = sim.find_goodput(p, ["vllm-best"], seeds, ruler)
    return setting_values(best), dict(goodput)["vllm-best"]


def run_once(job: Job, rate: float, stop_when_decided: bool = False) -> dict[str, Any]:
    """One engine run of job.arm on the seed's workload at `rate`: its metrics, its verdict under
    job.ruler ("verdict") and the physical bound for the work it did ("upper_bound_rps")."""
    from .build import SimClock, build_scheduler, scheduler_class
    from .engine import Arm, EngineRun

    params = _params(job)
    params.workload.arrival_rate = rate
    requests = sim.generate_workload(params.workload, job.seed)
    clock = SimClock()
    two = job.arm.endswith("async")
    cls = scheduler_class(job.arm)
    priority = job.setting is not None and job.setting[2]
    sched = build_scheduler(cls, params, two_in_flight=two, clock=clock, priority=priority)
    try:
        result = EngineRun(Arm(job.arm, cls, two), sched, params, requests, clock=clock,
                           scheduler_cpu_ms=job.scheduler_cpu_ms, ruler=job.ruler,
                           stop_when_decided=stop_when_decided).run()
    finally:
        sched.shutdown()
    m: dict[str, Any] = dict(result.metrics)
    m["verdict"] = result.verdict
    bound = sim.capacity_bound(params.cost_model, params.slo, sim.conversation_work(requests, result.think_tokens))
    m["upper_bound_rps"] = bound.rate
    m["tokens_per_step"] = m["simulated_tokens"] / m["steps"] if m["steps"] else 0.0
    m["schedule_wall_s"] = result.schedule_s
    m["driver_wall_s"] = result.driver_s
    m["rate"] = rate
    return m


def search(job: Job, base_rate: float, done: dict[float, dict[str, float]] | None = None) -> dict[str, Any]:
    """The goodput search of one arm on one seed (the simulator's search, on engine runs). `done`
    holds full runs already made at some rates (the fidelity loads): a search point at one of
    those rates reads it instead of running again."""
    runs: list[dict[str, Any]] = []
    done = done or {}
    seen: dict[float, dict[str, Any]] = {}

    def attainment(rate: float, for_plot: bool) -> tuple[float, float, float, bool, bool]:
        m = done.get(rate)
        if m is None:
            m = run_once(job, rate, stop_when_decided=True)  # stops once it cannot meet the ruler
            runs.append(m)
        seen[rate] = m
        v = m["verdict"]
        return v["attainment_pct"], v["chat_pct"], v["reasoning_pct"], bool(m["stopped_early"]), bool(v["meets"])

    # Up from the simulator's goodput when the arm meets the ruler there, else down to the first
    # factor that does; each rate runs once (the C++ search the vllm-best sweep uses).
    rate, at_least, points = sim.seeded_search(attainment, base_rate, TOLERANCE)
    # The bound: for the work the run at the goodput did (else the lowest rate's).
    at = seen.get(rate) if rate > 0 else None
    if at is None and seen:
        at = seen[min(seen)]
    point_info = []
    for r, a, stopped, scan, meets in points:
        v = seen[r]["verdict"] if r in seen else {}
        point_info.append({"rate": r, "attainment_pct": a, "stopped_early": stopped, "scan": scan, "meets": meets,
                           "reason": v.get("reason"), "chat_pct": v.get("chat_pct"),
                           "reasoning_pct": v.get("reasoning_pct"), "backlog_mid": v.get("backlog_mid"),
                           "backlog_end": v.get("backlog_end")})
    return {"arm": job.arm, "seed": job.seed, "goodput_rps": rate, "at_least": at_least, "base_rate": base_rate,
            "upper_bound_rps": at["upper_bound_rps"] if at else 0.0,
            "at_goodput": at["verdict"] if at and rate > 0 else None,
            "points": point_info,
            "schedule_wall_s": sum(m["schedule_wall_s"] for m in runs),
            "driver_wall_s": sum(m["driver_wall_s"] for m in runs), "runs": len(runs)}


@dataclass(frozen=True)
class ArmTask:
    """Everything one (arm, seed) worker does, so that its runs can share: the A/B run at `ab_rate`
    (None: none), full runs at the fidelity rates, and the goodput search from `search_base`."""

    job: Job
    ab_rate: float | None
    fidelity_rates: tuple[float, ...]
    search_base: float | None


def arm_task(task: ArmTask) -> dict[str, Any]:
    done: dict[float, dict[str, float]] = {}

    def full(rate: float) -> dict[str, float]:
        if rate not in done:
            done[rate] = run_once(task.job, rate)
        return done[rate]

    out: dict[str, Any] = {"ab": full(task.ab_rate) if task.ab_rate is not None else None,
                           "fidelity": [full(r) for r in task.fidelity_rates]}
    out["search"] = search(task.job, task.search_base, done) if task.search_base is not None else None
    return out


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


def simulator_goodput(params: Any, seeds: list[int], arms: list[str],
                      ruler: str = "sustainable") -> dict[str, list[float]]:
    """The simulator's goodput per seed for each arm's model (SIM_POLICY, stepped as the arm is),
    and for vllm-fcfs and meridian-no-forcing lockstep (the replay's numbers of record)."""
    out: dict[str, list[float]] = {}
    for two in (False, True):
        if two and not any(sim_async(a) for a in arms):
            continue
        p = sim_params(params, "async" if two else "sync")
        goodput, _ = sim.find_goodput(p, ["vllm-fcfs", "meridian-no-forcing"], seeds, ruler)
        for policy, values in goodput:
            out[policy + (" (async)" if two else "")] = values
    return out


def sim_goodput_key(arm: str) -> str:
    """The simulator_goodput() entry that models `arm`."""
    return SIM_POLICY[arm] + (" (async)" if sim_async(arm) else "")


def simulator_run(params: Any, policy: str, seed: int, rate: float) -> dict[str, float]:
    params.workload.arrival_rate = rate
    m = dict(sim.run_replay(params, policy, seed, "sustainable"))
    m["tokens_per_step"] = m["simulated_tokens"] / m["steps"] if m["steps"] else 0.0
    return m


def relative_error(simulated: float, engine: float) -> float | None:
    """(simulator - engine) / engine; None where the engine's value is 0 and the simulator's is not."""
    if engine == 0:
        return 0.0 if simulated == 0 else None
    return (simulated - engine) / abs(engine)


def simulate_variants(params: Any, engine: list[tuple[str, int, float, Any]], variants: Any,
                      jobs: int) -> dict[tuple[str, int, float, str], dict[str, float]]:
    """The simulator's run for every (arm, seed, load) of `engine` and every variant of the arm
    (variants(arm): name -> corrections off), each distinct model run once, `jobs` at a time
    (the simulator releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    models = {}
    keys: dict[tuple[str, int, float, str], tuple] = {}
    for arm, seed, load, m in engine:
        for name, off in variants(arm).items():
            p = sim_params(params, arm, off)
            e = p.engine
            keys[(arm, seed, load, name)] = (SIM_POLICY[arm], seed, m["rate"], e.async_scheduling,
                                             e.scheduler_reserve_full_isl, e.kv_free_tail_first)
            models[keys[(arm, seed, load, name)]] = p
    distinct = list(models)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        runs = list(ex.map(lambda k: simulator_run(models[k], k[0], k[1], k[2]), distinct))
    by_key = dict(zip(distinct, runs, strict=True))
    return {k: by_key[v] for k, v in keys.items()}
