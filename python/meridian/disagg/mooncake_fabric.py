"""MooncakeFabric: the fabric protocol (meridian.disagg) over Mooncake's Transfer Engine.

The producer (this engine) writes MRDN-framed payloads into a remote KV tier's
registered DRAM arena (``python -m meridian.disagg.remote_tier --fabric
mooncake``) with ``TransferEngine.transfer_sync_write`` over TCP, in
P2PHANDSHAKE mode (no metadata server; the peer's session id comes from
peer.json). Mooncake has no completion notification, so after the frames land
push() writes a commit record (sequence, handle, offset, length) into the
commit ring in the peer's arena, which the peer polls: the handle is committed
when that second write returns 0. Both writes are synchronous, so push()
returns a committed handle; Mooncake returns -1 at once when the peer is gone.
Mooncake's synchronous calls carry no caller-set timeout: their bound is its
TCP transport's.

Thread-safety: every public method takes the fabric's lock; one MooncakeFabric
may be shared by threads, but calls are serialised. While the peer is down a
daemon thread re-probes it (the engine-loop calls then fail fast). Ownership: push() copies
the payload into the fabric's registered staging buffer; pull() returns a new
bytes.
"""
from __future__ import annotations

import os
import pathlib
import threading
import time

import numpy as np

from meridian.disagg._fabric_common import (
    ALIGN,
    COMMIT_RECORD,
    COMMIT_RING_OFFSET,
    COMMIT_SLOTS,
    CONSUMED_SEQ_OFFSET,
    CONTROL_BYTES,
    RECORD_COMMIT,
    RECORD_RELEASE,
    Entry,
    FabricBookkeeping,
    claim_arena,
    pack_record,
    release_arena,
    wait_for_peer,
)
from meridian.disagg.errors import FabricBusy, FabricTransferFailed, FabricUnavailable

__all__ = ["MooncakeFabric", "import_mooncake"]

# Local staging layout: [0, 64) probe landing spot, [64, 128) the outgoing
# commit record, [128, 192) the background re-probe's landing spot, then the
# payload staging regions.
_RECORD_SPOT = CONTROL_BYTES
_REPROBE_SPOT = _RECORD_SPOT + ALIGN
_STAGING_START = _REPROBE_SPOT + CONTROL_BYTES
# While the peer is down, a background thread re-probes it this often: a
# Mooncake READ to a dead peer waits out its reconnect backoff (~0.4-1 s here),
# which must not stall the engine loop.
_REPROBE_INTERVAL_S = 1.0


def import_mooncake():
    """The TransferEngine class, or FabricUnavailable naming the install route."""
    try:
        from mooncake.engine import TransferEngine  # noqa: PLC0415 - optional dependency
    except ImportError as exc:
        raise FabricUnavailable(
            "the Mooncake Transfer Engine is not importable: `make setup` installs it "
            "(requirements-fabrics-nodeps.txt: mooncake-transfer-engine-non-cuda==0.3.13.post1, "
            f"with Debian's libibverbs1 from scripts/apt-packages.txt): {exc}") from exc
    return TransferEngine


class MooncakeFabric:
    """A producer-side Mooncake fabric to one remote tier whose files are in ``directory``."""

    def __init__(self, directory: str | os.PathLike, *, staging_bytes: int = 64 << 20,
                 max_inflight: int = 64, connect_timeout_s: float = 15.0) -> None:
        engine_class = import_mooncake()
        self._dir = pathlib.Path(directory)
        peer = wait_for_peer(self._dir, "mooncake", connect_timeout_s)
        if not peer.session:
            raise FabricUnavailable(f"mooncake: {self._dir / 'peer.json'} has no session id")
        self._session = peer.session
        self._engine = engine_class()
        if self._engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") != 0:
            raise FabricUnavailable("mooncake: TransferEngine.initialize('127.0.0.1', P2PHANDSHAKE, tcp) failed")
        self._staging = np.zeros(_STAGING_START + staging_bytes, dtype=np.uint8)
        self._staging_addr = self._staging.ctypes.data
        if self._engine.register_memory(self._staging_addr, self._staging.nbytes) != 0:
            raise FabricUnavailable("mooncake: register_memory failed for the staging buffer")
        self._book = FabricBookkeeping("mooncake", peer, staging_bytes, max_inflight)
        self._reprobe_thread: threading.Thread | None = None
        self._closed = False
        self._owner = f"meridian-producer-{os.getpid()}-{id(self):x}"
        self._lock_file = claim_arena(self._dir, self._owner, "mooncake")
        # Continue the commit ring where the previous producer of this tier left it.
        try:
            self._peer_consumed = self._read_consumed()
        except FabricUnavailable:
            self._closed = True  # stops the re-probe thread _mark_down started
            release_arena(self._lock_file, self._owner)
            raise
        self._next_seq = self._peer_consumed + 1

    # -- the fabric protocol -------------------------------------------------

    def label(self) -> str:
        return "mooncake"

    def push(self, payload) -> int:
        """Write payload into the peer's arena, then its commit record; return the committed handle."""
        view = memoryview(payload).cast("B")
        book = self._book
        with book.lock:
            self._check_open()
            self._check_up()
            self._ensure_ring_slot()
            length = len(view)
            remote, staging = book.reserve(length, need_staging=True, peer_progress=self._read_consumed)
            local = _STAGING_START + staging
            try:
                self._staging[local:local + length] = np.frombuffer(view, dtype=np.uint8)
                self._write(local, remote, length, "frames")
                handle = book.new_handle()
                self._write_record(handle, remote, length, RECORD_COMMIT)
            except BaseException:
                book.arena.free(remote, length)
                raise
            finally:
                book.staging.free(staging, length)
            book.entries[handle] = Entry(remote, length, "committed", time.monotonic())
            return handle

    def poll(self, handle: int) -> str:
        with self._book.lock:
            entry = self._book.entries.get(handle)
            return "unknown" if entry is None else entry.state

    def pull(self, handle: int) -> bytes:
        book = self._book
        with book.lock:
            self._check_open()
            entry = book.entries.get(handle)
            if entry is None:
                raise KeyError(f"mooncake: unknown or released handle {handle}")
            self._check_up()
            staging = book.staging.allocate(entry.length)
            if staging is None:
                raise FabricBusy(f"mooncake: the staging buffer has no free {entry.length}-byte region for a pull")
            local = _STAGING_START + staging
            try:
                rc = self._engine.transfer_sync_read(self._session, self._staging_addr + local,
                                                     book.peer.arena_addr + entry.remote_offset, entry.length)
                if rc != 0:
                    if not self._probe():
                        raise FabricUnavailable(f"mooncake: READ of handle {handle} failed (rc {rc}): "
                                                f"{book.down_reason}")
                    raise FabricTransferFailed(f"mooncake: READ of handle {handle} "
                                               f"({entry.length} bytes at arena offset {entry.remote_offset}) "
                                               f"failed (rc {rc})")
                return self._staging[local:local + entry.length].tobytes()
            finally:
                book.staging.free(staging, entry.length)

    def release(self, handle: int) -> None:
        """Free the payload's arena region and tell the peer; releasing twice is a no-op."""
        book = self._book
        with book.lock:
            entry = book.entries.pop(handle, None)
            if entry is None or self._closed:
                return
            if book.down_reason:
                book.arena.free(entry.remote_offset, entry.length)
                return
            try:
                self._ensure_ring_slot()
                self._write_record(handle, entry.remote_offset, entry.length, RECORD_RELEASE)
            except (FabricBusy, FabricUnavailable, FabricTransferFailed):
                pass  # the peer's view keeps a stale region; the ticket below still orders the reuse
            # Reused once the peer has consumed the ring up to here (past this handle's commit).
            book.defer_free(self._next_seq - 1, entry.remote_offset, entry.length)

    def health(self) -> dict:
        book = self._book
        with book.lock:
            if self._closed:
                return book.health(False, "mooncake: closed")
            up = not book.down_reason and self._probe()
            if up:  # the probe just read the peer's consumed sequence
                book.reclaim(int(self._staging[CONSUMED_SEQ_OFFSET:CONSUMED_SEQ_OFFSET + 8].view(np.uint64)[0]))
            detail = (f"mooncake to {self._session} (pid {book.peer.pid}), arena {book.arena.capacity} bytes"
                      if up else f"mooncake: down: {book.down_reason}")
            return book.health(up, detail)

    def close(self) -> None:
        """Release every handle and unregister memory (idempotent)."""
        book = self._book
        with book.lock:
            if self._closed:
                return
            for handle in list(book.entries):
                self.release(handle)
            # Let the peer drain the ring (bounded), so a next producer continues after our records.
            deadline = time.monotonic() + 2.0
            while not book.down_reason and time.monotonic() < deadline:
                try:
                    if self._read_consumed() >= self._next_seq - 1:
                        break
                except FabricUnavailable:
                    break
                time.sleep(0.001)
            self._closed = True
            if self._reprobe_thread is not None:
                self._reprobe_thread.join(timeout=_REPROBE_INTERVAL_S + 5.0)
            try:
                self._engine.unregister_memory(self._staging_addr)
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
            release_arena(self._lock_file, self._owner)

    def __enter__(self) -> MooncakeFabric:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- internals -------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise FabricUnavailable("mooncake: the fabric is closed")

    def _check_up(self) -> None:
        self._book.check_up()  # the background re-probe clears down_reason

    def _write(self, local: int, remote_offset: int, length: int, what: str) -> None:
        rc = self._engine.transfer_sync_write(self._session, self._staging_addr + local,
                                              self._book.peer.arena_addr + remote_offset, length)
        if rc != 0:
            reason = f"WRITE of {what} ({length} bytes at arena offset {remote_offset}) failed (rc {rc})"
            if self._probe():
                peer = self._book.peer
                raise FabricTransferFailed(
                    f"mooncake: {reason}; the peer answers, so the range is likely outside its registered "
                    f"arena [0x{peer.arena_addr:x}, +{peer.arena_bytes}) (its log names the rejected address)")
            raise FabricUnavailable(f"mooncake: {reason}; {self._book.down_reason}")

    def _ensure_ring_slot(self) -> None:
        """FabricBusy when the peer has not yet consumed a ring's worth of commit records."""
        if self._next_seq - self._peer_consumed <= COMMIT_SLOTS:
            return
        consumed = self._peer_consumed = self._read_consumed()
        if self._next_seq - consumed > COMMIT_SLOTS:
            raise FabricBusy(f"mooncake: the peer's commit ring is full ({COMMIT_SLOTS} records not yet consumed)")

    def _read_consumed(self) -> int:
        """The last commit-ring sequence the peer has processed (FabricUnavailable if unreachable)."""
        rc = self._engine.transfer_sync_read(self._session, self._staging_addr,
                                             self._book.peer.arena_addr, CONTROL_BYTES)
        if rc != 0:
            self._mark_down(f"reading the peer's consumed sequence from {self._session} failed (rc {rc})")
            self._book.check_up()
        return int(self._staging[CONSUMED_SEQ_OFFSET:CONSUMED_SEQ_OFFSET + 8].view(np.uint64)[0])

    def _write_record(self, handle: int, offset: int, length: int, kind: int) -> None:
        seq = self._next_seq
        self._staging[_RECORD_SPOT:_RECORD_SPOT + COMMIT_RECORD.size] = np.frombuffer(
            pack_record(seq, handle, offset, length, kind), dtype=np.uint8)
        slot = COMMIT_RING_OFFSET + (seq - 1) % COMMIT_SLOTS * COMMIT_RECORD.size
        self._write(_RECORD_SPOT, slot, COMMIT_RECORD.size, f"commit record {seq}")
        self._next_seq += 1

    def _mark_down(self, reason: str) -> None:
        """Record the peer as down and start re-probing it in the background."""
        self._book.down_reason = reason
        if self._reprobe_thread is None or not self._reprobe_thread.is_alive():
            self._reprobe_thread = threading.Thread(target=self._reprobe, name="mooncake-reprobe", daemon=True)
            self._reprobe_thread.start()

    def _reprobe(self) -> None:
        # Owns the engine while the peer is down: the engine-loop paths raise
        # FabricUnavailable without transferring until down_reason clears.
        while not self._closed:
            time.sleep(_REPROBE_INTERVAL_S)
            if self._closed:
                return
            rc = self._engine.transfer_sync_read(self._session, self._staging_addr + _REPROBE_SPOT,
                                                 self._book.peer.arena_addr, CONTROL_BYTES)
            if rc == 0:
                # A plain assignment (atomic under the GIL), not the lock: close()
                # holds the lock while it joins this thread.
                self._book.down_reason = ""
                return

    def _probe(self) -> bool:
        """A small READ of the peer's control block: the peer is up if it succeeds."""
        rc = self._engine.transfer_sync_read(self._session, self._staging_addr,
                                             self._book.peer.arena_addr, CONTROL_BYTES)
        if rc == 0:
            self._book.down_reason = ""
            return True
        self._mark_down(f"liveness probe READ to {self._session} failed (rc {rc})")
        return False
