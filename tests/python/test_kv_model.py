"""The block manager's Python API against a reference model (issue 27): random
sequences of allocate, attach_prefix, demote, release and touch through the
bindings, with repeated and conflicting calls. The model keeps each request's
block count and decides from the call alone whether it must be refused (a
ValueError that changes nothing); after every call the manager agrees with it
and check_invariants() is clean. The C++ twin is
tests/cpp/kv_block_manager_model_test.cpp (RapidCheck)."""
from __future__ import annotations

import random

import pytest

from meridian import AllocStatus, BlockTier, KvBlockManager, KvBlockManagerOptions, ReleaseKind

MAX_REQUEST = 5
TIERS = [BlockTier.THINK_COMPLETE, BlockTier.THINK_ACTIVE, BlockTier.OUTPUT_CRITICAL]


def agree(kv, held):
    assert kv.check_invariants() == ""
    live = set()
    for r in range(MAX_REQUEST + 1):
        blocks = list(kv.blocks_of(r))
        assert len(blocks) == held.get(r, 0), (r, blocks, held)
        assert len(set(blocks)) == len(blocks)  # no block twice in one request's list
        live.update(blocks)
    u = kv.usage
    assert sum(u.live_blocks) == len(live)  # shared blocks counted once
    assert u.free_blocks + sum(u.live_blocks) + sum(u.cached_blocks) == u.total_blocks


@pytest.mark.parametrize("seed", range(40))
def test_the_python_api_agrees_with_a_reference_model(seed):
    rng = random.Random(seed)
    options = KvBlockManagerOptions()
    options.num_blocks = rng.randint(1, 40)
    options.block_size_bytes = 4096
    options.think_phase_memory_fraction = rng.randint(5, 95) / 100
    options.aggressive_think_eviction = rng.random() < 0.5
    kv = KvBlockManager(options)
    held: dict[int, int] = {}
    for _ in range(rng.randint(0, 150)):
        kind = rng.randrange(5)
        r = rng.randint(0, MAX_REQUEST)
        count = rng.randint(0, 11)
        hashes = [rng.randint(0, 3) * 100 + i for i in range(count)]
        if kind == 0:
            tier = rng.choice(TIERS)
            if r == 0:
                with pytest.raises(ValueError, match="request id 0 is reserved"):
                    kv.allocate(r, tier, count, hashes)
                continue
            allocatable = kv.usage.allocatable_blocks
            result = kv.allocate(r, tier, count, hashes)
            if tier == BlockTier.THINK_COMPLETE:
                assert result.status == AllocStatus.INVALID_TIER
            elif count > allocatable:
                assert result.status == AllocStatus.OUT_OF_BLOCKS
            else:
                assert result.ok and len(result.blocks) == count
                if count:
                    held[r] = held.get(r, 0) + count
        elif kind == 1:
            if hashes and rng.random() < 0.3:
                hashes.append(hashes[0])
            refused = r == 0 or len(set(hashes)) != len(hashes) or held.get(r, 0) != 0
            before = kv.usage.free_blocks
            if refused:
                with pytest.raises(ValueError):
                    kv.attach_prefix(r, hashes)
                assert kv.usage.free_blocks == before
            else:
                promised = kv.match_prefix(hashes)
                assert kv.attach_prefix(r, hashes) == promised
                if promised:
                    held[r] = promised
        elif kind == 2:
            dropped = kv.demote_think_blocks(r)
            assert options.aggressive_think_eviction or not dropped
            if dropped:
                held[r] -= len(dropped)
                if held[r] == 0:
                    del held[r]
        elif kind == 3:
            kv.release(r, ReleaseKind.FINISHED)
            held.pop(r, None)
        else:
            kv.touch(r)
        agree(kv, held)
