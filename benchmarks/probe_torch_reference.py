#!/usr/bin/env python3
"""GPU probe benchmark, for a machine with an NVIDIA GPU and PyTorch: times
PyTorch eager entropy, -(softmax(x) * log_softmax(x)).sum(-1), on
[rows, vocab] bf16 logits for each --rows, runs `meridian bench-probe
--device cuda` on the same shape, and prints both with the ratios of
docs/benchmarks.md (kernel / D2D copy bandwidth, PyTorch time / kernel time).

Usage: probe_torch_reference.py --cli build/bin/meridian [--rows 1 64 256] [--dtype bf16]
"""
from __future__ import annotations

import argparse
import json
import subprocess


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    import torch  # only needed here; not a dependency of the package

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    results = []
    for rows in args.rows:
        # As `meridian bench-probe --device cuda` times the kernel: a CUDA graph of back-to-back
        # calls (no host launch gaps on either side), each on its own copy of the logits from a
        # pool of at least 256 MiB, more than the L2 holds, so no call re-reads a cached buffer.
        one = (torch.randn(rows, args.vocab, device="cuda") * 3).to(dtype)
        size = one.numel() * one.element_size()
        copies = max(1, -(-(256 << 20) // size))
        pool = [one.clone() for _ in range(copies)]
        calls = max(copies, 16)

        def eager(x: torch.Tensor) -> torch.Tensor:
            return -(torch.softmax(x, -1) * torch.log_softmax(x, -1)).sum(-1)

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            eager(pool[0])  # warm-up outside the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(calls):
                eager(pool[i % copies])
        graph.replay()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(max(3, args.reps // 5)):
            start.record()
            graph.replay()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / 1e3 / calls)
        torch_s = sorted(times)[len(times) // 2]
        del graph
        del pool
        kernel = json.loads(subprocess.run(
            [args.cli, "bench-probe", "--device", "cuda", "--rows", str(rows), "--vocab", str(args.vocab),
             "--dtype", args.dtype], check=True, capture_output=True, text=True).stdout)
        kernel_s = kernel["ns_per_row"] * rows / 1e9
        results.append({"rows": rows, "torch_eager_us": torch_s * 1e6, "kernel_us": kernel_s * 1e6,
                        "speedup_vs_torch": torch_s / kernel_s, **kernel})
        print(f"[{rows}, {args.vocab}] {args.dtype}: kernel {kernel_s * 1e6:.1f} us "
              f"({kernel['gb_per_s']:.0f} GB/s, {kernel['fraction_of_d2d_copy']:.2f} of D2D copy), "
              f"torch eager {torch_s * 1e6:.1f} us, {torch_s / kernel_s:.1f}x")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
