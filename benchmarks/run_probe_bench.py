#!/usr/bin/env python3
"""Runs `meridian bench-probe` (fp32, bf16, fp16) and the seeds' NumPy
reference on the same shape, and reports the ratios docs/benchmarks.md
records: kernel bandwidth / streaming-read bandwidth (target >= 0.70,
single core) and NumPy time / kernel time (target >= 10).

Usage: run_probe_bench.py --cli build-release/bin/meridian --out bench-out/probe.json
"""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys


def run_json(cmd: list[str]) -> dict:
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--min-time", type=float, default=1.0)
    args = ap.parse_args()
    here = pathlib.Path(__file__).resolve().parent
    shape = ["--rows", str(args.rows), "--vocab", str(args.vocab), "--min-time", str(args.min_time)]
    numpy = run_json([sys.executable, str(here / "probe_numpy_reference.py"), *shape])
    results = {"numpy": numpy, "kernel": {}}
    print(f"entropy probe, [{args.rows}, {args.vocab}], single core; NumPy {numpy['numpy']}: "
          f"{numpy['ns_per_row'] / 1e3:.1f} us/row (fp32)")
    print(f"{'dtype':6} {'us/row':>8} {'GB/s':>6} {'stream GB/s':>11} {'of stream':>9} {'vs NumPy':>8} "
          f"{'vs f64 ref':>10}  target")
    for dtype in ("fp32", "bf16", "fp16"):
        k = run_json([args.cli, "bench-probe", "--dtype", dtype, "--threads", "1", *shape])
        k["speedup_vs_numpy_fp32"] = numpy["ns_per_row"] / k["ns_per_row"]
        results["kernel"][dtype] = k
        print(f"{dtype:6} {k['ns_per_row'] / 1e3:8.1f} {k['gb_per_s']:6.2f} {k['stream_read_gb_per_s']:11.2f} "
              f"{k['fraction_of_stream_read']:9.2f} {k['speedup_vs_numpy_fp32']:8.1f} "
              f"{k.get('speedup_vs_reference', float('nan')):10.1f}  >= 0.70 of stream, >= 10x NumPy")
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
