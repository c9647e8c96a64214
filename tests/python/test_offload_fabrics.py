"""The C++ KvOffloader driving the real NIXL and Mooncake fabrics (Python objects,
through the PyFabric trampoline) to a remote tier in a second process: a
request's ThinkComplete blocks go out at ExitThink in offload_threshold_blocks
batches of MRDN frames and come back by ingest byte for byte; a peer that is
dead before the offload or dies after it never loses a block silently
(fallback kept local, or recompute positions). Bounded waits (fabric_rig.py)."""
from __future__ import annotations

import hashlib
import random
import time

import fabric_rig
import pytest

from meridian._meridian import (
    BlockTier,
    HostBlockStore,
    IngestStatus,
    KvBlockManager,
    KvBlockManagerOptions,
    KvOffloader,
    KvOffloaderOptions,
)

BLOCKS = 32
BLOCK_BYTES = fabric_rig.BLOCK_BYTES
PROMPT_BLOCKS, THINK_BLOCKS, THRESHOLD = 2, 10, 4
BATCHES = -(-THINK_BLOCKS // THRESHOLD)  # 4 + 4 + a final 2


class Rig:
    def __init__(self, fabric) -> None:
        options = KvBlockManagerOptions()
        options.num_blocks = BLOCKS
        options.block_size_bytes = BLOCK_BYTES
        options.think_phase_memory_fraction = 0.5
        self.manager = KvBlockManager(options)
        self.store = HostBlockStore(BLOCKS, BLOCK_BYTES)
        offload = KvOffloaderOptions()
        offload.offload_threshold_blocks = THRESHOLD
        offload.max_inflight_batches = 4
        offload.transfer_timeout_ms = 10_000
        self.offloader = KvOffloader(self.manager, self.store, fabric, offload)

    def reasoning_request(self, request: int, rng: random.Random) -> list[bytes]:
        """Prompt + reasoning blocks with random bytes, demoted at ExitThink; the think blocks' bytes."""
        assert self.manager.allocate(request, BlockTier.OUTPUT_CRITICAL, PROMPT_BLOCKS).ok
        think = self.manager.allocate(request, BlockTier.THINK_ACTIVE, THINK_BLOCKS)
        assert think.ok
        for block in self.manager.blocks_of(request):
            self.store.write_block(block, rng.randbytes(BLOCK_BYTES))
        originals = [self.store.read_block(b) for b in think.blocks]
        self.manager.demote_think_blocks(request)
        return originals

    def settle(self, batches: int) -> None:
        """poll() until `batches` batches committed (bounded)."""
        deadline = time.monotonic() + fabric_rig.WAIT_TIMEOUT_S
        while self.offloader.counters.batches_committed < batches:
            progress = self.offloader.poll()
            assert progress.batches_failed == 0
            assert time.monotonic() < deadline, "offloaded batches never committed"
            time.sleep(0.001)

    def clobber_free_blocks(self) -> None:
        """Overwrite every free slot, so restored bytes can only have come from the fabric."""
        for block in range(BLOCKS):
            if self.manager.is_free(block):
                self.store.write_block(block, b"\xee" * BLOCK_BYTES)


def _fabric(name: str, directory):
    return fabric_rig.fabric_class(name)(directory)


@pytest.mark.parametrize("name", ["nixl", "mooncake"])
def test_offload_at_exit_think_and_ingest_every_byte(name, tmp_path):
    peer = fabric_rig.RemoteTier(name, tmp_path / "peer", 8 << 20)
    try:
        with _fabric(name, peer.dir) as fabric:
            rig = Rig(fabric)
            assert rig.offloader.fabric_label == name
            originals = rig.reasoning_request(1, random.Random(11))

            start = rig.offloader.on_exit_think(1)
            assert (start.batches_pushed, start.blocks_pushed, start.all_pushed) == (BATCHES, THINK_BLOCKS, True)
            rig.settle(BATCHES)
            assert rig.manager.check_invariants() == ""
            locations = rig.offloader.block_locations(1)
            assert [loc.kind for loc in locations] == ["local"] * PROMPT_BLOCKS + ["remote"] * THINK_BLOCKS
            assert all(loc.tier == BlockTier.THINK_COMPLETE for loc in locations[PROMPT_BLOCKS:])
            handles = rig.offloader.committed_handles(1)
            assert len(handles) == BATCHES

            # The peer validated every frame (meridian's codec) and holds exactly what was sent.
            status = peer.wait_status(lambda s: s["committed_batches"] == BATCHES, "the offloaded batches")
            assert status["corrupt_batches"] == 0 and status["committed_frames"] == THINK_BLOCKS
            for handle in handles:
                region = status["regions"][str(handle)]
                assert region["sha256"] == hashlib.sha256(fabric.pull(handle)).hexdigest()

            rig.clobber_free_blocks()
            result = rig.offloader.ingest(1)
            assert result.status == IngestStatus.OK, result.detail
            assert len(result.restored) == THINK_BLOCKS and not result.recompute_positions
            for block, original in zip(result.restored, originals):
                assert rig.store.read_block(block) == original
            assert [loc.kind for loc in rig.offloader.block_locations(1)] == ["local"] * (PROMPT_BLOCKS + THINK_BLOCKS)
            counters = rig.offloader.counters
            assert counters.blocks_ingested == THINK_BLOCKS
            assert counters.corrupt_payloads == 0 and counters.pull_failures == 0
            assert rig.manager.check_invariants() == ""
            # Ingested payloads are released on the fabric: the peer's regions go away.
            peer.wait_status(lambda s: all(str(h) not in s["regions"] for h in handles), "the releases")
            assert rig.offloader.ingest(1).restored == []  # nothing is ingested twice
    finally:
        peer.stop()


@pytest.mark.parametrize("name", ["nixl", "mooncake"])
def test_dead_peer_keeps_blocks_local_or_asks_for_recompute(name, tmp_path):
    peer = fabric_rig.RemoteTier(name, tmp_path / "peer", 8 << 20)
    with _fabric(name, peer.dir) as fabric:
        rig = Rig(fabric)
        # Request 1 is offloaded while the peer lives; the peer then dies with its payloads.
        rig.reasoning_request(1, random.Random(12))
        assert rig.offloader.on_exit_think(1).all_pushed
        rig.settle(BATCHES)
        peer.kill()

        # Request 2 reaches ExitThink with the peer dead: every batch stays local, bytes intact.
        originals = rig.reasoning_request(2, random.Random(13))
        start = rig.offloader.on_exit_think(2)
        rig.offloader.poll()
        assert start.blocks_pushed + start.blocks_fallen_back == THINK_BLOCKS
        deadline = time.monotonic() + fabric_rig.WAIT_TIMEOUT_S
        while rig.offloader.counters.inflight_batches:
            assert time.monotonic() < deadline, "batches to a dead peer stayed in flight"
            rig.offloader.poll()
            time.sleep(0.01)
        locations = rig.offloader.block_locations(2)
        assert [loc.kind for loc in locations] == ["local"] * (PROMPT_BLOCKS + THINK_BLOCKS)
        for location, original in zip(locations[PROMPT_BLOCKS:], originals):
            assert rig.store.read_block(location.block) == original
        assert sum(rig.offloader.counters.fallbacks.values()) >= 1

        # Request 1's payloads died with the peer: ingest says which positions to recompute.
        result = rig.offloader.ingest(1)
        assert result.status == IngestStatus.PARTIAL
        assert sorted(result.recompute_positions) == list(range(PROMPT_BLOCKS, PROMPT_BLOCKS + THINK_BLOCKS))
        assert rig.offloader.counters.pull_failures >= 1
        assert rig.manager.check_invariants() == ""
        assert fabric.health()["up"] is False
