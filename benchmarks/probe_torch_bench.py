#!/usr/bin/env python3
"""Meridian's entropy probe through its Python API against PyTorch eager
entropy and a same-size copy, on one [rows, vocab] logits tensor.

Three variants, timed in one process on the same tensor:
  torch  -(softmax(x) * log_softmax(x)).sum(-1)     PyTorch eager
  probe  meridian.EntropyProbe().row_stats(x)        every statistic of each row,
                                                     results back on the host
  copy   y.copy_(x)                                  device-to-device (or host) copy
On CUDA the variants are timed with CUDA events on the current stream; on the
CPU with time.perf_counter. Medians over --min-time seconds (at least --reps
runs) per variant. Bandwidths count the logits bytes read; the copy counts
read + write (2x), as `meridian bench-probe --device cuda` does.

    python benchmarks/probe_torch_bench.py --device cuda              # [256, 151936] bf16
    python benchmarks/probe_torch_bench.py --device cpu --rows 64     # the CPU kernel vs torch on the CPU

Prints a JSON report; docs/benchmarks.md records the results.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any


def time_cpu(fn: Callable[[], Any], min_time: float, reps: int) -> float:
    """Median seconds per call of fn on the host."""
    fn()  # warm-up
    samples: list[float] = []
    deadline = time.perf_counter() + min_time
    while len(samples) < reps or time.perf_counter() < deadline:
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def time_cuda(torch: Any, fn: Callable[[], Any], min_time: float, reps: int) -> float:
    """Median seconds per call of fn between CUDA events on the current stream."""
    fn()  # warm-up (and the probe's workspace allocation)
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples: list[float] = []
    deadline = time.perf_counter() + min_time
    while len(samples) < reps or time.perf_counter() < deadline:
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) / 1e3)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="bf16")
    ap.add_argument("--reps", type=int, default=5, help="at least this many timed runs per variant")
    ap.add_argument("--min-time", type=float, default=2.0, help="seconds per variant")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch  # a benchmark dependency, not a dependency of the package

    import meridian

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device")
    if args.device == "cuda" and not meridian.EntropyProbe.cuda_available():
        raise SystemExit("--device cuda: this meridian build has no usable CUDA kernel "
                         "(pip install . on a machine with nvcc builds it)")
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    gen = torch.Generator().manual_seed(args.seed)
    x = (torch.randn(args.rows, args.vocab, generator=gen) * 3).to(dtype).to(args.device)
    y = torch.empty_like(x)
    probe = meridian.EntropyProbe(think_end_token_ids=[args.vocab - 1], backend=args.device)

    def torch_eager() -> Any:
        return -(torch.softmax(x, -1) * torch.log_softmax(x, -1)).sum(-1)

    def meridian_probe() -> Any:
        return probe.row_stats(x)

    def copy() -> Any:
        return y.copy_(x)

    if args.device == "cuda":
        timings = {name: time_cuda(torch, fn, args.min_time, args.reps)
                   for name, fn in (("torch", torch_eager), ("probe", meridian_probe), ("copy", copy))}
    else:
        timings = {name: time_cpu(fn, args.min_time, args.reps)
                   for name, fn in (("torch", torch_eager), ("probe", meridian_probe), ("copy", copy))}

    # Agreement with a float64 entropy of the same values, on the first rows
    # (torch eager computes in the input dtype).
    head = x[:16]
    ours = torch.from_numpy(probe.row_stats(head)["entropy"]).double()
    theirs = (-(torch.softmax(head, -1) * torch.log_softmax(head, -1)).sum(-1)).double().cpu()
    wide = head.double()
    reference = -(torch.softmax(wide, -1) * torch.log_softmax(wide, -1)).sum(-1).cpu()
    nbytes = x.numel() * x.element_size()
    report = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else f"cpu ({os.cpu_count()} cores)",
        "shape": [args.rows, args.vocab],
        "dtype": args.dtype,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_eager_us": timings["torch"] * 1e6,
        "probe_us": timings["probe"] * 1e6,
        "copy_us": timings["copy"] * 1e6,
        "probe_gb_per_s": nbytes / timings["probe"] / 1e9,
        "torch_eager_gb_per_s": nbytes / timings["torch"] / 1e9,
        "copy_gb_per_s": 2 * nbytes / timings["copy"] / 1e9,
        "probe_vs_torch_eager": timings["torch"] / timings["probe"],
        "probe_fraction_of_copy_bandwidth": (nbytes / timings["probe"]) / (2 * nbytes / timings["copy"]),
        "max_abs_entropy_error_probe_16_rows": float((ours - reference).abs().max()),
        "max_abs_entropy_error_torch_eager_16_rows": float((theirs - reference).abs().max()),
    }
    print(f"[{args.rows}, {args.vocab}] {args.dtype} on {args.device}: probe {report['probe_us']:.1f} us "
          f"({report['probe_gb_per_s']:.1f} GB/s, {report['probe_fraction_of_copy_bandwidth']:.2f} of copy), "
          f"torch eager {report['torch_eager_us']:.1f} us -> {report['probe_vs_torch_eager']:.1f}x")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
