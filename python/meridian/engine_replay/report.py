"""The engine replay's reports, in the schema of `meridian replay`'s
(ab-report.json: runs / intervals / deltas / targets; goodput.json: policies.<arm>.goodput_rps),
plus fidelity.json: the simulator's relative error against the real scheduler."""
from __future__ import annotations

import json
import math
import pathlib
from typing import Any

from meridian._meridian import sim

from . import study

BASELINE = "vllm-async"  # vLLM's GPU default: what every delta and ratio is against
HEADLINE = ("slo_attainment_pct", "ttft_p50_ms", "ttft_p95_ms", "ttfv_p95_ms", "output_tpot_p50_ms",
            "output_itl_p99_ms", "think_tpot_p50_ms", "e2e_p50_ms", "throughput_tokens_per_s", "preemptions",
            "prefix_hit_rate", "steps", "tokens_per_step", "gpu_busy_pct")


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def _stat(values: list[float]) -> dict[str, Any]:
    mean, low, high = sim.seed_stat(list(values))
    return {"mean": _finite(mean), "ci95": [_finite(low), _finite(high)], "per_seed": [_finite(v) for v in values]}


def _better() -> dict[str, str]:
    out = {name: better for name, better, _ in sim.metric_catalog()}
    out["tokens_per_step"] = "neither"
    return out


def ab_report(runs: dict[str, list[dict[str, float]]], context: dict[str, Any], rate: float) -> tuple[dict, str]:
    better = _better()
    metrics = [name for name, _, _ in sim.metric_catalog()] + ["tokens_per_step", "schedule_wall_s", "driver_wall_s"]
    out: dict[str, Any] = {"schema_version": 2, "context": dict(context, rate=rate), "runs": {}, "intervals": {},
                           "deltas": {}, "targets": []}
    for arm, per_seed in runs.items():
        out["runs"][arm] = {m: sum(r[m] for r in per_seed) / len(per_seed) for m in metrics}
        out["intervals"][arm] = {m: _stat([r[m] for r in per_seed]) for m in metrics}
    if BASELINE in runs:
        for arm, per_seed in runs.items():
            if arm == BASELINE:
                continue
            entry = {}
            for m in metrics:
                if m not in better:
                    continue
                d = [sim.delta_pct(c[m], b[m]) for c, b in zip(per_seed, runs[BASELINE], strict=True)]
                mean, low, high = sim.seed_stat(d)
                entry[m] = {"delta_pct": _finite(mean), "ci95": [_finite(low), _finite(high)],
                            "flag": sim.delta_flag(mean, better[m]),
                            "crosses_zero": len(d) > 1 and low <= 0 <= high}
            out["deltas"][arm] = entry
    sched = sum(r["schedule_wall_s"] for rs in runs.values() for r in rs)
    driver = sum(r["driver_wall_s"] for rs in runs.values() for r in rs)
    out["targets"].append({"name": "driver_vs_schedule", "goal": "<= 30% of vLLM's schedule() + update_from_output()",
                           "value": _finite(100.0 * driver / sched) if sched > 0 else None,
                           "met": sched > 0 and driver <= 0.3 * sched, "available": sched > 0, "percent": True})
    arms = list(runs)
    lines = [f"# Engine-in-the-loop replay: vLLM's scheduler on the simulator's clock",
             "", f"{context['workload']}, {rate:g} conversations/s, {context['duration_s']:g} s of arrivals, "
             f"seeds {', '.join(map(str, context['seeds']))}; vLLM {context['vllm_version']}. "
             f"Deltas against {BASELINE} (vLLM's GPU default). {context['measurement']}.", "",
             "| metric | " + " | ".join(arms) + " |", "|---|" + "---:|" * len(arms)]
    for m in HEADLINE:
        row = [f"{out['runs'][a][m]:.4g}" for a in arms]
        for i, a in enumerate(arms):
            d = out["deltas"].get(a, {}).get(m)
            if d and d["delta_pct"] is not None and d["flag"]:
                row[i] += f" ({d['delta_pct']:+.1f}% {d['flag']})"
        lines.append(f"| {m} | " + " | ".join(row) + " |")
    t = out["targets"][0]
    lines += ["", f"Driver cost: {t['value']:.1f}% of vLLM's own scheduling time (target <= 30%)."
              if t["value"] is not None else "Driver cost: not measured."]
    return out, "\n".join(lines) + "\n"


def goodput_report(searches: list[dict[str, Any]], sim_goodput: dict[str, list[float]], base: float,
                   seeds: list[int], context: dict[str, Any]) -> tuple[dict, str]:
    arms: dict[str, list[dict[str, Any]]] = {}
    for s in searches:
        arms.setdefault(s["arm"], []).append(s)
    out: dict[str, Any] = {
        "schema_version": 1, "context": context, "slo": context["slo"],
        "attainment_target_pct": context["slo"]["attainment_pct"],
        "rate_unit": "new conversations per second (the --arrival-rate unit)", "seeds": seeds,
        "search": {"base_rate": base, "base": "the simulator's vllm-fcfs goodput, mean over the seeds",
                   "grid_factors": list(study.GRID), "rel_tolerance": study.TOLERANCE,
                   "runs": sum(s["runs"] for s in searches)},
        "policies": {}, "simulator": {}, "ratios": {}}
    for arm, per in arms.items():
        per.sort(key=lambda s: seeds.index(s["seed"]))
        values = [s["goodput_rps"] for s in per]
        stat = _stat(values)
        out["policies"][arm] = {"goodput_rps": stat["mean"], "ci95": stat["ci95"], "per_seed": stat["per_seed"],
                                "at_least": [s["at_least"] for s in per],
                                "points": [dict(p, seed=s["seed"]) for s in per for p in s["points"]],
                                "schedule_wall_s": sum(s["schedule_wall_s"] for s in per),
                                "driver_wall_s": sum(s["driver_wall_s"] for s in per)}
    for policy, values in sim_goodput.items():
        stat = _stat(values)
        out["simulator"][policy] = {"goodput_rps": stat["mean"], "ci95": stat["ci95"], "per_seed": values}
    if BASELINE in out["policies"]:
        base_vals = out["policies"][BASELINE]["per_seed"]
        for arm, entry in out["policies"].items():
            if arm != BASELINE:
                out["ratios"][arm] = {BASELINE: _stat([c / b for c, b in zip(entry["per_seed"], base_vals, strict=True)
                                                       if b])}
    sim_ratio = _stat([m / f for m, f in zip(sim_goodput["meridian-no-forcing"], sim_goodput["vllm-fcfs"],
                                             strict=True) if f])
    out["simulator"]["ratio_meridian_no_forcing_to_vllm_fcfs"] = sim_ratio
    lines = ["# Goodput: the real vLLM scheduler on the simulator's clock", "",
             f"Highest rate (new conversations/s) with >= {out['attainment_target_pct']:g}% of requests within "
             f"the SLO (TTFT {context['slo']['ttft_ms']:g} ms, answer TPOT {context['slo']['output_tpot_ms']:g} ms, "
             f"think TPOT {context['slo']['think_tpot_ms']:g} ms); {context['workload']}, seeds "
             f"{', '.join(map(str, seeds))}.", "", "| measured by | policy / arm | goodput | per seed | ratio to "
             f"{BASELINE} |", "|---|---|---:|---|---:|"]
    for arm, e in out["policies"].items():
        ratio = out["ratios"].get(arm, {}).get(BASELINE)
        r = f"{ratio['mean']:.3f}" if ratio and ratio["mean"] is not None else "—"
        lines.append(f"| engine (vLLM {context['vllm_version']}) | {arm} | {e['goodput_rps']:.3g} | "
                     f"{', '.join(f'{v:.3g}' for v in e['per_seed'])} | {r} |")
    for policy in ("vllm-fcfs", "meridian-no-forcing"):
        e = out["simulator"][policy]
        per_seed = ", ".join(f"{v:.3g}" for v in e["per_seed"])
        ratio_text = "—" if policy == "vllm-fcfs" else "{:.3f} (to vllm-fcfs)".format(sim_ratio["mean"])
        lines.append(f"| simulator | {policy} | {e['goodput_rps']:.3g} | {per_seed} | {ratio_text} |")
    return out, "\n".join(lines) + "\n"


def fidelity_report(tasks: list[tuple[Any, float]], engine: list[dict[str, float]],
                    simulated: dict[tuple[str, int, float], dict[str, float]], sim_goodput: dict[str, list[float]],
                    seeds: list[int], context: dict[str, Any]) -> tuple[dict, str]:
    rows: dict[tuple[str, float], dict[str, list[float | None]]] = {}
    for (job, rate), m in zip(tasks, engine, strict=True):
        fcfs = sim_goodput["vllm-fcfs"][seeds.index(job.seed)]
        load = round(rate / fcfs, 3) if fcfs else 0.0
        s = simulated[(study.SIM_POLICY[job.arm], job.seed, rate)]
        entry = rows.setdefault((job.arm, load), {})
        for label, key in study.FIDELITY_METRICS:
            entry.setdefault(label, []).append(study.relative_error(s[key], m[key]))
        entry.setdefault("SLO attainment (points)", []).append(s["slo_attainment_pct"] - m["slo_attainment_pct"])
    out: dict[str, Any] = {"schema_version": 1, "context": context,
                           "definition": "(simulator - engine) / engine per seed, mean over seeds; the engine is the "
                                         "real vLLM scheduler on the same clock and trace",
                           "pairs": {arm: study.SIM_POLICY[arm] for arm, _ in rows}, "loads": {}}
    worst: dict[str, dict[str, float]] = {}
    for (arm, load), entry in sorted(rows.items()):
        cell = {}
        for label, values in entry.items():
            finite = [v for v in values if v is not None]
            cell[label] = {"mean": sum(finite) / len(finite) if finite else None, "per_seed": values}
            if finite and label != "SLO attainment (points)":
                w = worst.setdefault(arm, {})
                w[label] = max(w.get(label, 0.0), max(abs(v) for v in finite))
        out["loads"].setdefault(f"{load:g}x", {})[arm] = cell
    out["worst_error"] = worst
    out["within_10pct"] = {arm: {k: v <= 0.10 for k, v in w.items()} for arm, w in worst.items()}
    lines = ["# Fidelity: the simulator against vLLM's own scheduler", "",
             "Relative error (simulator − engine) / engine on identical traces; loads are multiples of the "
             "simulator's vllm-fcfs goodput. vllm-async and vllm-sync are compared with the simulator's vllm-fcfs, "
             "meridian-sync with its meridian-no-forcing.", ""]
    labels = [label for label, _ in study.FIDELITY_METRICS] + ["SLO attainment (points)"]
    for load, arms in out["loads"].items():
        lines += [f"## {load} load", "", "| quantity | " + " | ".join(arms) + " |", "|---|" + "---:|" * len(arms)]
        for label in labels:
            cells = []
            for arm in arms:
                v = arms[arm][label]["mean"]
                cells.append("n/a" if v is None else (f"{v:+.1f}" if label.startswith("SLO") else f"{100 * v:+.1f}%"))
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    pairs = list(worst)
    lines += ["## Worst error over loads and seeds", "", "| quantity | " + " | ".join(
        f"{arm} vs {study.SIM_POLICY[arm]}" for arm in pairs) + " |", "|---|" + "---:|" * len(pairs)]
    for label, _ in study.FIDELITY_METRICS:
        cells = []
        for arm in pairs:
            v = worst[arm].get(label)
            cells.append("n/a" if v is None else f"{100 * v:.1f}%{'' if v <= 0.10 else ' (> 10 %)'}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return out, "\n".join(lines) + "\n"


def write_json_md(stem: pathlib.Path, obj: dict, md: str) -> None:
    stem.with_suffix(".json").write_text(json.dumps(obj, indent=2, allow_nan=False) + "\n")
    stem.with_suffix(".md").write_text(md)
