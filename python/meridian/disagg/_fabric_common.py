"""Pieces the NIXL and Mooncake fabrics and the remote-tier peer share.

The topology: a producer (the engine, NixlFabric / MooncakeFabric) and a remote
KV tier (``python -m meridian.disagg.remote_tier``) that registers one receive
arena in DRAM. The peer publishes what the producer needs to reach it through
files in a directory (never a socket listener: NIXL's binds 0.0.0.0):
``peer.json`` (written last, atomically: its presence means "ready") and, for
NIXL, the agent metadata blob ``nixl-peer.meta``. The producer allocates
regions of the peer's arena itself (one producer per tier: producer.lock).

A released region is reused only once the peer has processed the release
(the counters in the control block say so): the peer validates a region when
it processes its commit, which comes before the release, so it never reads a
region the producer is already overwriting with the next payload.

Arena layout (offsets from the arena's base address):
  [0, 64)                 control block, written by the peer: Mooncake: the
                          last commit-ring sequence it processed at [8, 16);
                          NIXL: how many release notifications it processed
                          at [16, 24); the liveness probe reads [0, 64)
  [64, 64 + ring)         Mooncake commit ring (COMMIT_SLOTS records)
  [data_offset, end)      data regions the producer allocates
"""
from __future__ import annotations

import json
import os
import pathlib
import secrets
import struct
import threading
import time
from dataclasses import dataclass

from meridian.disagg.errors import FabricBusy, FabricUnavailable

PEER_FILE = "peer.json"
PRODUCER_LOCK = "producer.lock"
STATUS_FILE = "status.json"
NIXL_PEER_META = "nixl-peer.meta"
NIXL_PRODUCER_META_PREFIX = "nixl-producer-"
CONTROL_BYTES = 64
CONSUMED_SEQ_OFFSET = 8
RELEASES_SEEN_OFFSET = 16
# A commit record: sequence, handle, offset, length, kind, check. The check
# word lets the peer tell a record from one still being written (a TCP write
# lands with memcpy, which is not atomic).
COMMIT_RECORD = struct.Struct("<QQQIIQ")
COMMIT_SLOTS = 4096
COMMIT_RING_OFFSET = CONTROL_BYTES
COMMIT_RING_BYTES = COMMIT_RECORD.size * COMMIT_SLOTS
RECORD_COMMIT = 1
RECORD_RELEASE = 2
_CHECK_SALT = 0x4D52444E_434F4D54  # "MRDNCOMT"
ALIGN = 64


def record_check(sequence: int, handle: int, offset: int, length: int, kind: int) -> int:
    """The check word of a commit record (see COMMIT_RECORD)."""
    mixed = sequence ^ (handle * 0x9E3779B97F4A7C15) ^ (offset << 1) ^ (length << 32) ^ kind
    return (mixed ^ _CHECK_SALT) & 0xFFFFFFFFFFFFFFFF


def pack_record(sequence: int, handle: int, offset: int, length: int, kind: int) -> bytes:
    return COMMIT_RECORD.pack(sequence, handle, offset, length, kind,
                              record_check(sequence, handle, offset, length, kind))


def data_offset_for(fabric: str) -> int:
    """Where the data regions start in a peer's arena for this fabric."""
    if fabric == "mooncake":
        return COMMIT_RING_OFFSET + COMMIT_RING_BYTES
    return CONTROL_BYTES


def write_atomically(path: pathlib.Path, data: bytes) -> None:
    """Write tmp + rename, so a reader never sees a half-written file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@dataclass(frozen=True)
class PeerInfo:
    """What a producer needs to reach a remote tier (peer.json)."""

    fabric: str
    arena_addr: int
    arena_bytes: int
    data_offset: int
    pid: int
    agent: str = ""  # NIXL agent name
    session: str = ""  # Mooncake session id "host:rpc_port"


def wait_for_peer(directory: pathlib.Path, fabric: str, timeout_s: float) -> PeerInfo:
    """Read peer.json from directory, waiting up to timeout_s for the peer to write it."""
    path = directory / PEER_FILE
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() >= deadline:
            raise FabricUnavailable(
                f"no remote tier in {directory}: {PEER_FILE} did not appear within {timeout_s:g} s "
                f"(start one with `python -m meridian.disagg.remote_tier --fabric {fabric} --dir {directory}`)")
        time.sleep(0.02)
    try:
        raw = json.loads(path.read_text())
        info = PeerInfo(fabric=str(raw["fabric"]), arena_addr=int(raw["arena_addr"]),
                        arena_bytes=int(raw["arena_bytes"]), data_offset=int(raw["data_offset"]),
                        pid=int(raw["pid"]), agent=str(raw.get("agent", "")),
                        session=str(raw.get("session", "")))
    except (ValueError, KeyError, TypeError) as exc:
        raise FabricUnavailable(f"{path}: not a valid remote-tier peer file: {exc}") from exc
    if info.fabric != fabric:
        raise FabricUnavailable(f"{path}: the remote tier serves fabric {info.fabric!r}, not {fabric!r}")
    if not 0 < info.data_offset < info.arena_bytes:
        raise FabricUnavailable(f"{path}: data_offset {info.data_offset} is outside the arena "
                                f"({info.arena_bytes} bytes)")
    if fabric == "mooncake":
        problem = session_problem(info.session)
        if problem:
            raise FabricUnavailable(f"{path}: session {problem}")
    return info


def session_problem(session: str) -> str:
    """What is wrong with a Mooncake session id "host:port" ('' when valid): the
    host is an IPv4/IPv6 address (as meridian.canonical_listen_host takes it;
    an IPv6 one in brackets), the port 1..65535. A peer file is untrusted: a
    malformed id must not reach the transfer engine as something else."""
    from meridian._meridian import canonical_listen_host

    host, sep, port = session.rpartition(":")
    if not sep or not host:
        return f"must be host:port; got {session!r}"
    if not port.isdigit() or not 0 < int(port) <= 65535:
        return f"has port {port!r}: it must be a number in 1..65535; got {session!r}"
    if host.startswith("[") != host.endswith("]") or (":" in host and not host.startswith("[")):
        return f"must put an IPv6 host in brackets; got {session!r}"
    if host == "localhost" or not canonical_listen_host(host):
        return f"must name its host by a valid numeric IPv4 or IPv6 address; got {session!r}"
    return ""


_live_claims: set[str] = set()  # owners in this process that hold a producer lock


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim_arena(directory: pathlib.Path, owner: str, label: str) -> pathlib.Path:
    """Take the remote tier's producer lock, or FabricUnavailable when a live producer holds it.

    The producer allocates the peer's arena (and, for Mooncake, numbers the
    commit ring) itself, so two producers on one tier would overwrite each
    other's regions: one at a time. A lock left by a dead process (or by a
    fabric of this process that was never closed) is taken over.
    """
    path = directory / PRODUCER_LOCK
    record = f"{os.getpid()} {owner}"
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                pid_text, _, holder = path.read_text().partition(" ")
                pid = int(pid_text)
            except (OSError, ValueError):
                pid, holder = -1, ""
            if pid > 0 and _pid_alive(pid) and (pid != os.getpid() or holder in _live_claims):
                raise FabricUnavailable(f"{label}: the remote tier in {directory} already has a producer "
                                        f"({holder or '?'}, pid {pid}); one producer per remote tier") from None
            path.unlink(missing_ok=True)  # stale
            continue
        with os.fdopen(fd, "w") as lock:
            lock.write(record)
        _live_claims.add(owner)
        return path
    raise FabricUnavailable(f"{label}: could not take {path}")


def release_arena(path: pathlib.Path, owner: str) -> None:
    _live_claims.discard(owner)
    try:
        if path.read_text() == f"{os.getpid()} {owner}":
            path.unlink()
    except OSError:
        pass


class RegionAllocator:
    """First-fit allocator of [base, base + size) in ALIGN-byte units.

    Thread-safety: not thread-safe; the owning fabric serialises calls.
    """

    def __init__(self, base: int, size: int) -> None:
        self._free: list[tuple[int, int]] = [(base, size)] if size > 0 else []  # sorted (start, len)
        self.capacity = size
        self.used = 0

    def allocate(self, length: int) -> int | None:
        """Start of a free region of at least length bytes, or None when none is free."""
        need = max(ALIGN, (length + ALIGN - 1) // ALIGN * ALIGN)
        for i, (start, size) in enumerate(self._free):
            if size >= need:
                if size == need:
                    del self._free[i]
                else:
                    self._free[i] = (start + need, size - need)
                self.used += need
                return start
        return None

    def free(self, start: int, length: int) -> None:
        need = max(ALIGN, (length + ALIGN - 1) // ALIGN * ALIGN)
        self.used -= need
        i = 0
        while i < len(self._free) and self._free[i][0] < start:
            i += 1
        self._free.insert(i, (start, need))
        # Coalesce with the neighbours so long runs stay allocatable.
        if i + 1 < len(self._free) and self._free[i][0] + self._free[i][1] == self._free[i + 1][0]:
            self._free[i] = (start, self._free[i][1] + self._free[i + 1][1])
            del self._free[i + 1]
        if i > 0 and self._free[i - 1][0] + self._free[i - 1][1] == self._free[i][0]:
            self._free[i - 1] = (self._free[i - 1][0], self._free[i - 1][1] + self._free[i][1])
            del self._free[i]


@dataclass
class Entry:
    """One pushed payload: where it lives in the peer's arena and its state."""

    remote_offset: int
    length: int
    state: str  # "in_flight" | "committed" | "failed"
    started: float
    xfer: object = None  # the NIXL transfer handle while in flight
    staging_offset: int | None = None  # local staging region held while in flight
    error: str = ""


class FabricBookkeeping:
    """Handle table, arena and staging allocators, and the busy checks both fabrics share.

    Thread-safety: every public method of a fabric holds ``lock``; this class assumes it.
    """

    def __init__(self, label: str, peer: PeerInfo, staging_bytes: int, max_inflight: int) -> None:
        self.label = label
        self.peer = peer
        self.lock = threading.RLock()
        self.entries: dict[int, Entry] = {}
        # Handles key the peer's regions too: a random base keeps a new producer's
        # handles apart from those a crashed predecessor left on the same tier.
        self.next_handle = (secrets.randbits(40) << 20) + 1
        self.arena = RegionAllocator(peer.data_offset, peer.arena_bytes - peer.data_offset)
        self.staging = RegionAllocator(0, staging_bytes)
        self.max_inflight = max_inflight
        self.down_reason = ""
        # Released arena regions the peer may still be reading: (ticket, offset,
        # length), freed once the peer's progress counter reaches the ticket.
        self.pending_free: list[tuple[int, int, int]] = []

    def in_flight(self) -> int:
        return sum(1 for e in self.entries.values() if e.state == "in_flight")

    def stored_bytes(self) -> int:
        return sum(e.length for e in self.entries.values() if e.state == "committed")

    def check_up(self) -> None:
        if self.down_reason:
            raise FabricUnavailable(f"{self.label}: the remote tier is down: {self.down_reason}")

    def defer_free(self, ticket: int, offset: int, length: int) -> None:
        self.pending_free.append((ticket, offset, length))

    def reclaim(self, progress: int) -> None:
        """Free the released regions whose release the peer has processed (ticket <= progress)."""
        keep = []
        for ticket, offset, length in self.pending_free:
            if ticket <= progress:
                self.arena.free(offset, length)
            else:
                keep.append((ticket, offset, length))
        self.pending_free = keep

    def reserve(self, length: int, *, need_staging: bool, peer_progress=None) -> tuple[int, int | None]:
        """Arena (and staging) regions for a push of length bytes, or FabricBusy.

        peer_progress: reads the peer's progress counter when the arena looks
        full and released regions wait for the peer (one small READ).
        """
        if length <= 0:
            raise ValueError(f"{self.label}: push of an empty payload")
        if self.in_flight() >= self.max_inflight:
            raise FabricBusy(f"{self.label}: {self.max_inflight} transfers already in flight")
        remote = self.arena.allocate(length)
        if remote is None and self.pending_free and peer_progress is not None:
            self.reclaim(peer_progress())
            remote = self.arena.allocate(length)
        if remote is None:
            raise FabricBusy(f"{self.label}: the remote arena has no free {length}-byte region "
                             f"({self.arena.used} of {self.arena.capacity} bytes in use)")
        staging = None
        if need_staging:
            staging = self.staging.allocate(length)
            if staging is None:
                self.arena.free(remote, length)
                raise FabricBusy(f"{self.label}: the staging buffer has no free {length}-byte region "
                                 f"({self.staging.used} of {self.staging.capacity} bytes in use)")
        return remote, staging

    def new_handle(self) -> int:
        handle = self.next_handle
        self.next_handle += 1
        return handle

    def health(self, up: bool, detail: str) -> dict:
        return {"up": up, "in_flight": self.in_flight(), "stored_bytes": self.stored_bytes(),
                "capacity_bytes": self.arena.capacity, "detail": detail}
