#!/usr/bin/env python3
"""Render PNG plots from the output directory of `meridian replay --out-dir DIR`.

Usage: plot_replay.py DIR [--out PLOTDIR]      (PLOTDIR defaults to DIR/plots)

Reads DIR/ab-report.json (the policies that ran), DIR/<policy>/report.json
(per-second series and latency CDFs of each policy, first seed) and, if
present, DIR/load-sweep.json, DIR/goodput.json and DIR/pareto.json. Writes,
one line printed per PNG:

  latency_cdf.png    CDFs of TTFT, TTFV, output ITL and E2E (log x)
  itl_over_time.png  per-second output ITL p99 and max (log y)
  queue_depths.png   queue depths and KV usage over time, one panel per policy
  load_sweep.png     SLO attainment, p95/p99 latencies vs arrival rate
                     (only when load-sweep.json exists)
  goodput.png        SLO attainment vs arrival rate (log x; mean over seeds at
                     the scan's rates) with each policy's goodput marked
                     (only when goodput.json exists)
  pareto.png         think tokens saved vs forced-before-answer, static
                     budgets against Meridian's forcing settings
                     (only when pareto.json exists)
  slo_grid.png       each policy's goodput divided by vllm-best's per SLO set
                     (by vllm-fcfs's when vllm-best did not run), with the
                     paired 95% interval (only when slo-grid.json exists)

Exits with status 2 when DIR has none of those reports.
Needs matplotlib (and numpy, which matplotlib pulls in).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

FIGSIZE = (11.0, 8.0)
DPI = 110

# One color per policy across every figure: meridian strong, baselines muted.
POLICY_COLORS: dict[str, str] = {
    "vllm-fcfs": "#8c8c8c",
    "vllm-fcfs-tuned": "#4d4d4d",
    "vllm-priority": "#9fb7cf",
    "static-budget": "#c9a77c",
    "vllm-best": "#2f2f2f",
    "pascal": "#2ca02c",
    "meridian-no-forcing": "#b39ddb",
    "meridian": "#d62728",
}
FALLBACK_COLORS = ["#7f9f7f", "#a0a0d0", "#d0a0a0", "#a0c0c0"]

CDF_PANELS = [  # (cdf key, title)
    ("ttft_ms", "TTFT (ms)"),
    ("ttfv_ms", "TTFV: first visible token (ms)"),
    ("output_itl_ms", "Output ITL (ms)"),
    ("e2e_ms", "E2E latency (ms)"),
]
QUEUE_SERIES = ["output_queue", "think_queue", "waiting", "swapped"]
SWEEP_PANELS = [  # (metric key, title, log y)
    ("slo_attainment_pct", "SLO attainment (%)", False),
    ("output_itl_p99_ms", "Output ITL p99 (ms)", True),
    ("ttft_p95_ms", "TTFT p95 (ms)", True),
    ("ttfv_p95_ms", "TTFV p95 (ms)", True),
]

Json = dict[str, Any]


def load_json(path: pathlib.Path) -> Json | None:
    """Return the parsed JSON object at `path`, or None if the file is absent."""
    if not path.is_file():
        return None
    with path.open() as f:
        return json.load(f)


def policy_color(policy: str, order: list[str]) -> str:
    """Stable color for `policy`; unknown names get a muted fallback."""
    if policy in POLICY_COLORS:
        return POLICY_COLORS[policy]
    return FALLBACK_COLORS[order.index(policy) % len(FALLBACK_COLORS)]


def line_style(policy: str, order: list[str]) -> dict[str, Any]:
    """Plot kwargs for a policy: meridian drawn thicker and on top."""
    strong = policy == "meridian"
    return {
        "color": policy_color(policy, order),
        "linewidth": 2.2 if strong else 1.3,
        "zorder": 3 if strong else 2,
        "label": policy,
    }


def load_reports(run_dir: pathlib.Path, policies: list[str]) -> dict[str, Json]:
    """Per-policy report.json files; missing ones are reported and skipped."""
    reports: dict[str, Json] = {}
    for policy in policies:
        path = run_dir / policy / "report.json"
        report = load_json(path)
        if report is None:
            print(f"plot_replay: warning: {path} missing, skipping {policy}", file=sys.stderr)
            continue
        reports[policy] = report
    return reports


def save(fig: Figure, out_dir: pathlib.Path, name: str) -> None:
    """Lay out, write and close a figure, printing the written path."""
    fig.tight_layout()
    path = out_dir / name
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    print(path)


def finish_axes(ax: Axes, title: str, xlabel: str, ylabel: str) -> None:
    """Title, labels, grid, and a legend if anything was drawn."""
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)


def plot_latency_cdf(reports: dict[str, Json], order: list[str], out_dir: pathlib.Path) -> None:
    """2x2 CDFs (log x, positive values only) of TTFT, TTOT, output ITL, E2E."""
    fig, axes = plt.subplots(2, 2, figsize=FIGSIZE)
    for ax, (key, title) in zip(axes.flat, CDF_PANELS):
        for policy, report in reports.items():
            points = [(v, f) for v, f in report.get("cdf", {}).get(key, []) if v > 0]
            if not points:
                continue
            xs, ys = zip(*points)
            ax.plot(xs, ys, **line_style(policy, order))
        if ax.get_legend_handles_labels()[0]:
            ax.set_xscale("log")
        ax.set_ylim(0.0, 1.0)
        finish_axes(ax, title, "ms", "cumulative fraction")
    save(fig, out_dir, "latency_cdf.png")


def plot_itl_over_time(reports: dict[str, Json], order: list[str], out_dir: pathlib.Path) -> None:
    """Per-second output ITL p99 and max vs simulated time (log y, zeros skipped)."""
    fig, axes = plt.subplots(2, 1, figsize=FIGSIZE, sharex=True)
    panels = [("output_itl_p99_ms", "Output ITL p99 per second (ms)"),
              ("output_itl_max_ms", "Output ITL max per second (ms)")]
    for ax, (key, title) in zip(axes, panels):
        for policy, report in reports.items():
            points = [(p["t_s"], p[key]) for p in report.get("series", []) if p.get(key, 0) > 0]
            if not points:
                continue
            xs, ys = zip(*points)
            ax.plot(xs, ys, **line_style(policy, order))
        if ax.get_legend_handles_labels()[0]:
            ax.set_yscale("log")
        finish_axes(ax, title, "", "ms")
    axes[-1].set_xlabel("simulated time (s)")
    save(fig, out_dir, "itl_over_time.png")


def plot_queue_depths(reports: dict[str, Json], order: list[str], out_dir: pathlib.Path) -> None:
    """One panel per policy: queue depths vs time, KV used fraction on a twin axis."""
    n = max(len(reports), 1)
    fig, axes = plt.subplots(n, 1, figsize=FIGSIZE, sharex=True, squeeze=False)
    for ax, (policy, report) in zip(axes[:, 0], reports.items()):
        series = report.get("series", [])
        ts = [p["t_s"] for p in series]
        for key in QUEUE_SERIES:
            ax.plot(ts, [p.get(key, 0) for p in series], linewidth=1.2, label=key)
        kv_ax = ax.twinx()
        kv_ax.plot(ts, [p.get("kv_used_fraction", 0.0) for p in series],
                   color="black", linestyle="--", linewidth=1.0, label="kv_used_fraction")
        kv_ax.set_ylim(0.0, 1.0)
        kv_ax.set_ylabel("KV used", fontsize=8)
        ax.set_title(policy, color=policy_color(policy, order), fontweight="bold", fontsize=10)
        ax.set_ylabel("requests")
        ax.grid(True, alpha=0.3)
        handles, labels = ax.get_legend_handles_labels()
        kv_handles, kv_labels = kv_ax.get_legend_handles_labels()
        ax.legend(handles + kv_handles, labels + kv_labels, fontsize=7, loc="upper left", ncol=5)
    axes[-1, 0].set_xlabel("simulated time (s)")
    save(fig, out_dir, "queue_depths.png")


def plot_load_sweep(sweep: Json, order: list[str], out_dir: pathlib.Path) -> None:
    """2x2 sweep metrics vs arrival rate, one marked line per policy."""
    fig, axes = plt.subplots(2, 2, figsize=FIGSIZE)
    runs: dict[str, list[Json]] = sweep.get("runs", {})
    for ax, (key, title, log_y) in zip(axes.flat, SWEEP_PANELS):
        for policy, points in runs.items():
            pts = [(p["arrival_rate"], p["metrics"][key]) for p in points
                   if key in p.get("metrics", {}) and (not log_y or p["metrics"][key] > 0)]
            if not pts:
                continue
            xs, ys = zip(*sorted(pts))
            ax.plot(xs, ys, marker="o", markersize=4, **line_style(policy, order))
        if log_y and ax.get_legend_handles_labels()[0]:
            ax.set_yscale("log")
        finish_axes(ax, title, "arrival rate (new conversations/s)", title.split(" (")[-1].rstrip(")"))
    save(fig, out_dir, "load_sweep.png")


def plot_goodput(goodput: Json, order: list[str], out_dir: pathlib.Path) -> None:
    """The worst class's attainment vs rate on the grid scan (a cross where the run does not meet
    the ruler), the goodput marks and, dashed, each policy's physical bound."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    target = float(goodput.get("attainment_target_pct", 90))
    for policy, entry in goodput.get("policies", {}).items():
        # Every run the search made: grid-scan points line up across seeds; seeded searches' do not,
        # so each rate is the mean of whatever ran there.
        by_rate: dict[float, list[tuple[float, bool]]] = {}
        for p in entry.get("points", []):
            if p.get("rate", 0) > 0:
                worst = min(float(p.get("chat_pct", p["attainment_pct"])),
                            float(p.get("reasoning_pct", p["attainment_pct"])))
                by_rate.setdefault(round(float(p["rate"]), 9), []).append((worst, bool(p.get("meets", True))))
        if not by_rate:
            continue
        xs = sorted(by_rate)
        ys = [sum(v for v, _ in by_rate[x]) / len(by_rate[x]) for x in xs]
        style = line_style(policy, order)
        low, high = entry.get("ci95", [entry["goodput_rps"]] * 2)
        style["label"] = f"{policy}: goodput {entry['goodput_rps']:.2f} [{low:.2f}, {high:.2f}]"
        ax.plot(xs, ys, marker="o", markersize=3, **style)
        fails = [(x, y) for x, y in zip(xs, ys) if not all(m for _, m in by_rate[x])]
        if fails:
            ax.plot(*zip(*fails), linestyle="none", marker="x", markersize=7, color=style["color"])
        ax.axvline(entry["goodput_rps"], color=style["color"], linestyle=":", linewidth=1.0)
        bound = entry.get("upper_bound_rps", {}).get("mean") if isinstance(entry.get("upper_bound_rps"), dict) else None
        if bound:
            ax.axvline(bound, color=style["color"], linestyle="--", linewidth=0.6)
    ax.axhline(target, color="black", linestyle="--", linewidth=1.0)
    ax.set_ylim(0, 101)
    if ax.get_legend_handles_labels()[0]:
        ax.set_xscale("log")  # rates span a factor of ~100 across policies
    slo = goodput.get("slo", {})
    finish_axes(ax, f"Worst class's SLO attainment vs load (TTFT ≤ {slo.get('ttft_ms')} ms, output TPOT ≤ "
                f"{slo.get('output_tpot_ms')} ms, think TPOT ≤ {slo.get('think_tpot_ms')} ms; "
                f"target {target:g}%; ×: not sustainable or below; dashed: physical bound)",
                "arrival rate (new conversations/s)", "requests of the worst class meeting the SLO (%)")
    save(fig, out_dir, "goodput.png")


def plot_slo_grid(grid: Json, out_dir: pathlib.Path) -> None:
    """Grouped bars: per SLO set, each policy's goodput over the reference policy's (paired per seed)."""
    sets = grid.get("sets", [])
    if not sets:
        return
    policies = list(sets[0].get("goodput_rps", {}))
    reference = "vllm-best" if "vllm-best" in policies else policies[0]
    shown = [p for p in policies if p != reference]
    fig, ax = plt.subplots(figsize=(max(FIGSIZE[0], 1.1 * len(sets)), FIGSIZE[1]))
    width = 0.8 / max(1, len(shown))
    for k, policy in enumerate(shown):
        means, low_err, high_err = [], [], []
        for s in sets:
            per = s["goodput_rps"].get(policy, {}).get("per_seed", [])
            ref = s["goodput_rps"].get(reference, {}).get("per_seed", [])
            ratios = [a / b for a, b in zip(per, ref) if a is not None and b]
            mean = sum(ratios) / len(ratios) if ratios else 0.0
            stat = s.get("ratio_to_vllm_best", {}).get(policy) if reference == "vllm-best" else None
            low, high = stat["ci95"] if stat and None not in stat["ci95"] else (mean, mean)
            means.append(mean)
            low_err.append(max(0.0, mean - low))
            high_err.append(max(0.0, high - mean))
        xs = [i + (k - (len(shown) - 1) / 2) * width for i in range(len(sets))]
        ax.bar(xs, means, width=width, yerr=[low_err, high_err], capsize=2, label=policy,
               color=policy_color(policy, policies))
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1.0)
    ax.set_xticks(range(len(sets)))
    ax.set_xticklabels([s["label"].replace(" / ", "\n") for s in sets], fontsize=7)
    finish_axes(ax, f"Goodput ÷ {reference} per SLO set ({grid.get('context', {}).get('workload', '')})",
                "SLO set", f"goodput ÷ {reference}")
    save(fig, out_dir, "slo_grid.png")


def plot_pareto(pareto: Json, order: list[str], out_dir: pathlib.Path) -> None:
    """Think tokens saved (x) against forced-before-answer (y): static curve and Meridian's points."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    static = [p for p in pareto.get("points", []) if p["policy"] == "static-budget"]
    others = [p for p in pareto.get("points", []) if p["policy"] != "static-budget"]

    def xy(p: Json) -> tuple[float, float]:
        return p["think_tokens_saved_pct"]["mean"], p["forced_before_answer_pct"]["mean"]

    if static:
        pts = sorted(xy(p) for p in static)
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="s", markersize=4,
                **{**line_style("static-budget", order), "label": "static thinking_token_budget"})
        for p in static:
            x, y = xy(p)
            ax.annotate(str(p.get("thinking_token_budget", "")), (x, y), fontsize=7,
                        textcoords="offset points", xytext=(4, -8))
    for p in others:
        x, y = xy(p)
        style = line_style(p["policy"], order)
        ax.scatter([x], [y], color=style["color"], s=40, zorder=4)
        ax.errorbar([x], [y], xerr=[[x - p["think_tokens_saved_pct"]["ci95"][0]],
                                    [p["think_tokens_saved_pct"]["ci95"][1] - x]],
                    yerr=[[y - p["forced_before_answer_pct"]["ci95"][0]],
                          [p["forced_before_answer_pct"]["ci95"][1] - y]],
                    color=style["color"], linewidth=1.0, zorder=4)
        ax.annotate(f"{p['policy']}: {p['setting']}", (x, y), fontsize=7, textcoords="offset points",
                    xytext=(5, 4))
    ax.set_yscale("symlog", linthresh=1.0)  # the interesting points sit at 0-5 %
    finish_axes(ax, "Forcing: work saved vs answers cut short (forced-before-answer is a signal-model proxy)",
                "think tokens saved vs natural length (%)", "forced before the answer (%, symlog)")
    save(fig, out_dir, "pareto.png")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Plot the output of `meridian replay --out-dir DIR`.")
    parser.add_argument("dir", type=pathlib.Path, help="replay output directory")
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="where to write PNGs (default: DIR/plots)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run_dir: pathlib.Path = args.dir
    ab_report = load_json(run_dir / "ab-report.json")
    sweep = load_json(run_dir / "load-sweep.json")
    goodput = load_json(run_dir / "goodput.json")
    pareto = load_json(run_dir / "pareto.json")
    grid = load_json(run_dir / "slo-grid.json")
    if ab_report is None and sweep is None and goodput is None and pareto is None and grid is None:
        print(f"plot_replay: no ab-report.json, load-sweep.json, goodput.json, pareto.json or slo-grid.json in "
              f"{run_dir}", file=sys.stderr)
        return 2
    out_dir: pathlib.Path = args.out if args.out is not None else run_dir / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)

    order = list((ab_report or {}).get("runs", {}))
    order += [p for p in (sweep or {}).get("runs", {}) if p not in order]
    order += [p for p in (goodput or {}).get("policies", {}) if p not in order]

    if ab_report is not None:
        reports = load_reports(run_dir, list(ab_report.get("runs", {})))
        if reports:
            plot_latency_cdf(reports, order, out_dir)
            plot_itl_over_time(reports, order, out_dir)
            plot_queue_depths(reports, order, out_dir)
        else:
            print(f"plot_replay: warning: no <policy>/report.json in {run_dir}", file=sys.stderr)
    if sweep is not None:
        plot_load_sweep(sweep, order, out_dir)
    if goodput is not None:
        plot_goodput(goodput, order, out_dir)
    if pareto is not None:
        plot_pareto(pareto, order, out_dir)
    if grid is not None:
        plot_slo_grid(grid, out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
