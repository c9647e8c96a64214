"""ab-report.json / ab-report.md in the replay's schema (src/sim/study_report.cpp).

Top-level keys as the replay's: ``schema_version``, ``context``, ``runs``
(``runs.<arm>.<metric>``: the mean over seeds), ``intervals`` (mean, Student-t
95 % interval, per-seed values), ``deltas`` (paired per-seed relative changes
of every arm against each baseline arm, flagged WIN/win/FLAT/loss/LOSS) and
``targets``; plus ``not_measured`` (replay metrics a client cannot measure,
with the reason).
"""
from __future__ import annotations

import math
from typing import Any

from .metrics import BETTER, CATALOG_NAMES, HIGHER, LABEL, LOWER, NEITHER, NOT_MEASURED, Slo

WIN_PCT = 20.0
FLAT_PCT = 2.0
_T95 = [0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045,
        2.042]

HEADLINE = [
    "slo_attainment_pct", "slo_attainment_chat_pct", "slo_attainment_reasoning_pct", "ttft_p95_ms",
    "ttfv_chat_p95_ms", "ttfv_reasoning_p95_ms", "ttot_p95_ms", "output_tpot_p95_ms", "output_itl_p99_ms",
    "think_tpot_p99_ms", "preemptions", "think_tokens_saved_pct", "prefix_hit_rate",
]


def _t_quantile(dof: int) -> float:
    if dof <= 0:
        return 0.0
    if dof < len(_T95):
        return _T95[dof]
    return 2.000 if dof < 60 else 1.980 if dof < 120 else 1.960


def seed_stat(values: list[float]) -> dict[str, Any]:
    """Mean, Student-t 95 % interval and per-seed values (``seed_stat`` of src/sim/study.cpp)."""
    n = len(values)
    if n == 0:
        return {"mean": None, "ci95": [None, None], "per_seed": []}
    mean = sum(values) / n
    half = 0.0
    if n > 1 and all(math.isfinite(v) for v in values):
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
        half = _t_quantile(n - 1) * sd / math.sqrt(n)
    return {"mean": _num(mean), "ci95": [_num(mean - half), _num(mean + half)], "per_seed": [_num(v) for v in values]}


def _num(v: float) -> float | None:
    return v if math.isfinite(v) else None


def delta_pct(candidate: float, baseline: float) -> float:
    if baseline == 0:
        return 0.0 if candidate == 0 else math.copysign(math.inf, candidate)
    return 100.0 * (candidate - baseline) / abs(baseline)


def delta_flag(d: float | None, better: str) -> str:
    if better == NEITHER:
        return ""
    if d is None or math.isnan(d) or abs(d) < FLAT_PCT:
        return "FLAT"
    improved = d < 0 if better == LOWER else d > 0
    big = abs(d) >= WIN_PCT
    return ("WIN" if big else "win") if improved else ("LOSS" if big else "loss")


def is_meridian(arm: str) -> bool:
    return arm.startswith("meridian")


def _metric_names(per_arm: dict[str, list[dict[str, float]]]) -> list[str]:
    present = {k for runs in per_arm.values() for run in runs for k in run}
    return [n for n in CATALOG_NAMES if n in present]


def _deltas(per_arm: dict[str, list[dict[str, float]]], names: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for base, base_runs in per_arm.items():
        if is_meridian(base):
            continue
        per: dict[str, Any] = {}
        for cand, cand_runs in per_arm.items():
            if cand == base:
                continue
            m: dict[str, Any] = {}
            for name in names:
                if BETTER[name] == NEITHER:
                    continue
                seeds = min(len(cand_runs), len(base_runs))
                values = [delta_pct(cand_runs[s][name], base_runs[s][name]) for s in range(seeds)
                          if name in cand_runs[s] and name in base_runs[s]]
                entry = seed_stat(values)
                mean = sum(values) / len(values) if values else None
                entry["delta_pct"] = _num(mean) if mean is not None else None
                entry["flag"] = delta_flag(mean, BETTER[name])
                lo, hi = entry["ci95"]
                entry["crosses_zero"] = bool(len(values) > 1 and lo is not None and hi is not None and lo <= 0 <= hi)
                m[name] = entry
            per[cand] = m
        out[base] = per
    return out


def _targets(per_arm: dict[str, list[dict[str, float]]], deltas: dict[str, Any]) -> list[dict[str, Any]]:
    """The replay's SPEC §5 checks, with "vllm" standing for vllm-fcfs; the rest is marked unavailable."""
    def vs(name: str, cand: str, metric: str, goal: str, met) -> dict[str, Any]:
        entry = deltas.get("vllm", {}).get(cand, {}).get(metric)
        if entry is None or entry["delta_pct"] is None:
            return {"name": name, "goal": goal, "value": None, "ci95": None, "met": False, "available": False}
        return {"name": name, "goal": goal, "value": entry["delta_pct"], "ci95": entry["ci95"],
                "met": bool(met(entry["delta_pct"])), "available": True}

    def own(name: str, cand: str, metric: str, goal: str, met) -> dict[str, Any]:
        runs = per_arm.get(cand)
        if not runs or any(metric not in r for r in runs):
            return {"name": name, "goal": goal, "value": None, "ci95": None, "met": False, "available": False}
        s = seed_stat([r[metric] for r in runs])
        return {"name": name, "goal": goal, "value": s["mean"], "ci95": s["ci95"], "met": bool(met(s["mean"])),
                "available": True}

    nof = "meridian-no-forcing"
    return [
        vs("ttot_p95_vs_vllm_fcfs", "meridian", "ttot_p95_ms", "<= -60%", lambda v: v <= -60),
        vs("output_itl_p99_vs_vllm_fcfs", "meridian", "output_itl_p99_ms", "<= -50%", lambda v: v <= -50),
        vs("ttft_p95_no_forcing_vs_vllm_fcfs", nof, "ttft_p95_ms", "<= +5%", lambda v: v <= 5),
        vs("ttfv_p95_no_forcing_vs_vllm_fcfs", nof, "ttfv_p95_ms", "<= +5%", lambda v: v <= 5),
        vs("output_itl_p99_no_forcing_vs_vllm_fcfs", nof, "output_itl_p99_ms", "< 0%", lambda v: v < 0),
        vs("preemptions_no_forcing_vs_vllm_fcfs", nof, "preemptions", "<= vllm", lambda v: v <= 0),
        vs("think_throughput_cost_vs_vllm_fcfs", nof, "think_throughput_tokens_per_s", ">= -5%", lambda v: v >= -5),
        own("think_tokens_saved_by_forcing", "meridian", "think_tokens_saved_pct", ">= 15%", lambda v: v >= 15),
    ]


def ab_report(per_arm: dict[str, list[dict[str, float]]], context: dict[str, Any]) -> dict[str, Any]:
    """The ab-report.json object."""
    names = _metric_names(per_arm)
    runs: dict[str, Any] = {}
    intervals: dict[str, Any] = {}
    for arm, seed_runs in per_arm.items():
        runs[arm] = {}
        intervals[arm] = {}
        for name in names:
            values = [r[name] for r in seed_runs if name in r]
            if not values:
                continue
            stat = seed_stat(values)
            runs[arm][name] = stat["mean"] if stat["mean"] is not None else 0.0
            intervals[arm][name] = stat
    deltas = _deltas(per_arm, names)
    return {
        "schema_version": 2,
        "context": context,
        "runs": runs,
        "intervals": intervals,
        "deltas": deltas,
        "targets": _targets(per_arm, deltas),
        "not_measured": NOT_MEASURED,
    }


def _fmt(v: float | None) -> str:
    if v is None:
        return "n/a"
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}"


def _cell(stat: dict[str, Any] | None) -> str:
    if stat is None:
        return "—"
    if len(stat["per_seed"]) < 2 or stat["ci95"][0] is None:
        return _fmt(stat["mean"])
    return f"{_fmt(stat['mean'])} ±{_fmt(0.5 * (stat['ci95'][1] - stat['ci95'][0]))}"


def _delta_cell(entry: dict[str, Any] | None) -> str:
    if entry is None or not entry["per_seed"]:
        return "n/a"
    if entry["delta_pct"] is None:
        zero = sum(v is None for v in entry["per_seed"])
        return f"n/a: baseline 0 in {zero} of {len(entry['per_seed'])} seeds"
    out = f"{entry['delta_pct']:+.1f}%"
    if len(entry["per_seed"]) > 1 and entry["ci95"][0] is not None:
        out += f" ±{0.5 * (entry['ci95'][1] - entry['ci95'][0]):.1f}"
    out += f" {entry['flag']}"
    if entry["crosses_zero"] and abs(entry["delta_pct"]) >= FLAT_PCT:
        out += " †"
    return out


def _table(report: dict[str, Any], names: list[str]) -> str:
    arms = list(report["intervals"])
    pairs = [(c, b) for c in arms if is_meridian(c) for b in arms if not is_meridian(b)]
    out = "| metric |" + "".join(f" {a} |" for a in arms) + "".join(f" {c} Δ% vs {b} |" for c, b in pairs)
    out += "\n|---|" + "---:|" * (len(arms) + len(pairs)) + "\n"
    for name in names:
        if not any(name in report["intervals"][a] for a in arms):
            continue
        out += f"| {LABEL[name]} |" + "".join(f" {_cell(report['intervals'][a].get(name))} |" for a in arms)
        for c, b in pairs:
            entry = report["deltas"].get(b, {}).get(c, {}).get(name)
            out += " |" if BETTER[name] == NEITHER else f" {_delta_cell(entry)} |"
        out += "\n"
    return out


def ab_markdown(report: dict[str, Any]) -> str:
    c = report["context"]
    seeds = c["seeds"]
    slo = Slo(**c["slo"])
    out = "# Meridian A/B on a real vLLM engine\n\n"
    out += (f"Measured, not simulated: `vllm serve` {c['vllm_version']} ({c['vllm_distribution']}), model "
            f"`{c['model']}`, one server per arm, requests streamed over the OpenAI API and timed by the client.  \n")
    out += (f"Workload `{c['workload']}`: {c['requests']} requests (first seed), {c['arrival_process']} arrivals at "
            f"{c['arrival_rate']} conversations/s, reasoning ratio {c['reasoning_ratio']}, lengths "
            f"{c['lengths']}; {len(seeds)} seed{'s' if len(seeds) != 1 else ''} ({', '.join(map(str, seeds))}).  \n")
    out += (f"SLO: TTFT ≤ {slo.ttft_ms:g} ms, output TPOT ≤ {slo.output_tpot_ms:g} ms, think TPOT ≤ "
            f"{slo.think_tpot_ms:g} ms; target {slo.attainment_pct:g}% of requests.  \n")
    out += "Arms: " + "; ".join(f"`{a}`: `{' '.join(f) or '(stock)'}`" for a, f in c["arm_flags"].items()) + ".  \n"
    out += f"Command: `{c['command']}`\n\n"
    out += ("Cells are the mean over seeds ± the half-width of its 95% interval; Δ% is the paired per-seed "
            "delta. Times are from the moment each request was sent. ITL is per streamed chunk.\n\n")
    out += "## Headline\n\n" + _table(report, HEADLINE)
    out += "\n## SPEC §5 targets (`vllm` standing for vllm-fcfs)\n\n"
    out += "| target | goal | measured | met |\n|---|---|---:|---|\n"
    for t in report["targets"]:
        if t["available"]:
            out += f"| {t['name']} | {t['goal']} | {_fmt(t['value'])} | {'yes' if t['met'] else '**no**'} |\n"
        else:
            out += f"| {t['name']} | {t['goal']} | (arm or metric missing) | - |\n"
    out += (f"\nFlags: WIN/LOSS at >= {WIN_PCT:.0f}% change, win/loss at >= {FLAT_PCT:.0f}%, FLAT below. † the 95% "
            "interval of the paired per-seed delta crosses zero.\n")
    out += "\n## Not measured from the client\n\n"
    out += "".join(f"- `{k}`: {v}\n" for k, v in report["not_measured"].items())
    out += "\n## All metrics\n\n" + _table(report, CATALOG_NAMES)
    return out


__all__ = ["ab_report", "ab_markdown", "seed_stat", "delta_pct", "delta_flag", "HIGHER", "LOWER"]
