"""NixlFabric: the fabric protocol (meridian.disagg) over NVIDIA NIXL's Python API.

The producer (this engine) writes MRDN-framed payloads into a remote KV tier's
registered DRAM arena (``python -m meridian.disagg.remote_tier --fabric nixl``)
with NIXL WRITEs over UCX. A WRITE carries a notification
``commit:<handle>:<offset>:<length>``: the peer sees it once the bytes have
landed (and validates the frames); the producer sees the transfer state turn
"DONE" — that is the commit. Metadata comes through files (see
_fabric_common), never NIXL's socket listener, which binds 0.0.0.0.

Thread-safety: every public method takes the fabric's lock; one NixlFabric may
be shared by threads, but calls are serialised. Ownership: push() copies the
payload into the fabric's registered staging buffer; pull() returns a new bytes.
"""
from __future__ import annotations

import importlib
import os
import pathlib
import time

import numpy as np

from meridian.disagg._fabric_common import (
    CONTROL_BYTES,
    NIXL_PEER_META,
    RELEASES_SEEN_OFFSET,
    NIXL_PRODUCER_META_PREFIX,
    Entry,
    FabricBookkeeping,
    claim_arena,
    release_arena,
    wait_for_peer,
    write_atomically,
)
from meridian.disagg.errors import FabricBusy, FabricTransferFailed, FabricUnavailable

__all__ = ["NixlFabric", "import_nixl"]

_INSTALL_HINT = ("the NIXL Python package is not installed: `make setup` installs it "
                 "(requirements-fabrics-nodeps.txt: nixl==1.5.1 nixl-cu12==1.5.1)")


def import_nixl():
    """(nixl._api module, nixl._bindings module), or FabricUnavailable naming the install route.

    The CUDA-12 build is imported directly: the `nixl` meta package picks a
    backend from torch's CUDA version (13 for the torch vLLM brings), whose
    wheel is not installed; no CUDA library is needed for DRAM transfers.
    """
    _skip_ib_modules_without_rdma()
    for package in ("nixl_cu12", "nixl_cu13", "nixl"):
        try:
            return (importlib.import_module(f"{package}._api"),
                    importlib.import_module(f"{package}._bindings"))
        except ImportError:
            continue
    raise FabricUnavailable(_INSTALL_HINT)


def _skip_ib_modules_without_rdma() -> None:
    """Keep UCX from loading its InfiniBand modules on a machine with no RDMA device.

    They are useless there, and the libnl-route the NIXL 1.5.1 wheel bundles for
    them crashes the process in its ELF destructor at exit (SIGSEGV in
    rtnl_tc_unregister, after Python has finished). An operator's UCX_MODULES wins.
    """
    rdma = pathlib.Path("/sys/class/infiniband")
    if "UCX_MODULES" not in os.environ and not (rdma.is_dir() and any(rdma.iterdir())):
        os.environ["UCX_MODULES"] = "^ib*"


class NixlFabric:
    """A producer-side NIXL fabric to one remote tier whose files are in ``directory``.

    staging_bytes: the registered local buffer pushes and pulls go through;
    max_inflight: pushes not yet committed before push() says FabricBusy;
    timeout_s: the longest any transfer may take before it counts as failed.
    """

    def __init__(self, directory: str | os.PathLike, *, name: str | None = None,
                 staging_bytes: int = 64 << 20, max_inflight: int = 64, timeout_s: float = 2.0,
                 connect_timeout_s: float = 15.0) -> None:
        api, bindings = import_nixl()
        self._not_found_error = getattr(bindings, "nixlNotFoundError", LookupError)
        self._dir = pathlib.Path(directory)
        self._timeout_s = timeout_s
        peer = wait_for_peer(self._dir, "nixl", connect_timeout_s)
        meta_path = self._dir / NIXL_PEER_META
        try:
            peer_meta = meta_path.read_bytes()
        except OSError as exc:
            raise FabricUnavailable(f"nixl: cannot read the remote tier's metadata {meta_path}: {exc}") from exc
        self._name = name or f"meridian-producer-{os.getpid()}-{id(self):x}"
        self._agent = api.nixl_agent(self._name, api.nixl_agent_config(backends=["UCX"]))
        # The first CONTROL_BYTES of staging are the liveness probe's landing spot.
        self._staging = np.zeros(staging_bytes + CONTROL_BYTES, dtype=np.uint8)
        self._staging_addr = self._staging.ctypes.data
        self._reg = self._agent.register_memory([(self._staging_addr, self._staging.nbytes, 0, "")], "DRAM")
        try:
            remote = self._agent.add_remote_agent(peer_meta)
        except Exception as exc:
            raise FabricUnavailable(f"nixl: {meta_path} is not valid NIXL agent metadata: {exc}") from exc
        self._peer_name = remote.decode() if isinstance(remote, bytes) else str(remote)
        if peer.agent and self._peer_name != peer.agent:
            raise FabricUnavailable(f"nixl: {meta_path} describes agent {self._peer_name!r}, "
                                    f"but peer.json names {peer.agent!r}")
        self._lock_file = claim_arena(self._dir, self._name, "nixl")
        # The peer loads our metadata from this file (it knows its producer's agent).
        self._meta_file = self._dir / f"{NIXL_PRODUCER_META_PREFIX}{self._name}.meta"
        write_atomically(self._meta_file, self._agent.get_agent_metadata())
        self._book = FabricBookkeeping("nixl", peer, staging_bytes, max_inflight)
        self._last_probe = 0.0
        self._closed = False
        # Release notifications are counted from where the tier's previous producer left off.
        if not self._probe():
            release_arena(self._lock_file, self._name)
            raise FabricUnavailable(f"nixl: the remote tier (agent {self._peer_name}) does not answer: "
                                    f"{self._book.down_reason}")
        self._releases_sent = self._releases_seen()

    # -- the fabric protocol -------------------------------------------------

    def label(self) -> str:
        return "nixl"

    def push(self, payload) -> int:
        """Start a WRITE of payload into the peer's arena; return its handle at once."""
        view = memoryview(payload).cast("B")
        book = self._book
        with book.lock:
            self._check_open()
            self._check_up()
            length = len(view)
            remote, staging = book.reserve(length, need_staging=True, peer_progress=self._peer_progress)
            local_start = CONTROL_BYTES + staging
            self._staging[local_start:local_start + length] = np.frombuffer(view, dtype=np.uint8)
            handle = book.new_handle()
            try:
                xfer = self._start("WRITE", local_start, remote, length,
                                   f"commit:{handle}:{remote}:{length}".encode())
            except BaseException:
                book.arena.free(remote, length)
                book.staging.free(staging, length)
                raise
            book.entries[handle] = Entry(remote, length, "in_flight", time.monotonic(), xfer, staging)
            return handle

    def poll(self, handle: int) -> str:
        book = self._book
        with book.lock:
            entry = book.entries.get(handle)
            if entry is None:
                return "unknown"
            if entry.state == "in_flight":
                self._advance(entry)
            return entry.state

    def pull(self, handle: int) -> bytes:
        """READ a committed payload back from the peer's arena."""
        book = self._book
        with book.lock:
            self._check_open()
            entry = book.entries.get(handle)
            if entry is None:
                raise KeyError(f"nixl: unknown or released handle {handle}")
            deadline = entry.started + self._timeout_s
            while entry.state == "in_flight":
                self._advance(entry)
                if entry.state == "in_flight":
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.0002)
            if entry.state == "failed":
                raise FabricTransferFailed(f"nixl: handle {handle}: {entry.error}")
            self._check_up()
            staging = book.staging.allocate(entry.length)
            if staging is None:
                raise FabricBusy(f"nixl: the staging buffer has no free {entry.length}-byte region for a pull")
            local_start = CONTROL_BYTES + staging
            try:
                xfer = self._start("READ", local_start, entry.remote_offset, entry.length, b"")
                self._wait(xfer, f"READ of handle {handle}")
                data = self._staging[local_start:local_start + entry.length].tobytes()
            finally:
                book.staging.free(staging, entry.length)
            return data

    def release(self, handle: int) -> None:
        """Free the payload's arena region and tell the peer; releasing twice is a no-op."""
        book = self._book
        with book.lock:
            entry = book.entries.pop(handle, None)
            if entry is None or self._closed:
                return
            if entry.state == "in_flight":
                # A WRITE still in flight would land in a region we hand out again:
                # wait for it (bounded) before freeing.
                try:
                    self._wait(entry.xfer, f"WRITE of handle {handle}")
                except (FabricTransferFailed, FabricUnavailable):
                    pass
                entry.xfer = None
            self._drop_xfer(entry)
            if not book.down_reason:
                try:
                    self._agent.send_notif(self._peer_name, f"release:{handle}".encode())
                except Exception:  # noqa: BLE001 - a dead peer frees its arena anyway
                    pass
                else:
                    # Reused once the peer has processed this release (and so the commit before it).
                    self._releases_sent += 1
                    book.defer_free(self._releases_sent, entry.remote_offset, entry.length)
                    return
            book.arena.free(entry.remote_offset, entry.length)

    def health(self) -> dict:
        book = self._book
        with book.lock:
            if self._closed:
                return book.health(False, "nixl: closed")
            up = self._probe()
            if up:
                book.reclaim(self._releases_seen())  # the probe just read the peer's counter
            detail = (f"nixl to agent {self._peer_name} (pid {book.peer.pid}), arena "
                      f"{book.arena.capacity} bytes" if up else f"nixl: down: {book.down_reason}")
            return book.health(up, detail)

    def close(self) -> None:
        """Release every handle, deregister memory and forget the peer (idempotent)."""
        book = self._book
        with book.lock:
            if self._closed:
                return
            for handle in list(book.entries):
                self.release(handle)
            # Let the peer process our releases (bounded), so a next producer's count starts after them.
            deadline = time.monotonic() + 2.0
            while (not book.down_reason and time.monotonic() < deadline
                   and self._peer_progress() < self._releases_sent):
                time.sleep(0.001)
            self._closed = True
            for step in (lambda: self._agent.deregister_memory(self._reg),
                         lambda: self._agent.remove_remote_agent(self._peer_name),
                         lambda: self._meta_file.unlink(missing_ok=True),
                         lambda: release_arena(self._lock_file, self._name)):
                try:
                    step()
                except Exception:  # noqa: BLE001 - best effort on the way out
                    pass

    def __enter__(self) -> NixlFabric:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- internals -------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise FabricUnavailable("nixl: the fabric is closed")

    def _check_up(self) -> None:
        """FabricUnavailable while the peer is down (re-probed at most once a second)."""
        book = self._book
        if book.down_reason and time.monotonic() - self._last_probe >= 1.0:
            self._probe()
        book.check_up()

    def _start(self, op: str, local_start: int, remote_offset: int, length: int, notif: bytes):
        peer = self._book.peer
        remote_addr = peer.arena_addr + remote_offset
        local = self._agent.get_xfer_descs([(self._staging_addr + local_start, length, 0)], "DRAM")
        remote = self._agent.get_xfer_descs([(remote_addr, length, 0)], "DRAM")
        try:
            xfer = self._agent.initialize_xfer(op, local, remote, self._peer_name, notif)
        except self._not_found_error as exc:
            raise FabricTransferFailed(
                f"nixl: {op} of {length} bytes at remote 0x{remote_addr:x} (arena offset {remote_offset}): "
                f"the range is not registered by agent {self._peer_name} ({exc}); its arena is "
                f"[0x{peer.arena_addr:x}, +{peer.arena_bytes})") from exc
        except Exception as exc:  # noqa: BLE001 - NIXL raises its own exception types
            self._mark_down(f"{op} could not start: {type(exc).__name__}: {exc}")
            raise FabricUnavailable(f"nixl: {op} to agent {self._peer_name} could not start: {exc}") from exc
        try:
            state = self._agent.transfer(xfer)
        except Exception:  # noqa: BLE001 - an error status may surface as an exception
            state = "ERR"
        if state == "ERR":
            self._drop_handle(xfer)
            self._mark_down(f"{op} failed to post")
            raise FabricUnavailable(f"nixl: {op} to agent {self._peer_name} failed to post (peer down?)")
        return xfer

    def _state(self, xfer) -> str:
        try:
            return self._agent.check_xfer_state(xfer)
        except Exception:  # noqa: BLE001 - an error status may surface as an exception
            return "ERR"

    def _wait(self, xfer, what: str) -> None:
        deadline = time.monotonic() + self._timeout_s
        while True:
            state = self._state(xfer)
            if state == "DONE":
                self._drop_handle(xfer)
                return
            if state == "ERR":
                self._drop_handle(xfer)
                self._mark_down(f"{what} failed")
                raise FabricTransferFailed(f"nixl: {what} failed (transfer state ERR; peer down?)")
            if time.monotonic() >= deadline:
                self._drop_handle(xfer)
                raise FabricTransferFailed(f"nixl: {what} did not finish within {self._timeout_s:g} s")
            time.sleep(0.0002)

    def _advance(self, entry: Entry) -> None:
        """Move an in-flight push to committed or failed if its transfer finished or timed out."""
        state = self._state(entry.xfer)
        if state == "DONE":
            entry.state = "committed"
            self._drop_xfer(entry)
        elif state == "ERR":
            entry.state, entry.error = "failed", "the WRITE failed (transfer state ERR; peer down?)"
            self._mark_down(entry.error)
            self._drop_xfer(entry)
        elif time.monotonic() - entry.started > self._timeout_s:
            entry.state = "failed"
            entry.error = f"the WRITE did not commit within {self._timeout_s:g} s"
            self._drop_xfer(entry)

    def _drop_xfer(self, entry: Entry) -> None:
        """Release the entry's transfer handle and give its staging region back."""
        if entry.xfer is not None:
            self._drop_handle(entry.xfer)
            entry.xfer = None
        if entry.staging_offset is not None:
            self._book.staging.free(entry.staging_offset, entry.length)
            entry.staging_offset = None

    def _drop_handle(self, xfer) -> None:
        try:
            self._agent.release_xfer_handle(xfer)
        except Exception:  # noqa: BLE001 - an uncancellable transfer stays with NIXL
            pass

    def _mark_down(self, reason: str) -> None:
        self._book.down_reason = reason
        self._last_probe = time.monotonic()

    def _releases_seen(self) -> int:
        """How many release notifications the peer has processed (from the last probe's READ)."""
        counter = self._staging[RELEASES_SEEN_OFFSET:RELEASES_SEEN_OFFSET + 8].view(np.uint64)
        return int(counter[0])

    def _peer_progress(self) -> int:
        """The peer's release count, read fresh; 0 frees nothing when the peer does not answer."""
        return self._releases_seen() if self._probe() else 0

    def _probe(self) -> bool:
        """A small READ of the peer's control block: the peer is up if it completes."""
        book = self._book
        self._last_probe = time.monotonic()
        try:
            xfer = self._agent.initialize_xfer(
                "READ", self._agent.get_xfer_descs([(self._staging_addr, CONTROL_BYTES, 0)], "DRAM"),
                self._agent.get_xfer_descs([(book.peer.arena_addr, CONTROL_BYTES, 0)], "DRAM"),
                self._peer_name, b"")
            state = self._agent.transfer(xfer)
            deadline = time.monotonic() + min(self._timeout_s, 1.0)
            while state == "PROC" and time.monotonic() < deadline:
                time.sleep(0.0002)
                state = self._state(xfer)
            self._drop_handle(xfer)
        except Exception as exc:  # noqa: BLE001 - any failure to reach the peer means down
            book.down_reason = f"liveness probe failed: {type(exc).__name__}: {exc}"
            return False
        if state == "DONE":
            book.down_reason = ""
            return True
        book.down_reason = f"liveness probe READ ended in state {state}"
        return False
