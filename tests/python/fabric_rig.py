"""Two-process fabric rig: a remote tier (``python -m meridian.disagg.remote_tier``)
in a child process, the producer fabric (NixlFabric / MooncakeFabric) in the test
process, metadata through files in a temp directory, and the scenarios both
fabrics' tests run (test_fabric_nixl.py, test_fabric_mooncake.py).

Every wait has a deadline: the peer exits by itself after PEER_DEADLINE_S, and
the rig kills it on the way out.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import pathlib
import shutil
import signal
import struct
import subprocess
import sys
import time

import blake3
import pytest

# NIXL over loopback TCP only (without UCX_NET_DEVICES=lo, tcp also uses the
# external interface). UCX reads these when an agent is created; set for this
# process and passed to the peer.
UCX_LOOPBACK = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo"}
os.environ.update(UCX_LOOPBACK)

PEER_DEADLINE_S = 90.0
PEER_START_TIMEOUT_S = 30.0
WAIT_TIMEOUT_S = 15.0
BLOCK_BYTES = 16 * 1024
HEADER = struct.Struct("<4sIIB3s16s")

_FABRIC_MODULES = {"nixl": ("meridian.disagg.nixl_fabric", "NixlFabric", "nixl_cu12"),
                   "mooncake": ("meridian.disagg.mooncake_fabric", "MooncakeFabric", "mooncake.engine")}


def fabric_class(fabric: str):
    """The fabric class; FAILS (never skips) when its package is missing: `make test` installs it."""
    module_name, class_name, dependency = _FABRIC_MODULES[fabric]
    try:
        importlib.import_module(dependency)
    except ImportError as exc:
        pytest.fail(f"{dependency} is not importable ({exc}): `make setup` installs the fabrics "
                    "(requirements-fabrics-nodeps.txt, and libibverbs1 from scripts/apt-packages.txt)")
    return getattr(importlib.import_module(module_name), class_name)


def frame(body: bytes, tier: int = 0) -> bytes:
    """An MRDN v1 frame, built here independently of meridian's codec (ADR-0006)."""
    return HEADER.pack(b"MRDN", 1, len(body), tier, b"\0\0\0", blake3.blake3(body).digest()[:16]) + body


def batch(rng, blocks: int, tier: int = 0) -> bytes:
    return b"".join(frame(rng.randbytes(BLOCK_BYTES), tier) for _ in range(blocks))


class RemoteTier:
    """The peer process and the files it writes into directory."""

    def __init__(self, fabric: str, directory: pathlib.Path, arena_bytes: int) -> None:
        import meridian  # noqa: PLC0415 - the package under test

        self.fabric = fabric
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        package_root = str(pathlib.Path(meridian.__file__).absolute().parents[1])
        env = dict(os.environ, **UCX_LOOPBACK)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        self.log_path = directory / "remote-tier.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "meridian.disagg.remote_tier", "--fabric", fabric, "--dir",
                 str(directory), "--arena-bytes", str(arena_bytes), "--deadline-s", str(PEER_DEADLINE_S)],
                env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + PEER_START_TIMEOUT_S
        while not (directory / "peer.json").exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"the {fabric} remote tier did not start (exit {self.proc.returncode}):\n{self.log()}")
            time.sleep(0.02)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def status(self) -> dict:
        path = self.dir / "status.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def wait_status(self, predicate, what: str) -> dict:
        deadline = time.monotonic() + WAIT_TIMEOUT_S
        while True:
            status = self.status()
            if status and predicate(status):
                return status
            if time.monotonic() > deadline:
                pytest.fail(f"the {self.fabric} remote tier never reported {what}; last status "
                            f"{json.dumps({k: v for k, v in status.items() if k != 'regions'})}\n{self.log()}")
            time.sleep(0.02)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, then check the peer exited cleanly (unless a test killed it)."""
        if self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"the {self.fabric} remote tier ignored SIGTERM for 10 s:\n{self.log()}")
        if code != 0:
            pytest.fail(f"the {self.fabric} remote tier exited {code} on SIGTERM:\n{self.log()}")


def wait_committed(fabric, handles) -> None:
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while True:
        states = [fabric.poll(h) for h in handles]
        if all(s != "in_flight" for s in states):
            assert states == ["committed"] * len(handles), states
            return
        if time.monotonic() > deadline:
            pytest.fail(f"pushes still in flight after {WAIT_TIMEOUT_S} s: {states}")
        time.sleep(0.001)


def push_when_free(fabric, payload, busy_error, what: str, pause_s: float) -> int:
    """Push, retrying while the fabric answers busy (a released region is reused only once the
    peer has processed its release); fails the test if it stays busy past the deadline."""
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while True:
        try:
            return fabric.push(payload)
        except busy_error:
            assert time.monotonic() < deadline, what
            time.sleep(pause_s)


# -- scenarios (fabric_factory(directory, **kwargs) -> a fabric) --------------------------


def every_byte_round_trip(fabric, peer: RemoteTier, rng) -> None:
    """Batches of real MRDN frames: every byte back by pull and in the peer's view."""
    base = peer.status().get("committed_batches", 0)
    payloads = [batch(rng, blocks, tier=i % 3) for i, blocks in enumerate([1, 4, 4, 8, 2, 4, 1, 16])]
    handles = [fabric.push(p) for p in payloads]
    assert len(set(handles)) == len(handles)
    wait_committed(fabric, handles)
    for handle, payload in zip(handles, payloads):
        assert fabric.pull(handle) == payload
    status = peer.wait_status(lambda s: s["committed_batches"] >= base + len(payloads), "every commit")
    assert status["corrupt_batches"] == 0, status["errors"]
    for handle, payload in zip(handles, payloads):
        region = status["regions"][str(handle)]
        assert region["length"] == len(payload)
        assert region["frames"] == len(payload) // (HEADER.size + BLOCK_BYTES)
        assert region["sha256"] == hashlib.sha256(payload).hexdigest()
    health = fabric.health()
    assert health["up"] and health["in_flight"] == 0
    assert health["stored_bytes"] >= sum(map(len, payloads))
    for handle in handles:
        fabric.release(handle)
        fabric.release(handle)  # idempotent
        assert fabric.poll(handle) == "unknown"
        with pytest.raises(KeyError, match="unknown or released handle"):
            fabric.pull(handle)
    peer.wait_status(lambda s: all(str(h) not in s["regions"] for h in handles), "the releases")


def corrupt_payloads_counted(fabric, peer: RemoteTier, rng) -> None:
    """Bytes that are not valid MRDN reach the peer, which counts them corrupt."""
    good = batch(rng, 2)
    flipped = bytearray(batch(rng, 2))
    flipped[HEADER.size + 100] ^= 0x01  # a body byte of the first frame: checksum mismatch
    before = peer.status().get("corrupt_batches", 0)
    handles = [fabric.push(b"definitely not an MRDN frame" * 64), fabric.push(bytes(flipped)), fabric.push(good)]
    wait_committed(fabric, handles)
    status = peer.wait_status(lambda s: s["corrupt_batches"] >= before + 2 and str(handles[2]) in s["regions"],
                              "two corrupt batches and the good one")
    assert status["corrupt_batches"] == before + 2
    assert str(handles[0]) not in status["regions"] and str(handles[1]) not in status["regions"]
    assert any(f"handle {handles[1]}" in e for e in status["errors"]), status["errors"]
    assert fabric.pull(handles[1]) == bytes(flipped)  # the fabric moved it faithfully
    for handle in handles:
        fabric.release(handle)


def back_pressure(fabric, peer: RemoteTier, rng, busy_error) -> None:
    """Fill the arena: FabricBusy, nothing lost; a release makes room again."""
    kept: dict[int, bytes] = {}
    with pytest.raises(busy_error, match="arena"):
        for _ in range(10_000):  # bounded: the arena holds far fewer
            payload = batch(rng, 1)
            handle = fabric.push(payload)
            kept[handle] = payload
            wait_committed(fabric, [handle])
    assert kept, "the arena took no push at all"
    for handle, payload in kept.items():
        assert fabric.pull(handle) == payload
    first = next(iter(kept))
    fabric.release(first)
    # The region comes back once the peer has processed the release (it may
    # still be validating it): busy until then, never longer than the deadline.
    payload = batch(rng, 1)
    handle = push_when_free(fabric, payload, busy_error, "a released region never came back", 0.01)
    wait_committed(fabric, [handle])
    assert fabric.pull(handle) == payload
    peer.wait_status(lambda s: s["committed_batches"] == len(kept) + 1 and s["corrupt_batches"] == 0,
                     "every push committed")
    for h in list(kept) + [handle]:
        fabric.release(h)
    # Churn: release and push again at once, many times, in a small arena. A region
    # is reused only after the peer has processed its release, so the peer never
    # validates a region being overwritten by the next payload: nothing corrupt.
    churn = 200
    for i in range(churn):
        payload = batch(rng, 1 + i % 4)
        handle = push_when_free(fabric, payload, busy_error, "released regions never came back", 0.001)
        wait_committed(fabric, [handle])
        fabric.release(handle)
    status = peer.wait_status(lambda s: s["committed_batches"] + s["corrupt_batches"] >= len(kept) + 1 + churn,
                              "every churned push")
    assert status["corrupt_batches"] == 0, status["errors"]


def unregistered_range(fabric_factory, peer: RemoteTier, tmp_path: pathlib.Path, failed_error, match: str) -> None:
    """A peer file that claims a bigger arena than registered: a transfer past the end fails cleanly."""
    lying = tmp_path / "lying-peer"
    lying.mkdir()
    for name in os.listdir(peer.dir):
        if name.endswith((".meta", ".json")) and not name.startswith("nixl-producer-"):
            shutil.copy(peer.dir / name, lying / name)
    info = json.loads((lying / "peer.json").read_text())
    real_bytes = info["arena_bytes"]
    info["arena_bytes"] = real_bytes * 4
    (lying / "peer.json").write_text(json.dumps(info))
    fabric = fabric_factory(lying)
    try:
        before = peer.status().get("committed_batches", 0)
        payload = frame(b"\x5a" * (real_bytes + BLOCK_BYTES))  # fits only the claimed arena
        with pytest.raises(failed_error, match=match):
            fabric.push(payload)
        assert fabric.health()["in_flight"] == 0
        small = frame(b"\xa5" * BLOCK_BYTES)  # inside the registered arena: still works
        handle = fabric.push(small)
        wait_committed(fabric, [handle])
        assert fabric.pull(handle) == small
        peer.wait_status(lambda s: s["committed_batches"] == before + 1, "only the in-range push")
    finally:
        fabric.close()


def dead_peer(fabric, peer: RemoteTier, rng, unavailable_error, transfer_failed_error) -> None:
    """SIGKILL the peer mid-run: push/poll/pull report unavailable/failed, health says down."""
    committed = [fabric.push(batch(rng, 2)) for _ in range(3)]
    wait_committed(fabric, committed)
    last = fabric.push(batch(rng, 4))
    peer.kill()
    assert fabric.poll(last) in ("in_flight", "committed", "failed")
    with pytest.raises(unavailable_error):
        for _ in range(50):  # the first push after the kill may still be accepted by the socket
            fabric.push(batch(rng, 1))
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while fabric.poll(last) == "in_flight":
        assert time.monotonic() < deadline, "a push stayed in flight after its peer died"
        time.sleep(0.01)
    for handle in committed:
        with pytest.raises((unavailable_error, transfer_failed_error)):
            fabric.pull(handle)
    health = fabric.health()
    assert health["up"] is False, health
    assert "down" in health["detail"]
    for handle in committed + [last]:
        fabric.release(handle)
        assert fabric.poll(handle) == "unknown"
