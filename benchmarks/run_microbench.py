#!/usr/bin/env python3
"""Run build/bin/meridian-microbench and report each hot path as a ratio to
the baseline measured in the same run (absolute times on a shared machine are
noise; ratios are what docs/benchmarks.md records).

Usage: run_microbench.py --binary build/bin/meridian-microbench --out bench-out/microbench.json
"""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys

# (label, numerator benchmark, denominator benchmark, target description).
# Items: router = tokens, scheduler = steps, KV block manager = blocks.
RATIOS = [
    ("router on_token / bare flat_hash_map (1 thread)",
     "BM_RouterOnToken/real_time/threads:1", "BM_BareFlatHashMap", "<= 2.0"),
    ("router on_tokens batch / bare flat_hash_map (1 thread)",
     "BM_RouterOnTokensBatch/real_time/threads:1", "BM_BareFlatHashMap", "<= 2.0"),
    ("mutex+unordered_map / router on_token (2 threads)",
     "BM_MutexUnorderedMapRouter/real_time/threads:2", "BM_RouterOnToken/real_time/threads:2", ">= 10"),
    ("mutex+unordered_map / router on_tokens batch (2 threads)",
     "BM_MutexUnorderedMapRouter/real_time/threads:2", "BM_RouterOnTokensBatch/real_time/threads:2", ">= 10"),
    ("mutex+unordered_map / router on_token (1 thread)",
     "BM_MutexUnorderedMapRouter/real_time/threads:1", "BM_RouterOnToken/real_time/threads:1", "(context)"),
    ("naive sort scheduler / scheduler step, 64 running",
     "BM_NaiveSchedulerStep/64", "BM_SchedulerStep/64", "(context)"),
    ("naive sort scheduler / scheduler step, 1,024 running",
     "BM_NaiveSchedulerStep/1024", "BM_SchedulerStep/1024", "(context)"),
    ("naive sort scheduler / scheduler step, 8,192 running",
     "BM_NaiveSchedulerStep/8192", "BM_SchedulerStep/8192", "(context)"),
    ("naive scan / block manager: allocate (evicting a cached block)",
     "BM_NaiveKvAllocateEvict", "BM_KvAllocateEvict", "(context)"),
    ("naive scan / block manager: allocate + demote + release, per block",
     "BM_NaiveKvExitThinkCycle", "BM_KvExitThinkCycle", "(context)"),
    ("float64 reference / probe kernel, 16 rows x 151,936 (1 thread)",
     "BM_ProbeReference/16", "BM_ProbeKernel/16", "(context)"),
    ("probe kernel / streaming read, 16 rows x 151,936 (time ratio; 1/x = share of bandwidth)",
     "BM_ProbeKernel/16", "BM_ProbeStreamRead/16", "<= 1.43 (>= 70% of bandwidth)"),
    ("prometheus-cpp histogram observe / registry observe, ITL (1 thread)",
     "BM_PrometheusCppHistogramObserve/real_time/threads:1", "BM_RegistryObserveItl/real_time/threads:1", "(context)"),
    ("prometheus-cpp histogram observe / registry observe, ITL (2 threads)",
     "BM_PrometheusCppHistogramObserve/real_time/threads:2", "BM_RegistryObserveItl/real_time/threads:2", "(context)"),
    ("prometheus-cpp counter increment / registry counter add (2 threads)",
     "BM_PrometheusCppCounterIncrement/real_time/threads:2", "BM_RegistryCounterAdd/real_time/threads:2", "(context)"),
    # MRDN v1 codec (items = frames): how far BLAKE3 keeps encode/decode from a plain copy.
    ("MRDN encode / memcpy, 16 KiB body", "BM_MrdnEncode/16384", "BM_Memcpy/16384", "(context)"),
    ("MRDN encode / memcpy, 1 MiB body", "BM_MrdnEncode/1048576", "BM_Memcpy/1048576", "(context)"),
    ("MRDN decode (verify) / memcpy, 16 KiB body", "BM_MrdnDecode/16384", "BM_Memcpy/16384", "(context)"),
    ("MRDN decode (verify) / memcpy, 1 MiB body", "BM_MrdnDecode/1048576", "BM_Memcpy/1048576", "(context)"),
    ("MRDN decode (verify) / BLAKE3 alone, 1 MiB body", "BM_MrdnDecode/1048576", "BM_Blake3Checksum/1048576",
     "(context)"),
    ("MRDN decode_batch / memcpy, 64 x 16 KiB frames", "BM_MrdnDecodeBatch", "BM_MemcpyBatch", "(context)"),
]

# (label, benchmark, counter, target description): absolute per-step
# percentiles, where SPEC states the target that way.
PERCENTILES = [
    ("scheduler step P99 at 1,024 running (us)", "BM_SchedulerStep/1024", "p99_us", "<= 10"),
    ("scheduler step P50 at 1,024 running (us)", "BM_SchedulerStep/1024", "p50_us", "(context)"),
    ("scheduler step P99 at 8,192 running (us)", "BM_SchedulerStep/8192", "p99_us", "(context)"),
]


def ns_per_item(bench: dict) -> float | None:
    """Nanoseconds per item, or None for a benchmark that counts no items
    (Google Benchmark omits items_per_second unless SetItemsProcessed is called)."""
    rate = bench.get("items_per_second")
    return 1e9 / rate if rate else None


def summarize(data: dict) -> dict:
    """The ratios, percentiles and per-item times of Google Benchmark's JSON
    output; raises ValueError naming what is missing."""
    # Medians across repetitions are robust to a noisy neighbour.
    medians = {b["run_name"]: b for b in data["benchmarks"] if b.get("aggregate_name") == "median"}
    rows = []
    for label, num, den, target in RATIOS:
        if num not in medians or den not in medians:
            raise ValueError(f"missing benchmark for '{label}': {num} or {den}")
        num_ns, den_ns = ns_per_item(medians[num]), ns_per_item(medians[den])
        if num_ns is None or den_ns is None:
            raise ValueError(f"'{label}': {num if num_ns is None else den} reports no items_per_second "
                             "(its benchmark must call state.SetItemsProcessed)")
        rows.append({"ratio": label, "value": round(num_ns / den_ns, 2), "target": target,
                     "numerator_ns_per_item": round(num_ns, 2), "denominator_ns_per_item": round(den_ns, 2)})
    percentiles = []
    for label, name, counter, target in PERCENTILES:
        if counter not in medians.get(name, {}):
            raise ValueError(f"missing counter for '{label}': {name}.{counter}")
        percentiles.append({"metric": label, "value": round(medians[name][counter], 2), "target": target})
    return {"context": data["context"], "ratios": rows, "percentiles": percentiles,
            # Benchmarks that count no items are listed by their time per iteration only.
            "ns_per_item": {k: round(ns, 2) for k, v in medians.items() if (ns := ns_per_item(v)) is not None},
            "real_time": {k: {"value": v["real_time"], "unit": v.get("time_unit", "ns")}
                          for k, v in medians.items() if "real_time" in v},
            "batch": {k: round(v["batch"], 1) for k, v in medians.items() if "batch" in v}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--min-time", default="0.2")
    args = parser.parse_args()

    if args.repetitions < 2:
        print("--repetitions must be >= 2: the report uses the median of the repetitions", file=sys.stderr)
        return 2
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    raw = out.with_suffix(".raw.json")
    subprocess.run(
        [args.binary, f"--benchmark_out={raw}", "--benchmark_out_format=json",
         f"--benchmark_repetitions={args.repetitions}", f"--benchmark_min_time={args.min_time}",
         "--benchmark_report_aggregates_only=true"],
        check=True, stdout=subprocess.DEVNULL)
    try:
        report = summarize(json.loads(raw.read_text()))
    except ValueError as e:
        print(f"run_microbench: {e}", file=sys.stderr)
        return 1
    out.write_text(json.dumps(report, indent=2) + "\n")
    rows, percentiles = report["ratios"], report["percentiles"]

    width = max(len(r["ratio"]) for r in rows)
    print(f"{'ratio'.ljust(width)}  value   target   (ns/item: numerator / denominator)")
    for r in rows:
        print(f"{r['ratio'].ljust(width)}  {r['value']:>6}   {r['target']:<9}  "
              f"({r['numerator_ns_per_item']} / {r['denominator_ns_per_item']})")
    for p in percentiles:
        print(f"{p['metric'].ljust(width)}  {p['value']:>6}   {p['target']}")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
