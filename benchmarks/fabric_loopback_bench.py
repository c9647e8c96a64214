#!/usr/bin/env python3
"""NIXL and Mooncake loopback throughput of meridian.disagg's fabrics, two processes.

The producer (this process) pushes MRDN v1 frames into a remote tier started as
``python -m meridian.disagg.remote_tier`` (which validates every commit's
frames, header and BLAKE3, as in production) over loopback TCP
(UCX_TLS=tcp,self UCX_NET_DEVICES=lo for NIXL; Mooncake's "tcp" protocol):
  * 16 KiB blocks, one at a time: latency of push + commit (push, then poll
    until "committed"), and blocks/s;
  * 1 MiB batches (64 framed 16 KiB blocks), up to --window in flight: GB/s;
and, in the same run, a plain in-process NumPy memcpy of the same sizes as the
baseline. Each figure is the median over --reps repetitions; ``ratio`` is the
fabric's bandwidth over memcpy's.

Usage (after `make setup`, with the meridian package importable):
  .venv/bin/python benchmarks/fabric_loopback_bench.py [--fabric nixl|mooncake|both]
      [--reps 5] [--blocks 2000] [--batches 200] [--window 4] [--out bench-out/fabric.json]
Prints the JSON report (and writes it to --out when given).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

UCX_LOOPBACK = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo"}
os.environ.update(UCX_LOOPBACK)  # before any NIXL agent exists

BLOCK_BYTES = 16 * 1024
BLOCKS_PER_BATCH = 64
HEADER = struct.Struct("<4sIIB3s16s")


def frame(body: bytes) -> bytes:
    import blake3

    return HEADER.pack(b"MRDN", 1, len(body), 0, b"\0\0\0", blake3.blake3(body).digest()[:16]) + body


def start_peer(fabric: str, directory: pathlib.Path, arena_bytes: int) -> subprocess.Popen:
    import meridian

    env = dict(os.environ, **UCX_LOOPBACK)
    root = str(pathlib.Path(meridian.__file__).absolute().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "meridian.disagg.remote_tier", "--fabric", fabric, "--dir", str(directory),
         "--arena-bytes", str(arena_bytes), "--deadline-s", "600", "--no-digests"],
        env=env, stdout=open(directory / "remote-tier.log", "wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not (directory / "peer.json").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"the {fabric} remote tier did not start:\n"
                             f"{(directory / 'remote-tier.log').read_text()[-3000:]}")
        time.sleep(0.02)
    return proc


def wait(fab, handle: int) -> None:
    deadline = time.monotonic() + 10
    while (state := fab.poll(handle)) == "in_flight":
        if time.monotonic() > deadline:
            raise SystemExit(f"push {handle} did not commit within 10 s")
    if state != "committed":
        raise SystemExit(f"push {handle} ended {state}")


def push(fab, payload: bytes) -> int:
    """push, retrying while the fabric is busy (the peer has not yet processed releases)."""
    from meridian.disagg.errors import FabricBusy

    deadline = time.monotonic() + 10
    while True:
        try:
            return fab.push(payload)
        except FabricBusy:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.0001)


def blocks_run(fab, frames: list[bytes], count: int) -> dict:
    latencies = []
    start = time.perf_counter()
    for i in range(count):
        t0 = time.perf_counter()
        handle = push(fab, frames[i % len(frames)])
        wait(fab, handle)
        latencies.append(time.perf_counter() - t0)
        fab.release(handle)
    elapsed = time.perf_counter() - start
    latencies.sort()
    return {"push_commit_us_p50": latencies[len(latencies) // 2] * 1e6,
            "push_commit_us_p99": latencies[int(len(latencies) * 0.99)] * 1e6,
            "blocks_per_s": count / elapsed, "gb_per_s": count * len(frames[0]) / elapsed / 1e9}


def batches_run(fab, payloads: list[bytes], count: int, window: int) -> dict:
    in_flight: list[int] = []
    start = time.perf_counter()
    for i in range(count):
        if len(in_flight) >= window:
            handle = in_flight.pop(0)
            wait(fab, handle)
            fab.release(handle)
        in_flight.append(push(fab, payloads[i % len(payloads)]))
    for handle in in_flight:
        wait(fab, handle)
        fab.release(handle)
    elapsed = time.perf_counter() - start
    return {"gb_per_s": count * len(payloads[0]) / elapsed / 1e9, "batches_per_s": count / elapsed}


def memcpy_run(size: int, count: int) -> float:
    src = np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8)
    dst = np.empty(size * 8, dtype=np.uint8)  # rotate destinations, as pushes land in distinct regions
    start = time.perf_counter()
    for i in range(count):
        offset = (i % 8) * size
        np.copyto(dst[offset:offset + size], src)
    return count * size / (time.perf_counter() - start) / 1e9


def peer_status(directory: pathlib.Path, pushes: int) -> dict:
    """The peer's status once it has processed every commit (or after 30 s)."""
    deadline = time.monotonic() + 30
    while True:
        status = json.loads((directory / "status.json").read_text())
        if status["committed_batches"] + status["corrupt_batches"] >= pushes or time.monotonic() > deadline:
            return dict(status, pushes=pushes)
        time.sleep(0.05)


def median_of(runs: list[dict]) -> dict:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def bench_fabric(name: str, args, frames: list[bytes], payloads: list[bytes]) -> dict:
    if name == "nixl":
        from meridian.disagg.nixl_fabric import NixlFabric as Fabric
    else:
        from meridian.disagg.mooncake_fabric import MooncakeFabric as Fabric
    with tempfile.TemporaryDirectory(prefix=f"meridian-{name}-bench-") as tmp:
        directory = pathlib.Path(tmp)
        peer = start_peer(name, directory, arena_bytes=64 << 20)
        try:
            with Fabric(directory, max_inflight=max(args.window, 1)) as fab:
                blocks_run(fab, frames, min(200, args.blocks))  # warm-up: connections, page faults
                block_runs, batch_runs, copy_small, copy_big = [], [], [], []
                for _ in range(args.reps):
                    block_runs.append(blocks_run(fab, frames, args.blocks))
                    batch_runs.append(batches_run(fab, payloads, args.batches, args.window))
                    copy_small.append(memcpy_run(len(frames[0]), args.blocks * 10))
                    copy_big.append(memcpy_run(len(payloads[0]), args.batches * 4))
                pushes = min(200, args.blocks) + args.reps * (args.blocks + args.batches)
                status = peer_status(directory, pushes)
        finally:
            peer.terminate()
            peer.wait(timeout=30)
    blocks, batches = median_of(block_runs), median_of(batch_runs)
    memcpy_small, memcpy_big = statistics.median(copy_small), statistics.median(copy_big)
    return {
        "blocks_16k": dict(blocks, memcpy_gb_per_s=memcpy_small, ratio_to_memcpy=blocks["gb_per_s"] / memcpy_small),
        "batches_1m": dict(batches, memcpy_gb_per_s=memcpy_big, ratio_to_memcpy=batches["gb_per_s"] / memcpy_big,
                           window=args.window),
        "peer": {k: status[k] for k in ("pushes", "committed_batches", "committed_frames", "corrupt_batches")},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fabric", choices=("nixl", "mooncake", "both"), default="both")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--blocks", type=int, default=2000, help="16 KiB pushes per repetition")
    ap.add_argument("--batches", type=int, default=200, help="1 MiB pushes per repetition")
    ap.add_argument("--window", type=int, default=4, help="1 MiB batches in flight (max_inflight_batches)")
    ap.add_argument("--out", type=pathlib.Path)
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    frames = [frame(rng.integers(0, 256, BLOCK_BYTES, dtype=np.uint8).tobytes()) for _ in range(16)]
    payloads = [b"".join(frames[(i + j) % len(frames)] for j in range(BLOCKS_PER_BATCH)) for i in range(4)]
    fabrics = ("nixl", "mooncake") if args.fabric == "both" else (args.fabric,)
    report = {"host": platform.node(), "cpus": os.cpu_count(), "load_avg_1m_at_start": os.getloadavg()[0],
              "transport": "loopback TCP",
              "block_frame_bytes": len(frames[0]), "batch_bytes": len(payloads[0]), "reps": args.reps,
              "fabrics": {name: bench_fabric(name, args, frames, payloads) for name in fabrics}}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
