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



def _ttfv_text(slo: dict[str, Any]) -> str:
    """The TTFV bound for a report sentence ("" when none is set)."""
    ttfv = slo.get("ttfv_ms", 0)
    return f"TTFV {ttfv:g} ms for reasoning requests, " if ttfv else ""

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


WINDOW_AGREEMENT_PCT = 5.0  # the window check: goodput at 2W within this of goodput at W


def _arm_goodput(per: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm's goodput over its seeds' searches, with its physical bound and the run at its goodput."""
    values = [s["goodput_rps"] for s in per]
    stat = _stat(values)
    bounds = [s.get("upper_bound_rps", 0.0) for s in per]
    shares = [g / b if b else 0.0 for g, b in zip(values, bounds, strict=True)]
    return {"goodput_rps": stat["mean"], "ci95": stat["ci95"], "per_seed": stat["per_seed"],
            "at_least": [s["at_least"] for s in per],
            "upper_bound_rps": _stat(bounds), "fraction_of_bound": _stat(shares),
            "above_bound": any(b and g > b for g, b in zip(values, bounds, strict=True)),
            "at_goodput": [s.get("at_goodput") for s in per]}


def goodput_report(searches: list[dict[str, Any]], sim_goodput: dict[str, list[float]], seeds: list[int],
                   context: dict[str, Any], doubled: dict[str, Any] | None = None) -> tuple[dict, str]:
    """goodput.json's object and goodput.md. `doubled`: the same searches over twice the window
    ({"duration_s", "simulator", "searches"}), reported as the window check."""
    arms: dict[str, list[dict[str, Any]]] = {}
    for s in searches:
        arms.setdefault(s["arm"], []).append(s)
    out: dict[str, Any] = {
        "schema_version": 2, "context": context, "slo": context["slo"],
        "attainment_target_pct": context["slo"]["attainment_pct"],
        "ruler": context.get("ruler", "sustainable"), "window_s": context["duration_s"],
        "rate_unit": "new conversations per second (the --arrival-rate unit)", "seeds": seeds,
        "search": {"base": "per seed, the simulator's goodput for the arm's model (simulator policy and stepping)",
                   "scan_up_factors": list(sim.SEEDED_SCAN_UP), "scan_down_factors": list(sim.SEEDED_SCAN_DOWN),
                   "rel_tolerance": study.TOLERANCE,
                   "runs": sum(s["runs"] for s in searches)},
        "policies": {}, "simulator": {}, "ratios": {}}
    for arm, per in arms.items():
        per.sort(key=lambda s: seeds.index(s["seed"]))
        out["policies"][arm] = {**_arm_goodput(per),
                                "simulator_model": study.sim_goodput_key(arm),
                                "base_rate": [s["base_rate"] for s in per],
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
    best = "vllm-best-async"
    if best in out["policies"] and "meridian-async" in out["policies"]:
        m_vals, b_vals = out["policies"]["meridian-async"]["per_seed"], out["policies"][best]["per_seed"]
        out["ratios"].setdefault("meridian-async", {})[best] = _stat(
            [m / b for m, b in zip(m_vals, b_vals, strict=True) if b])
        sim_m = sim_goodput.get(study.sim_goodput_key("meridian-async"))
        sim_b = sim_goodput.get(study.sim_goodput_key(best))
        if sim_m and sim_b:
            out["simulator"]["ratio_meridian_no_forcing_to_vllm_best_async"] = _stat(
                [m / b for m, b in zip(sim_m, sim_b, strict=True) if b])
    sim_ratios = {}
    for suffix in ("", " (async)"):
        if "vllm-fcfs" + suffix in sim_goodput:
            sim_ratios[suffix] = _stat([m / f for m, f in zip(sim_goodput["meridian-no-forcing" + suffix],
                                                              sim_goodput["vllm-fcfs" + suffix], strict=True) if f])
    out["simulator"]["ratio_meridian_no_forcing_to_vllm_fcfs"] = sim_ratios.get("")
    if " (async)" in sim_ratios:
        out["simulator"]["ratio_meridian_no_forcing_to_vllm_fcfs_async"] = sim_ratios[" (async)"]
    ruler_text = ("sustainable by the ruler (every request completes, each class meets the target after the warm-up, "
                  "late arrivals too, the backlog does not grow: docs/replay.md#the-ruler)"
                  if out["ruler"] == "sustainable" else "the retired pooled-window ruler")
    lines = ["# Goodput: the real vLLM scheduler on the simulator's clock", "",
             f"Highest rate (new conversations/s) {ruler_text}, each class at >= {out['attainment_target_pct']:g}% "
             f"within the SLO (TTFT {context['slo']['ttft_ms']:g} ms, {_ttfv_text(context['slo'])}"
             f"answer TPOT {context['slo']['output_tpot_ms']:g} ms, "
             f"think TPOT {context['slo']['think_tpot_ms']:g} ms); {context['workload']}, "
             f"{context['duration_s']:g} s of arrivals, seeds {', '.join(map(str, seeds))}. Each engine arm beside "
             "the simulator's model of it; the bound is the physical upper bound for the arm's own work.", "",
             f"| engine arm (vLLM {context['vllm_version']}) | goodput | per seed | ratio to {BASELINE} "
             "| simulator's model | its goodput | simulator ÷ engine | physical bound | share of bound |",
             "|---|---:|---|---:|---|---:|---:|---:|---:|"]
    for arm, e in out["policies"].items():
        ratio = out["ratios"].get(arm, {}).get(BASELINE)
        r = f"{ratio['mean']:.3f}" if ratio and ratio["mean"] is not None else "—"
        model = e["simulator_model"]
        sim_e = out["simulator"].get(model)
        sim_cell = f"{sim_e['goodput_rps']:.3g}" if sim_e else "—"
        err = f"{sim_e['goodput_rps'] / e['goodput_rps']:.3f}" if sim_e and e["goodput_rps"] else "—"
        bound = e["upper_bound_rps"]["mean"] or 0.0
        share = e["fraction_of_bound"]["mean"] or 0.0
        lines.append(f"| {arm} | {e['goodput_rps']:.3g} | {', '.join(f'{v:.3g}' for v in e['per_seed'])} | {r} | "
                     f"{model} | {sim_cell} | {err} | {bound:.3g} | {share:.2f}"
                     f"{' **above the bound: a ruler bug**' if e['above_bound'] else ''} |")
    for suffix, st in sim_ratios.items():
        if st["mean"] is not None:
            lines.append(f"\nSimulator: meridian-no-forcing ÷ vllm-fcfs{suffix} = {st['mean']:.3f}.")
    vs_best = out["ratios"].get("meridian-async", {}).get(best)
    if vs_best and vs_best["mean"] is not None:
        sim_best = out["simulator"].get("ratio_meridian_no_forcing_to_vllm_best_async")
        sim_text = f"; simulator: {sim_best['mean']:.3f}" if sim_best and sim_best["mean"] is not None else ""
        lines.append(f"\nmeridian-async ÷ {best} ({context.get('vllm_best_setting', '?')}) = "
                     f"{vs_best['mean']:.3f}{sim_text}.")
    if doubled is not None:
        check = _window_check(out, doubled, seeds)
        out["window_check"] = check
        lines += ["", f"## Window check: {context['duration_s']:g} s against {doubled['duration_s']:g} s of arrivals",
                  "", f"| arm | goodput at {context['duration_s']:g} s | at {doubled['duration_s']:g} s | ratio | "
                  f"within {WINDOW_AGREEMENT_PCT:g}% |", "|---|---:|---:|---:|---|"]
        for arm, c in check["policies"].items():
            lines.append(f"| {arm} | {c['goodput_rps']:.3g} | {c['doubled_goodput_rps']:.3g} | "
                         f"{'inf' if c['ratio'] is None else format(c['ratio'], '.3f')} | {'yes' if c['agree'] else '**no**'} |")
    return out, "\n".join(lines) + "\n"


def _window_check(out: dict[str, Any], doubled: dict[str, Any], seeds: list[int]) -> dict[str, Any]:
    arms: dict[str, list[dict[str, Any]]] = {}
    for s in doubled["searches"]:
        arms.setdefault(s["arm"], []).append(s)
    check: dict[str, Any] = {"window_s": out["window_s"], "doubled_window_s": doubled["duration_s"],
                             "agreement_pct": WINDOW_AGREEMENT_PCT, "policies": {},
                             "doubled_simulator_goodput_rps": doubled["simulator"]}
    for arm, per in arms.items():
        per.sort(key=lambda s: seeds.index(s["seed"]))
        twice = _arm_goodput(per)
        once = out["policies"][arm]["goodput_rps"] or 0.0
        ratio = (twice["goodput_rps"] or 0.0) / once if once else (1.0 if not twice["goodput_rps"] else math.inf)
        check["policies"][arm] = {"goodput_rps": once, "doubled_goodput_rps": twice["goodput_rps"] or 0.0,
                                  "doubled": twice, "ratio": _finite(ratio),
                                  "agree": abs(ratio - 1.0) * 100.0 <= WINDOW_AGREEMENT_PCT + 1e-9}
    check["all_agree"] = all(c["agree"] for c in check["policies"].values())
    return check


VARIANT_CORRECTED = "corrected"
VARIANT_BEFORE = "before (all corrections off)"


def variants(arm: str) -> dict[str, tuple[str, ...]]:
    """The simulator variants fidelity compares `arm` with: the corrected simulator, all corrections
    off (the simulator before this study), and, for vLLM's own arms, each correction off alone."""
    out = {VARIANT_CORRECTED: (), VARIANT_BEFORE: study.CORRECTIONS}
    if arm.startswith("vllm"):
        for c in study.CORRECTIONS:
            if c != "async_scheduling" or study.sim_async(arm):
                out[f"without {c}"] = (c,)
    return out


def _errors(sim_m: dict[str, float], eng_m: dict[str, float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {label: study.relative_error(sim_m[key], eng_m[key])
                                    for label, key in study.FIDELITY_METRICS}
    out["SLO attainment (points)"] = sim_m["slo_attainment_pct"] - eng_m["slo_attainment_pct"]
    return out


def fidelity_report(engine: list[tuple[str, int, float, dict[str, float]]],
                    simulated: dict[tuple[str, int, float, str], dict[str, float]],
                    goodput: dict[str, Any] | None, seeds: list[int], context: dict[str, Any]) -> tuple[dict, str]:
    """engine: (arm, seed, load, metrics) per run; simulated: (arm, seed, load, variant) -> the simulator's
    metrics on the same trace; goodput: goodput.json's object, when the search ran."""
    labels = [label for label, _ in study.FIDELITY_METRICS]
    cells: dict[tuple[str, float, str], dict[str, list[float | None]]] = {}
    for arm, seed, load, m in engine:
        for variant in variants(arm):
            errs = _errors(simulated[(arm, seed, load, variant)], m)
            cell = cells.setdefault((arm, load, variant), {})
            for label, v in errs.items():
                cell.setdefault(label, []).append(v)
    arms = list(dict.fromkeys(arm for arm, _, _, _ in engine))
    out: dict[str, Any] = {
        "schema_version": 2, "context": context,
        "definition": "(simulator - engine) / engine per seed, mean over seeds; the engine is the real vLLM "
                      "scheduler on the same clock and trace; SLO attainment as a difference in points",
        "pairs": {arm: study.sim_goodput_key(arm) for arm in arms},
        "corrections": {c: "an [engine] switch of the simulator, on by default" for c in study.CORRECTIONS},
        "loads": {}, "worst_error": {}, "within_10pct": {}, "corrections_worst_error": {}}

    def mean(values: list[float | None]) -> float | None:
        finite = [v for v in values if v is not None]
        return sum(finite) / len(finite) if finite else None

    worst: dict[tuple[str, str], dict[str, float]] = {}
    for (arm, load, variant), cell in sorted(cells.items()):
        if variant == VARIANT_CORRECTED:
            out["loads"].setdefault(f"{load:g}x", {})[arm] = {
                label: {"mean": mean(values), "per_seed": values} for label, values in cell.items()}
        w = worst.setdefault((arm, variant), {})
        for label in labels:
            finite = [abs(v) for v in cell[label] if v is not None]
            if finite:
                w[label] = max(w.get(label, 0.0), max(finite))
    if goodput is not None:
        for arm in arms:
            e = goodput["policies"].get(arm)
            model = goodput["simulator"].get(study.sim_goodput_key(arm))
            if e and model:
                errs = [study.relative_error(s, g) for s, g in zip(model["per_seed"], e["per_seed"], strict=True)]
                finite = [abs(v) for v in errs if v is not None]
                if finite:
                    worst[(arm, VARIANT_CORRECTED)]["goodput"] = max(finite)
                    out.setdefault("goodput_error", {})[arm] = {"per_seed": errs, "model": study.sim_goodput_key(arm)}
    for arm in arms:
        out["worst_error"][arm] = worst[(arm, VARIANT_CORRECTED)]
        out["within_10pct"][arm] = {k: v <= 0.10 for k, v in worst[(arm, VARIANT_CORRECTED)].items()}
        out["corrections_worst_error"][arm] = {variant: worst[(arm, variant)] for variant in variants(arm)}
    quantities = labels + (["goodput"] if goodput is not None else [])
    lines = ["# Fidelity: the simulator against vLLM's own scheduler", "",
             "Relative error (simulator − engine) / engine on identical traces; loads are multiples of the "
             "simulator's vllm-fcfs goodput. Each engine arm is compared with the simulator's model of it: "
             + ", ".join(f"{a} with {m}" for a, m in out["pairs"].items()) + ".", ""]
    lines += ["## Worst error over loads and seeds (the corrected simulator)", "",
              "| quantity | " + " | ".join(f"{a} vs {out['pairs'][a]}" for a in arms) + " |",
              "|---|" + "---:|" * len(arms)]
    for label in quantities:
        row = []
        for arm in arms:
            v = out["worst_error"][arm].get(label)
            row.append("n/a" if v is None else f"{100 * v:.1f}%{'' if v <= 0.10 else ' (> 10 %)'}")
        lines.append(f"| {label} | " + " | ".join(row) + " |")
    lines += ["", "## Each correction: worst error before → after", "",
              "Before: the simulator with the correction off (the others on); all: every correction off, the "
              "simulator as it was before the engine replay.", ""]
    for arm in arms:
        vs = [v for v in variants(arm) if v != VARIANT_CORRECTED]
        lines += [f"### {arm} vs {out['pairs'][arm]}", "", "| quantity | " + " | ".join(vs) + " | corrected |",
                  "|---|" + "---:|" * (len(vs) + 1)]
        per = out["corrections_worst_error"][arm]
        for label in labels:
            row = [per[v].get(label) for v in vs + [VARIANT_CORRECTED]]
            lines.append(f"| {label} | " + " | ".join("n/a" if v is None else f"{100 * v:.1f}%" for v in row) + " |")
        lines.append("")
    lines += ["## Per load (the corrected simulator)", ""]
    all_labels = labels + ["SLO attainment (points)"]
    for load, by_arm in out["loads"].items():
        cols = list(by_arm)
        lines += [f"### {load} load", "", "| quantity | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
        for label in all_labels:
            row = []
            for arm in cols:
                v = by_arm[arm][label]["mean"]
                row.append("n/a" if v is None else (f"{v:+.1f}" if label.startswith("SLO") else f"{100 * v:+.1f}%"))
            lines.append(f"| {label} | " + " | ".join(row) + " |")
        lines.append("")
    return out, "\n".join(lines)


def write_json_md(stem: pathlib.Path, obj: dict, md: str) -> None:
    stem.with_suffix(".json").write_text(json.dumps(obj, indent=2, allow_nan=False) + "\n")
    stem.with_suffix(".md").write_text(md)
