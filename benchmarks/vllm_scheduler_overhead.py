#!/usr/bin/env python3
"""Per-step cost of meridian.vllm.Scheduler over vLLM's stock AsyncScheduler
(SPEC §5: <= 5 %), on the same request sets, in one run, with the real vLLM.

For each running-set size N (default 64, 256, 1024) both schedulers get the
same N requests (64-token prompts; a quarter answer, the rest think; nobody
finishes), are prefilled and warmed up, then each step is timed: schedule()
plus update_from_output() with one sampled token per scheduled request (the
model itself is not run: this is the scheduler's own CPU time). Requests ask
for no think throttling (extra_args meridian.throttle = false), so both
schedulers schedule the same batches; the throttled count is reported. The two
schedulers alternate in blocks of steps so machine noise hits both alike.
Reports the median per-step time of each and the overhead ratio, and, as a
second reading less exposed to machine noise, the time spent inside
Meridian's own hooks (planning, bookkeeping, token feed) per step, timed in
place, as a share of the stock step.

    .venv/bin/python benchmarks/vllm_scheduler_overhead.py [--sizes 64,256,1024] [--steps 200] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "python"))
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import vllm_rig as rig  # noqa: E402


def make(cls, n: int):
    sched = rig.build(cls, max_num_seqs=n, max_num_batched_tokens=max(8192, 2 * n), num_blocks=n * 16 + 64)
    for i in range(n):
        # throttle=False: Meridian plans and orders every step but holds no
        # think decode back, so both schedulers run the same batches and the
        # difference is the adapter's own cost.
        sched.add_request(rig.request(f"q{i}", rig.prompt(64, i), extra_args={"meridian": {"throttle": False}}))
    first = {f"q{i}": [rig.THINK] + ([rig.END_THINK] if i % 4 == 0 else []) for i in range(n)}
    choose = rig.script(first)
    while len(sched.running) < n or any(r.num_output_tokens < 3 for r in sched.running):
        rig.step(sched, choose)
    for _ in range(20):
        rig.step(sched, choose)
    return sched, choose


class HookTimer:
    """Times the adapter's per-step hooks in place (one sum per step)."""

    HOOKS = ("before_schedule", "admission_limit", "after_schedule", "before_update", "after_update", "sync_metrics")

    def __init__(self) -> None:
        from meridian.vllm.scheduler import _Adapter

        self.cls = _Adapter
        self.saved = {name: getattr(_Adapter, name) for name in self.HOOKS}
        self.current = 0.0
        self.per_step: list[float] = []

    def __enter__(self) -> HookTimer:
        for name, fn in self.saved.items():
            def timed(*a, __fn=fn, **k):
                t0 = time.perf_counter_ns()
                try:
                    return __fn(*a, **k)
                finally:
                    self.current += (time.perf_counter_ns() - t0) / 1e3
            setattr(self.cls, name, timed)
        return self

    def step_done(self) -> None:
        self.per_step.append(self.current)
        self.current = 0.0

    def __exit__(self, *exc) -> None:
        for name, fn in self.saved.items():
            setattr(self.cls, name, fn)


def time_steps(sched, choose, steps: int, hooks: HookTimer | None = None) -> list[float]:
    out = []
    for _ in range(steps):
        t0 = time.perf_counter_ns()
        rig.step(sched, choose)
        out.append((time.perf_counter_ns() - t0) / 1e3)
        if hooks is not None:
            hooks.step_done()
    return out


def measure(n: int, steps: int, blocks: int) -> dict:
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    from meridian.vllm import Scheduler

    stock, stock_choose = make(AsyncScheduler, n)
    mer, mer_choose = make(Scheduler, n)
    stock_us: list[float] = []
    mer_us: list[float] = []
    per_block = max(1, steps // blocks)
    for _ in range(blocks):
        stock_us += time_steps(stock, stock_choose, per_block)
        mer_us += time_steps(mer, mer_choose, per_block)
    with HookTimer() as hooks:
        time_steps(mer, mer_choose, steps, hooks)
    s_med, m_med = statistics.median(stock_us), statistics.median(mer_us)
    hook_med = statistics.median(hooks.per_step)
    stats = mer.meridian_stats()
    return {
        "running": n,
        "steps": len(stock_us),
        "stock_median_us": round(s_med, 1),
        "meridian_median_us": round(m_med, 1),
        "overhead_pct": round(100 * (m_med / s_med - 1), 2),
        "meridian_hooks_median_us": round(hook_med, 1),
        "hooks_pct_of_stock_step": round(100 * hook_med / s_med, 2),
        "scheduled_per_step_stock": len(stock.running),
        "scheduled_per_step_meridian": len(mer.running),
        "meridian_fallbacks": stats["fallbacks"],
        "meridian_throttled_decodes": stats["throttled_decodes"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="64,256,1024")
    parser.add_argument("--steps", type=int, default=200, help="timed steps per scheduler and size")
    parser.add_argument("--blocks", type=int, default=10, help="alternation blocks")
    parser.add_argument("--out", type=pathlib.Path)
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",") if x]
    if not sizes or min(sizes) < 1 or args.steps < 1 or args.blocks < 1:
        parser.error("--sizes must list positive integers; --steps and --blocks must be >= 1")
    logging.getLogger("vllm").setLevel(logging.WARNING)
    rows = [measure(n, args.steps, args.blocks) for n in sizes]
    print(f"{'running':>8} {'stock us/step':>14} {'meridian us/step':>17} {'overhead':>9} "
          f"{'hooks us/step':>14} {'hooks/stock':>12}  target <= 5 %")
    for r in rows:
        print(f"{r['running']:>8} {r['stock_median_us']:>14} {r['meridian_median_us']:>17} "
              f"{r['overhead_pct']:>8}% {r['meridian_hooks_median_us']:>14} {r['hooks_pct_of_stock_step']:>11}%")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"rows": rows, "command": " ".join(sys.argv)}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
