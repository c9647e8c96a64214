// KvBlockManager: tiers, feasibility-before-eviction, prefix cache, the think
// fraction, aggressive eviction, fabric offload and the counters.
#include "meridian/kv_block_manager.h"

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace meridian {
namespace {

KvBlockManagerOptions options(std::uint32_t blocks, double think_fraction = 0.5) {
  KvBlockManagerOptions o;
  o.num_blocks = blocks;
  o.block_size_bytes = 1024;
  o.think_phase_memory_fraction = think_fraction;
  return o;
}

std::vector<std::uint64_t> hashes(std::uint64_t base, std::size_t n) {
  std::vector<std::uint64_t> h(n);
  for (std::size_t i = 0; i < n; ++i) h[i] = base * 1000 + i;
  return h;
}

TEST(KvBlockManager, RejectsBadOptions) {
  EXPECT_THROW(KvBlockManager(options(0)), InvalidArgument);
  try {
    KvBlockManager m(options(8, 1.0));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("kv_memory.think_phase_memory_fraction"), std::string::npos);
  }
}

TEST(KvBlockManager, AllocatesFromFreeListAndFreesOnRelease) {
  KvBlockManager m(options(8));
  const AllocResult r = m.allocate(1, BlockTier::kOutputCritical, 3);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.blocks.size(), 3U);
  EXPECT_TRUE(r.reclaimed.empty());
  EXPECT_EQ(m.usage().free_blocks, 5U);
  EXPECT_EQ(m.usage().used_bytes(), 3U * 1024);
  EXPECT_EQ(m.blocks_of(1).size(), 3U);
  m.release(1, ReleaseKind::kFinished);  // unhashed: straight back to free
  EXPECT_EQ(m.usage().free_blocks, 8U);
  EXPECT_FALSE(m.holds_blocks(1));
  EXPECT_EQ(m.check_invariants(), "");
}

TEST(KvBlockManager, FailedAllocationChangesNothing) {
  KvBlockManager m(options(8));
  ASSERT_TRUE(m.allocate(1, BlockTier::kOutputCritical, 4, hashes(1, 4)).ok());
  m.release(1, ReleaseKind::kFinished);  // 4 cached
  ASSERT_TRUE(m.allocate(2, BlockTier::kOutputCritical, 3).ok());
  const KvBlockUsage before = m.usage();
  const std::uint64_t evicted_before = m.counters().evicted_cached[2];
  const AllocResult r = m.allocate(3, BlockTier::kOutputCritical, 6);  // 1 free + 4 cached = 5 < 6
  EXPECT_EQ(r.status, AllocStatus::kOutOfBlocks);
  EXPECT_TRUE(r.blocks.empty());
  EXPECT_TRUE(r.reclaimed.empty());
  const KvBlockUsage after = m.usage();
  EXPECT_EQ(after.free_blocks, before.free_blocks);
  EXPECT_EQ(after.cached_blocks[2], before.cached_blocks[2]);
  EXPECT_EQ(m.counters().evicted_cached[2], evicted_before);
  EXPECT_EQ(m.match_prefix(hashes(1, 4)), 4U);  // the cache survived
  EXPECT_EQ(m.counters().failed_allocations, 1U);
  EXPECT_EQ(m.check_invariants(), "");
}

TEST(KvBlockManager, CachedThinkBlocksAreEvictedBeforePromptAndAnswer) {
  KvBlockManager m(options(10));
  // Turn 1: prompt (2, OutputCritical), reasoning (3, ThinkActive -> ThinkComplete), answer (2).
  ASSERT_TRUE(m.allocate(1, BlockTier::kOutputCritical, 2, hashes(1, 2)).ok());
  ASSERT_TRUE(m.allocate(1, BlockTier::kThinkActive, 3, hashes(2, 3)).ok());
  EXPECT_TRUE(m.demote_think_blocks(1).empty());
  ASSERT_TRUE(m.allocate(1, BlockTier::kOutputCritical, 2, hashes(3, 2)).ok());
  m.release(1, ReleaseKind::kFinished);
  EXPECT_EQ(m.usage().cached_blocks[0], 3U);
  EXPECT_EQ(m.usage().cached_blocks[2], 4U);
  // Another request needs 6: 3 free, then the 3 cached think blocks, nothing else.
  const AllocResult r = m.allocate(2, BlockTier::kOutputCritical, 6);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.reclaimed.size(), 3U);
  for (const ReclaimedBlock& b : r.reclaimed) {
    EXPECT_EQ(b.tier, BlockTier::kThinkComplete);
    EXPECT_EQ(b.action, ReclaimAction::kEvictCached);
    EXPECT_EQ(b.owner, 0U);
  }
  EXPECT_EQ(m.counters().evicted_cached[0], 3U);
  EXPECT_EQ(m.counters().evicted_cached[2], 0U);
  // Turn 2 of the conversation: prompt = turn-1 prompt + answer; both still cached.
  EXPECT_EQ(m.match_prefix(hashes(1, 2)), 2U);
  EXPECT_EQ(m.match_prefix(hashes(3, 2)), 2U);
  EXPECT_EQ(m.match_prefix(hashes(2, 3)), 0U);
  EXPECT_EQ(m.check_invariants(), "");
}

TEST(KvBlockManager, LruWithinATier) {
  KvBlockManager m(options(4));
  ASSERT_TRUE(m.allocate(1, BlockTier::kOutputCritical, 2, hashes(1, 2)).ok());
  ASSERT_TRUE(m.allocate(2, BlockTier::kOutputCritical, 2, hashes(2, 2)).ok());
  m.release(1, ReleaseKind::kFinished);  // older
  m.release(2, ReleaseKind::kFinished);
  const AllocResult r = m.allocate(3, BlockTier::kOutputCritical, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(m.match_prefix(hashes(1, 2)), 0U);  // LRU went first
  EXPECT_EQ(m.match_prefix(hashes(2, 2)), 2U);
}

TEST(KvBlockManager, ReleaseFreesTheTailFirstAsVllmDoes) {
  // One request's 3 hashed blocks are cached; a new request takes one block. vLLM frees
  // tail first, so the tail is reclaimed and the head of the prefix still hits.
  for (const bool tail_first : {true, false}) {
    KvBlockManagerOptions o = options(3);
    o.release_tail_first = tail_first;
    KvBlockManager m(o);
    ASSERT_TRUE(m.allocate(1, BlockTier::kOutputCritical, 3, hashes(1, 3)).ok());
    m.release(1, ReleaseKind::kFinished);
    ASSERT_TRUE(m.allocate(2, BlockTier::kOutputCritical, 1).ok());
    EXPECT_EQ(m.match_prefix(hashes(1, 3)), tail_first ? 2U : 0U) << "tail_first " << tail_first;
    EXPECT_EQ(m.check_invariants(), "");
  }
}

TEST(KvBlockManager, PrefixAttachSharesAndReusesCachedBlocks) {
  KvBlockManager m(options(8));
  const auto h = hashes(7, 3);
  ASSERT_TRUE(m.allocate(1, BlockTier::kOutputCritical, 3, h).ok());
  EXPECT_EQ(m.attach_prefix(2, h), 3U);  // live sharing
  EXPECT_EQ(m.usage().free_blocks, 5U);
  m.release(1, ReleaseKind::kFinished);
  EXPECT_EQ(m.usage().live_blocks[2], 3U);  // still held by 2
  m.release(2, ReleaseKind::kFinished);
  EXPECT_EQ(m.usage().cached_blocks[2], 3U);
  EXPECT_EQ(m.attach_prefix(3, h), 3U);  // from the cache
  EXPECT_EQ(m.usage().cached_blocks[2], 0U);
  EXPECT_EQ(m.counters().prefix_hit_blocks, 6U);
  EXPECT_EQ(m.check_invariants(), "");
}

TEST(KvBlockManager, APrefixAttachesOnceBeforeTheRequestsOwnBlocks) {
  // Issue 27: attached twice, request 2 listed [0, 1, 0, 1], was told 2 blocks
  // were reused both times, and check_invariants() found nothing.
  KvBlockManager m(options(8));
  const auto h = hashes(7, 2);
  ASSERT_TRUE(m.allocate(1, BlockTier::kOutputCritical, 2, h).ok());
  ASSERT_EQ(m.attach_prefix(2, h), 2U);
  const KvBlockUsage before = m.usage();
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no InvalidArgument");
  };
  EXPECT_EQ(
      message([&] { (void)m.attach_prefix(2, h); }),
      "KvBlockManager::attach_prefix: request 2 already holds 2 blocks; a prefix attaches only before its "
      "first block");
  // After its own blocks: the prefix would land behind them.
  ASSERT_TRUE(m.allocate(3, BlockTier::kOutputCritical, 1).ok());
  EXPECT_THROW((void)m.attach_prefix(3, h), InvalidArgument);
  // One hash twice would attach one block twice.
  const std::vector<std::uint64_t> repeated{h[0], h[0]};
  EXPECT_NE(message([&] { (void)m.attach_prefix(4, repeated); }).find("hashes[1] repeats hashes[0]"),
            std::string::npos);
  // Id 0 is the manager's "no owner" mark.
  EXPECT_NE(message([&] { (void)m.attach_prefix(0, h); }).find("request id 0 is reserved"),
            std::string::npos);
  EXPECT_NE(
      message([&] { (void)m.allocate(0, BlockTier::kThinkActive, 1); }).find("request id 0 is reserved"),
      std::string::npos);
  EXPECT_EQ(m.blocks_of(2).size(), 2U);
  EXPECT_EQ(m.blocks_of(4).size(), 0U);
  EXPECT_EQ(m.usage().free_blocks, before.free_blocks - 1);  // only request 3's allocation
  EXPECT_EQ(m.check_invariants(), "");
}

TEST(KvBlockManager, ARemoteCommitIsOneHandlesFramesEachOnce) {
  // Issue 27: duplicate or gapped frames, or a handle reused, were accepted and
  // only check_invariants() saw them afterwards; restore_remote() would then put
  // one frame in two slots and leak another.
  KvBlockManagerOptions o = options(8);
  o.fabric_offload = true;
  KvBlockManager m(o);
  ASSERT_TRUE(m.allocate(1, BlockTier::kThinkActive, 3).ok());
  const auto owned = m.blocks_of(1);
  const std::vector<BlockId> blocks(owned.begin(), owned.end());
  m.pin(1, blocks, 7);
  const KvBlockUsage before = m.usage();
  const auto ref = [](std::uint64_t handle, std::uint32_t frame) {
    return RemoteBlockRef{handle, frame, BlockTier::kThinkActive};
  };
  const std::vector<RemoteBlockRef> twice{ref(5, 0), ref(5, 0), ref(5, 1)};
  EXPECT_THROW(m.mark_remote(1, blocks, twice), InvalidArgument);
  const std::vector<RemoteBlockRef> gap{ref(5, 0), ref(5, 1), ref(5, 3)};
  EXPECT_THROW(m.mark_remote(1, blocks, gap), InvalidArgument);
  EXPECT_EQ(m.usage().free_blocks, before.free_blocks);  // nothing freed by a refused commit
  EXPECT_EQ(m.block_locations(1).size(), 3U);
  EXPECT_EQ(m.check_invariants(), "");
  const std::vector<BlockId> first(blocks.begin(), blocks.begin() + 2);
  m.mark_remote(1, first, std::vector<RemoteBlockRef>{ref(5, 0), ref(5, 1)});
  const std::vector<BlockId> last{blocks[2]};
  EXPECT_THROW(m.mark_remote(1, last, std::vector<RemoteBlockRef>{ref(5, 2)}), InvalidArgument);  // reused
  m.mark_remote(1, last, std::vector<RemoteBlockRef>{ref(6, 0)});
  EXPECT_EQ(m.block_locations(1).size(), 3U);
  EXPECT_EQ(m.check_invariants(), "");
}

TEST(KvBlockManager, ThinkShareIsSoftThinkKvMayUseTheWholePool) {
  KvBlockManager m(options(10, 0.3));  // a share of 3 ThinkActive blocks
  EXPECT_EQ(m.usage().think_block_limit, 3U);
  ASSERT_TRUE(m.allocate(1, BlockTier::kThinkActive, 2).ok());
  EXPECT_EQ(m.usage().think_headroom(), 1U);
  // Over the share while blocks are free: allowed (ADR-0015); the headroom reads 0.
  ASSERT_TRUE(m.allocate(2, BlockTier::kThinkActive, 3).ok());
  EXPECT_EQ(m.usage().think_headroom(), 0U);
  EXPECT_EQ(m.usage().free_blocks, 5U);
  ASSERT_TRUE(m.allocate(3, BlockTier::kOutputCritical, 5).ok());  // other tiers unaffected
  EXPECT_EQ(m.allocate(4, BlockTier::kThinkActive, 1).status,
            AllocStatus::kOutOfBlocks);  // the pool is the limit
  m.demote_think_blocks(1);              // ThinkComplete no longer counts toward the share
  EXPECT_EQ(m.usage().think_headroom(), 0U);
  m.demote_think_blocks(2);
  EXPECT_EQ(m.usage().think_headroom(), 3U);
  EXPECT_EQ(m.allocate(4, BlockTier::kThinkComplete, 1).status, AllocStatus::kInvalidTier);
  EXPECT_EQ(m.check_invariants(), "");
}

TEST(KvBlockManager, DemotionIsOneWayAndOnlyTouchesThinkBlocks) {
  KvBlockManager m(options(8));
  ASSERT_TRUE(m.allocate(1, BlockTier::kOutputCritical, 1).ok());
  ASSERT_TRUE(m.allocate(1, BlockTier::kThinkActive, 2).ok());
  m.demote_think_blocks(1);
  const auto blocks = m.blocks_of(1);
  EXPECT_EQ(m.tier_of(blocks[0]), BlockTier::kOutputCritical);
  EXPECT_EQ(m.tier_of(blocks[1]), BlockTier::kThinkComplete);
  EXPECT_EQ(m.tier_of(blocks[2]), BlockTier::kThinkComplete);
  EXPECT_EQ(m.counters().demoted_blocks, 2U);
  m.demote_think_blocks(1);  // idempotent
  EXPECT_EQ(m.counters().demoted_blocks, 2U);
}

TEST(KvBlockManager, AggressiveEvictionDropsThinkBlocksAtExitThink) {
  KvBlockManagerOptions o = options(8);
  o.aggressive_think_eviction = true;
  KvBlockManager m(o);
  ASSERT_TRUE(m.allocate(1, BlockTier::kOutputCritical, 1).ok());
  ASSERT_TRUE(m.allocate(1, BlockTier::kThinkActive, 3).ok());
  const std::vector<BlockId> dropped = m.demote_think_blocks(1);
  EXPECT_EQ(dropped.size(), 3U);
  EXPECT_EQ(m.blocks_of(1).size(), 1U);
  EXPECT_EQ(m.usage().free_blocks, 7U);
  EXPECT_EQ(m.counters().dropped_think_complete, 3U);
  EXPECT_EQ(m.counters().evictions(BlockTier::kThinkComplete), 3U);
  EXPECT_EQ(m.check_invariants(), "");
}

TEST(KvBlockManager, FabricOffloadTakesLiveThinkCompleteBlocksAndTellsTheOwner) {
  KvBlockManagerOptions o = options(6);
  o.fabric_offload = true;
  KvBlockManager m(o);
  ASSERT_TRUE(m.allocate(1, BlockTier::kOutputCritical, 1).ok());
  ASSERT_TRUE(m.allocate(1, BlockTier::kThinkActive, 3).ok());
  m.demote_think_blocks(1);
  ASSERT_TRUE(m.allocate(2, BlockTier::kOutputCritical, 2).ok());
  EXPECT_EQ(m.usage().allocatable_blocks, 3U);  // 0 free + 3 offloadable
  const AllocResult r = m.allocate(3, BlockTier::kOutputCritical, 2);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.reclaimed.size(), 2U);
  EXPECT_EQ(r.reclaimed[0].owner, 1U);
  EXPECT_EQ(r.reclaimed[0].action, ReclaimAction::kOffload);
  EXPECT_EQ(m.blocks_of(1).size(), 2U);  // the owner lost exactly those
  EXPECT_EQ(m.counters().offloaded_live[0], 2U);
  EXPECT_EQ(m.check_invariants(), "");
}

TEST(KvBlockManager, PreemptionCountersAndOutputCriticalEvents) {
  KvBlockManager m(options(16));
  ASSERT_TRUE(m.allocate(1, BlockTier::kOutputCritical, 2).ok());
  ASSERT_TRUE(m.allocate(1, BlockTier::kThinkActive, 3).ok());
  ASSERT_TRUE(m.allocate(2, BlockTier::kOutputCritical, 4).ok());
  m.release(1, ReleaseKind::kRecompute, false);  // think-phase victim
  EXPECT_EQ(m.counters().released_live[1], 3U);
  EXPECT_EQ(m.counters().released_live[2], 2U);
  EXPECT_EQ(m.counters().output_critical_eviction_events, 0U);
  m.release(2, ReleaseKind::kSwap, true);  // answer-phase victim: user-visible
  EXPECT_EQ(m.counters().output_critical_eviction_events, 1U);
  EXPECT_EQ(m.counters().evictions(BlockTier::kOutputCritical), 6U);
  m.release(99, ReleaseKind::kAbort);  // unknown: no-op
  EXPECT_EQ(m.usage().free_blocks, 16U);
}

TEST(KvBlockManager, RecomputeKeepsHashedBlocksCachedForReadmission) {
  KvBlockManager m(options(8));
  const auto h = hashes(5, 3);
  ASSERT_TRUE(m.allocate(1, BlockTier::kOutputCritical, 3, h).ok());
  m.release(1, ReleaseKind::kRecompute);
  EXPECT_EQ(m.attach_prefix(1, h), 3U);
  m.release(1, ReleaseKind::kSwap);  // swapped KV lives on the host: nothing cached
  EXPECT_EQ(m.match_prefix(h), 0U);
  EXPECT_EQ(m.usage().free_blocks, 8U);
}

TEST(KvBlockManager, FromConfig) {
  MeridianConfig c = MeridianConfig::defaults();
  c.kv_memory.block_size_bytes = 1000;
  c.kv_memory.think_phase_memory_fraction = 0.25;
  const KvBlockManagerOptions o = KvBlockManagerOptions::from_config(c, 10'500);
  EXPECT_EQ(o.num_blocks, 10U);
  EXPECT_FALSE(o.fabric_offload);
  KvBlockManager m(o);
  EXPECT_EQ(m.usage().think_block_limit, 2U);
  EXPECT_EQ(to_string(BlockTier::kOutputCritical), "output_critical");
}

}  // namespace
}  // namespace meridian
