"""The C++ KvOffloader from Python: with the C++ InProcessFabric, and with a
pure-Python dict-backed fabric reached through the PyFabric trampoline, whose
exceptions become counted fallbacks (never raised into the caller)."""
from __future__ import annotations

import pytest

from meridian._meridian import (
    BlockTier,
    HostBlockStore,
    InProcessFabric,
    IngestStatus,
    KvBlockManager,
    KvBlockManagerOptions,
    KvOffloader,
    KvOffloaderOptions,
    ReleaseKind,
    mrdn_decode_batch,
)
from meridian.disagg.errors import FabricBusy, FabricTransferFailed, FabricUnavailable

BLOCKS, BLOCK_BYTES = 16, 128


class DictFabric:
    """The fabric protocol over a dict; `fail` makes the next call of a method raise."""

    def __init__(self) -> None:
        self.payloads: dict[int, bytes] = {}
        self.next_handle = 1
        self.fail: dict[str, BaseException] = {}
        self.released: list[int] = []

    def _maybe_fail(self, method: str) -> None:
        error = self.fail.pop(method, None)
        if error is not None:
            raise error

    def push(self, payload):
        self._maybe_fail("push")
        handle = self.next_handle
        self.next_handle += 1
        self.payloads[handle] = bytes(payload)
        return handle

    def poll(self, handle):
        self._maybe_fail("poll")
        return "committed" if handle in self.payloads else "unknown"

    def pull(self, handle):
        self._maybe_fail("pull")
        return self.payloads[handle]  # KeyError when unknown

    def release(self, handle):
        self.released.append(handle)
        self.payloads.pop(handle, None)

    def label(self):
        return "nixl-synth"

    def health(self):
        return {"up": True, "in_flight": 0, "stored_bytes": sum(map(len, self.payloads.values())),
                "capacity_bytes": 1 << 20, "detail": "dict"}


def make(fabric, threshold=4, max_inflight=4):
    options = KvBlockManagerOptions()
    options.num_blocks = BLOCKS
    options.block_size_bytes = BLOCK_BYTES
    options.think_phase_memory_fraction = 0.5
    manager = KvBlockManager(options)
    store = HostBlockStore(BLOCKS, BLOCK_BYTES)
    offload = KvOffloaderOptions()
    offload.offload_threshold_blocks = threshold
    offload.max_inflight_batches = max_inflight
    return manager, store, KvOffloader(manager, store, fabric, offload)


def reasoning(manager, store, request, think=6):
    assert manager.allocate(request, BlockTier.OUTPUT_CRITICAL, 1).ok
    assert manager.allocate(request, BlockTier.THINK_ACTIVE, think).ok
    originals = []
    for i, block in enumerate(manager.blocks_of(request)):
        data = bytes((request * 31 + i * 7 + j) % 256 for j in range(BLOCK_BYTES))
        store.write_block(block, data)
        originals.append(data)
    manager.demote_think_blocks(request)
    return originals


@pytest.mark.parametrize("kind", ["in_process", "python_dict"])
def test_round_trip_restores_every_byte(kind):
    fabric = InProcessFabric() if kind == "in_process" else DictFabric()
    manager, store, offloader = make(fabric)
    originals = reasoning(manager, store, 1)
    start = offloader.on_exit_think(1)
    assert (start.batches_pushed, start.blocks_pushed) == (2, 6)  # 4 + a final 2
    assert offloader.poll().blocks_committed == 6
    assert [loc.kind for loc in offloader.block_locations(1)] == ["local"] + ["remote"] * 6
    for block in range(BLOCKS):
        if manager.is_free(block):
            store.write_block(block, b"\xee" * BLOCK_BYTES)
    result = offloader.ingest(1)
    assert result.status == IngestStatus.OK, result.detail
    locations = offloader.block_locations(1)
    assert [loc.kind for loc in locations] == ["local"] * 7
    assert [store.read_block(loc.block) for loc in locations] == originals
    assert [manager.tier_of(loc.block) for loc in locations[1:]] == [BlockTier.THINK_COMPLETE] * 6
    counters = offloader.counters
    assert counters.blocks_ingested == 6 and counters.blocks_offloaded == [6, 0, 0]
    assert counters.bytes_pushed == counters.bytes_pulled == 6 * (32 + BLOCK_BYTES)
    assert offloader.fabric_label == "nixl-synth"
    assert offloader.ingest(1).restored == []  # never twice
    assert manager.check_invariants() == ""


def test_python_fabric_payload_is_mrdn_frames_of_the_real_bytes():
    fabric = DictFabric()
    manager, store, offloader = make(fabric, threshold=8)
    originals = reasoning(manager, store, 1, think=3)
    offloader.on_exit_think(1)
    (payload,) = fabric.payloads.values()
    frames = mrdn_decode_batch(payload)
    assert [tier for tier, _ in frames] == [BlockTier.THINK_COMPLETE] * 3
    assert [body for _, body in frames] == originals[1:]


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (FabricBusy("arena full"), "busy"),
        (FabricUnavailable("peer gone"), "down"),
        (ConnectionRefusedError("refused"), "down"),
        (OSError("no route"), "down"),
        (RuntimeError("bug in the fabric"), "failed"),
        (ValueError("bad range"), "failed"),
    ],
)
def test_python_exceptions_in_push_become_counted_fallbacks(error, reason):
    fabric = DictFabric()
    manager, store, offloader = make(fabric, threshold=8)
    reasoning(manager, store, 1)
    fabric.fail["push"] = error
    start = offloader.on_exit_think(1)  # must not raise
    assert start.batches_fallen_back == 1 and start.blocks_fallen_back == 6
    fallbacks = offloader.counters.fallbacks
    assert fallbacks[reason] == 1 and sum(fallbacks.values()) == 1
    assert len(manager.blocks_of(1)) == 7  # everything stays local
    assert manager.check_invariants() == ""


def test_failed_poll_keeps_blocks_local_and_releases_the_handle():
    fabric = DictFabric()
    manager, store, offloader = make(fabric)
    reasoning(manager, store, 1, think=4)
    offloader.on_exit_think(1)
    fabric.fail["poll"] = FabricTransferFailed("peer died mid-transfer")
    progress = offloader.poll()
    assert progress.batches_failed == 1
    assert offloader.counters.fallbacks["failed"] == 1
    assert fabric.released == [1] and not fabric.payloads
    assert len(manager.blocks_of(1)) == 5
    assert manager.check_invariants() == ""


@pytest.mark.parametrize("error", [FabricUnavailable("down"), KeyError(1), FabricTransferFailed("x")])
def test_failed_pull_asks_for_recompute(error):
    fabric = DictFabric()
    manager, store, offloader = make(fabric)
    reasoning(manager, store, 1, think=4)
    offloader.on_exit_think(1)
    offloader.poll()
    fabric.fail["pull"] = error
    result = offloader.ingest(1)
    assert result.status == IngestStatus.PARTIAL
    assert result.recompute_positions == [1, 2, 3, 4]
    assert offloader.counters.pull_failures == 1 and offloader.counters.recompute_blocks == 4
    assert [loc.kind for loc in offloader.block_locations(1)] == ["local"]
    assert manager.check_invariants() == ""


def test_corrupt_payload_from_python_is_rejected_with_its_offset():
    fabric = DictFabric()
    manager, store, offloader = make(fabric)
    reasoning(manager, store, 1, think=4)
    offloader.on_exit_think(1)
    offloader.poll()
    (handle,) = fabric.payloads
    payload = bytearray(fabric.payloads[handle])
    payload[32 + 5] ^= 1  # a body byte of frame 0
    fabric.payloads[handle] = bytes(payload)
    result = offloader.ingest(1)
    assert result.status == IngestStatus.PARTIAL
    assert "checksum mismatch at byte 16" in result.detail
    assert offloader.counters.corrupt_payloads == 1
    assert manager.check_invariants() == ""


def test_release_in_flight_cancels_without_double_free():
    fabric = InProcessFabric(commit_after_polls=2)
    manager, store, offloader = make(fabric)
    reasoning(manager, store, 1, think=4)
    offloader.on_exit_think(1)
    offloader.on_release(1)
    manager.release(1, ReleaseKind.ABORT)
    assert manager.allocate(2, BlockTier.OUTPUT_CRITICAL, BLOCKS).ok
    offloader.poll()
    offloader.poll()
    assert offloader.counters.batches_cancelled == 1 and offloader.counters.batches_committed == 0
    assert fabric.entries == 0
    assert manager.check_invariants() == ""


def test_in_process_fabric_follows_the_python_protocol():
    fabric = InProcessFabric(capacity_bytes=100, max_entries=4, commit_after_polls=1)
    handle = fabric.push(b"x" * 60)
    assert fabric.poll(handle) == "committed"
    assert fabric.pull(handle) == b"x" * 60
    with pytest.raises(FabricBusy):
        fabric.push(memoryview(b"y" * 50))
    assert fabric.health()["stored_bytes"] == 60
    fabric.release(handle)
    fabric.release(handle)
    with pytest.raises(KeyError):
        fabric.pull(handle)
    assert fabric.poll(handle) == "unknown"
    fabric.set_down(True)
    with pytest.raises(FabricUnavailable):
        fabric.push(b"z")


def test_host_block_store_views_a_python_buffer():
    memory = bytearray(4 * 8)
    store = HostBlockStore(4, 8, memory)
    assert not store.owns_memory
    store.write_block(2, b"abcdefgh")
    assert memory[16:24] == b"abcdefgh"
    view = store.block_view(1)
    view[:] = 7
    assert memory[8:16] == b"\x07" * 8
    with pytest.raises(ValueError, match="holds 8 bytes"):
        store.write_block(0, b"short")
    with pytest.raises(IndexError):
        store.read_block(4)
    with pytest.raises(ValueError):
        HostBlockStore(5, 8, memory)  # too small
    with pytest.raises(TypeError):
        HostBlockStore(4, 8, b"read-only bytes" * 3)


def test_offloader_rejects_an_object_without_the_protocol():
    manager, store, _ = make(InProcessFabric())
    with pytest.raises(TypeError, match="pull"):
        KvOffloader(manager, store, object.__new__(type("Half", (), {"push": 1, "poll": 1})))


def test_offloader_counters_feed_the_disagg_metrics():
    from meridian._meridian import EngineMetrics, MetricRegistry

    fabric = DictFabric()
    manager, store, offloader = make(fabric, threshold=4, max_inflight=1)
    reasoning(manager, store, 1)
    offloader.on_exit_think(1)  # 4 pushed; the final 2 find the queue full
    registry = MetricRegistry()
    metrics = EngineMetrics(registry)
    metrics.sync_offload(offloader.counters, offloader.fabric_label)
    assert registry.value("meridian_disagg_offload_fallbacks_total", ["nixl-synth", "queue_full"]) == 1
    assert registry.value("meridian_disagg_offload_fallbacks_total", ["nixl-synth", "busy"]) == 0
    assert registry.value("meridian_disagg_inflight_batches", ["nixl-synth"]) == 1
    assert registry.value("meridian_disagg_transfer_bytes_total", ["nixl-synth", "push"]) == 4 * (32 + BLOCK_BYTES)
    with pytest.raises(ValueError, match="unknown fabric"):
        metrics.sync_offload(offloader.counters, "carrier-pigeon")
