"""The remote KV tier: the peer process NixlFabric and MooncakeFabric push to.

    python -m meridian.disagg.remote_tier --fabric nixl|mooncake --dir D --arena-bytes N [--deadline-s S]

It registers one DRAM arena with the fabric, publishes how to reach it through
files in D (``peer.json`` written last and atomically; for NIXL also the agent
metadata ``nixl-peer.meta``), then serves until SIGTERM/SIGINT, SIGKILL or the
deadline. On every commit (a NIXL notification, or a Mooncake commit record
the producer wrote into the arena's commit ring) it validates the region's MRDN
v1 frames (header and BLAKE3, meridian's codec ``mrdn_decode_batch``) and records the region's
SHA-256 so tests can check every byte from the peer's side; a region that is
not valid MRDN counts as corrupt. ``status.json`` in D (atomic) carries the
counts; it is rewritten whenever they change (at most every 50 ms).

Thread-safety: a single-threaded process. Ownership: the arena lives for the
life of the process.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import signal
import sys
import time

import numpy as np

from meridian.disagg._fabric_common import (
    COMMIT_RECORD,
    COMMIT_RING_OFFSET,
    COMMIT_SLOTS,
    CONSUMED_SEQ_OFFSET,
    NIXL_PEER_META,
    RELEASES_SEEN_OFFSET,
    NIXL_PRODUCER_META_PREFIX,
    PEER_FILE,
    RECORD_COMMIT,
    RECORD_RELEASE,
    STATUS_FILE,
    data_offset_for,
    record_check,
    write_atomically,
)

AGENT_NAME = "meridian-remote-tier"
_STATUS_INTERVAL_S = 0.05
_MAX_ERRORS_KEPT = 16


def _load_validator():
    """A function region -> frame count that raises ValueError (meridian.MrdnError) on a bad MRDN v1 batch."""
    try:
        from meridian._meridian import mrdn_decode_batch  # noqa: PLC0415 - the C++ codec
    except ImportError as exc:
        raise SystemExit(f"remote_tier: meridian's MRDN codec is not importable ({exc}): "
                         "rebuild the extension") from exc
    return lambda region: len(mrdn_decode_batch(region))


class RemoteTier:
    """The arena, the committed regions and the counts status.json reports."""

    def __init__(self, fabric: str, directory: pathlib.Path, arena_bytes: int, digests: bool = True) -> None:
        self.fabric = fabric
        self.digests = digests
        self.dir = directory
        self.data_offset = data_offset_for(fabric)
        if arena_bytes <= self.data_offset:
            raise ValueError(f"--arena-bytes {arena_bytes} leaves no room for data "
                             f"(the {fabric} control area takes {self.data_offset} bytes)")
        try:
            self.arena = np.zeros(arena_bytes, dtype=np.uint8)
        except MemoryError:
            raise ValueError(f"--arena-bytes {arena_bytes}: cannot allocate an arena that large") from None
        self.validate = _load_validator()
        self.regions: dict[int, dict] = {}
        self.counts = {"committed_batches": 0, "committed_frames": 0, "committed_bytes": 0,
                       "corrupt_batches": 0, "released": 0, "bad_messages": 0}
        self.errors: list[str] = []
        self.dirty = True
        self.last_status = 0.0

    def commit(self, handle: int, offset: int, length: int) -> None:
        if not self.data_offset <= offset <= offset + length <= self.arena.nbytes:
            self.note_error(f"commit of handle {handle}: region [{offset}, +{length}) is outside the data "
                            f"area [{self.data_offset}, {self.arena.nbytes})")
            self.counts["bad_messages"] += 1
            return
        region = self.arena[offset:offset + length]
        try:
            frames = self.validate(region)
        except ValueError as exc:
            self.counts["corrupt_batches"] += 1
            self.note_error(f"handle {handle}: corrupt MRDN payload at arena offset {offset}: {exc}")
            return
        self.counts["committed_batches"] += 1
        self.counts["committed_frames"] += frames
        self.counts["committed_bytes"] += length
        self.regions[handle] = {"offset": offset, "length": length, "frames": frames,
                                "sha256": hashlib.sha256(region).hexdigest() if self.digests else ""}
        self.dirty = True

    def release(self, handle: int) -> None:
        if self.regions.pop(handle, None) is not None:
            self.counts["released"] += 1
            self.dirty = True

    def note_error(self, message: str) -> None:
        self.errors = (self.errors + [message])[-_MAX_ERRORS_KEPT:]
        self.dirty = True

    def write_status(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and (not self.dirty or now - self.last_status < _STATUS_INTERVAL_S):
            return
        status = dict(self.counts, fabric=self.fabric, pid=os.getpid(), live_regions=len(self.regions),
                      stored_bytes=sum(r["length"] for r in self.regions.values()),
                      regions={str(h): r for h, r in self.regions.items()}, errors=self.errors)
        write_atomically(self.dir / STATUS_FILE, json.dumps(status).encode())
        self.dirty, self.last_status = False, now

    def publish(self, **fields) -> None:
        info = {"fabric": self.fabric, "arena_addr": self.arena.ctypes.data, "arena_bytes": self.arena.nbytes,
                "data_offset": self.data_offset, "pid": os.getpid(), **fields}
        write_atomically(self.dir / PEER_FILE, json.dumps(info).encode())


def _handle_notif(tier: RemoteTier, message: bytes, releases_seen) -> None:
    text = message.decode(errors="replace")
    try:
        if text.startswith("commit:"):
            handle, offset, length = (int(x) for x in text[len("commit:"):].split(":"))
            tier.commit(handle, offset, length)
            return
        if text.startswith("release:"):
            tier.release(int(text[len("release:"):]))
            # The producer reuses the region once this counter passes its release.
            releases_seen[0] += 1
            return
    except ValueError:
        pass
    tier.counts["bad_messages"] += 1
    tier.note_error(f"unrecognised notification {text[:80]!r}")


def serve_nixl(tier: RemoteTier, should_stop) -> None:
    from meridian.disagg.nixl_fabric import import_nixl  # noqa: PLC0415 - fabric chosen at run time

    api, _ = import_nixl()
    agent = api.nixl_agent(AGENT_NAME, api.nixl_agent_config(backends=["UCX"]))
    agent.register_memory([(tier.arena.ctypes.data, tier.arena.nbytes, 0, "")], "DRAM")
    write_atomically(tier.dir / NIXL_PEER_META, agent.get_agent_metadata())
    tier.publish(agent=AGENT_NAME)
    releases_seen = tier.arena[RELEASES_SEEN_OFFSET:RELEASES_SEEN_OFFSET + 8].view(np.uint64)
    known: set[str] = set()
    last_scan = 0.0
    while not should_stop():
        now = time.monotonic()
        if now - last_scan > 0.2:  # producers announce themselves with a metadata file
            last_scan = now
            for path in tier.dir.glob(f"{NIXL_PRODUCER_META_PREFIX}*.meta"):
                if path.name not in known:
                    known.add(path.name)
                    try:
                        agent.add_remote_agent(path.read_bytes())
                    except Exception as exc:  # noqa: BLE001 - a stale file must not stop the tier
                        tier.note_error(f"{path.name}: {exc}")
        messages = [m for batch in agent.get_new_notifs().values() for m in batch]
        for message in messages:
            _handle_notif(tier, message, releases_seen)
        tier.write_status()
        if not messages:
            time.sleep(0.0005)


def serve_mooncake(tier: RemoteTier, should_stop) -> None:
    from meridian.disagg.mooncake_fabric import import_mooncake  # noqa: PLC0415

    engine = import_mooncake()()
    if engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") != 0:
        raise SystemExit("remote_tier: Mooncake TransferEngine.initialize failed")
    if engine.register_memory(tier.arena.ctypes.data, tier.arena.nbytes) != 0:
        raise SystemExit("remote_tier: Mooncake register_memory failed for the arena")
    tier.publish(session=f"127.0.0.1:{engine.get_rpc_port()}")
    ring = tier.arena[COMMIT_RING_OFFSET:COMMIT_RING_OFFSET + COMMIT_RECORD.size * COMMIT_SLOTS]
    consumed = tier.arena[CONSUMED_SEQ_OFFSET:CONSUMED_SEQ_OFFSET + 8].view(np.uint64)
    next_seq = 1
    while not should_stop():
        tier.write_status()  # rate-limited: also under a steady stream of records
        slot = (next_seq - 1) % COMMIT_SLOTS * COMMIT_RECORD.size
        record = COMMIT_RECORD.unpack(ring[slot:slot + COMMIT_RECORD.size].tobytes())
        seq, handle, offset, length, kind, check = record
        if seq == next_seq and check == record_check(seq, handle, offset, length, kind):
            if kind == RECORD_COMMIT:
                tier.commit(handle, offset, length)
            elif kind == RECORD_RELEASE:
                tier.release(handle)
            else:
                tier.counts["bad_messages"] += 1
                tier.note_error(f"commit record {seq}: unknown kind {kind}")
            consumed[0] = next_seq
            next_seq += 1
            continue
        time.sleep(0.0005)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m meridian.disagg.remote_tier",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--fabric", choices=("nixl", "mooncake"), required=True)
    parser.add_argument("--dir", required=True, type=pathlib.Path, help="where peer/status files go")
    parser.add_argument("--arena-bytes", type=int, default=256 << 20, help="receive arena size (bytes)")
    parser.add_argument("--deadline-s", type=float, default=0.0, help="exit after this long (0: never)")
    parser.add_argument("--no-digests", action="store_true",
                        help="skip the SHA-256 of each committed region in status.json (benchmarks)")
    args = parser.parse_args(argv)
    # Bad input is one line and exit 2 (argparse's usage-error status), never a traceback.
    if args.arena_bytes <= 0:
        parser.error(f"--arena-bytes must be > 0; got {args.arena_bytes}")
    if not args.deadline_s >= 0 or args.deadline_s == float("inf"):
        parser.error(f"--deadline-s must be a finite number >= 0; got {args.deadline_s}")
    if args.dir.exists() and not args.dir.is_dir():
        parser.error(f"--dir {args.dir}: is not a directory")
    try:
        args.dir.mkdir(parents=True, exist_ok=True)
        for stale in (PEER_FILE, STATUS_FILE, NIXL_PEER_META):  # a previous tier's files would mislead producers
            (args.dir / stale).unlink(missing_ok=True)
    except OSError as e:
        parser.error(f"--dir {args.dir}: {e.strerror or e}")
    stop = {"now": False}

    def request_stop(*_):
        stop["now"] = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    deadline = time.monotonic() + args.deadline_s if args.deadline_s > 0 else float("inf")
    try:
        tier = RemoteTier(args.fabric, args.dir, args.arena_bytes, digests=not args.no_digests)
    except ValueError as e:
        parser.error(str(e))

    def should_stop() -> bool:
        return stop["now"] or time.monotonic() >= deadline

    try:
        (serve_nixl if args.fabric == "nixl" else serve_mooncake)(tier, should_stop)
    finally:
        (args.dir / PEER_FILE).unlink(missing_ok=True)  # no producer should find a tier that has gone
        tier.write_status(force=True)
    print(f"remote_tier: stopped; {json.dumps(tier.counts)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
