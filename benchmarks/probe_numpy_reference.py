#!/usr/bin/env python3
"""The seeds' NumPy entropy probe (their `backend="cpu"`), as the baseline of
`meridian bench-probe`: per row, softmax and log-softmax with NumPy, Shannon
entropy -(p * log p).sum(), and p on the end-of-think ids. Batched along
axis 1, as the seeds' `compute_batch` does.

Usage: probe_numpy_reference.py --rows 64 --vocab 151936 [--min-time 1]
Prints JSON: ns_per_row, gb_per_s (fp32 bytes read), mean_entropy_nats.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np


def numpy_probe(logits: np.ndarray, end_ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    x = logits.astype(np.float32, copy=False)
    m = x.max(axis=1, keepdims=True)
    shifted = x - m
    e = np.exp(shifted)
    s = e.sum(axis=1, keepdims=True)
    p = e / s
    log_p = shifted - np.log(s)
    entropy = -(p * log_p).sum(axis=1)
    end_mass = p[:, end_ids].sum(axis=1)
    return entropy, end_mass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    logits = rng.normal(0.0, 3.0, size=(args.rows, args.vocab)).astype(np.float32)
    end_ids = [args.vocab - 1]
    numpy_probe(logits, end_ids)  # warm-up
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < args.min_time:
        t0 = time.perf_counter()
        entropy, _ = numpy_probe(logits, end_ids)
        times.append(time.perf_counter() - t0)
    seconds = sorted(times)[len(times) // 2]
    print(json.dumps({
        "numpy": np.__version__,
        "rows": args.rows,
        "vocab": args.vocab,
        "iterations": len(times),
        "ns_per_row": seconds * 1e9 / args.rows,
        "gb_per_s": logits.nbytes / seconds / 1e9,
        "mean_entropy_nats": float(entropy.mean()),
    }, indent=2))


if __name__ == "__main__":
    main()
