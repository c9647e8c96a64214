// KvOffloader over the in-process fabric and a host block store: offload at
// ExitThink in threshold batches, commit frees local slots, ingest restores
// every byte and tier; back-pressure, a slow fabric, a fabric that goes down,
// corrupt payloads (every header field and the body), double ingest, requests
// released in flight and timeouts (injected clock). check_invariants() after
// every step.
#include "meridian/kv_offload.h"

#include <thread>

#include <gtest/gtest.h>

#include "meridian/mrdn.h"

namespace meridian {
namespace {

constexpr std::uint64_t kBlockSize = 256;

std::byte pattern(BlockId block, std::size_t i, std::uint32_t salt) {
  return static_cast<std::byte>((block * 131U + i * 7U + salt * 29U + (i >> 8U)) & 0xFFU);
}

struct Rig {
  explicit Rig(std::uint32_t blocks = 32, InProcessFabricOptions fabric_options = {},
               std::uint32_t threshold = 4, std::uint32_t max_inflight = 4, bool fabric_offload = false)
      : manager(manager_options(blocks, fabric_offload)),
        store(blocks, kBlockSize),
        fabric(fabric_options),
        offloader(manager, store, fabric, offloader_options(threshold, max_inflight)) {}

  static KvBlockManagerOptions manager_options(std::uint32_t blocks, bool fabric_offload) {
    KvBlockManagerOptions o;
    o.num_blocks = blocks;
    o.block_size_bytes = kBlockSize;
    o.think_phase_memory_fraction = 0.5;
    o.fabric_offload = fabric_offload;
    return o;
  }
  KvOffloaderOptions offloader_options(std::uint32_t threshold, std::uint32_t max_inflight) {
    KvOffloaderOptions o;
    o.offload_threshold_blocks = threshold;
    o.max_inflight_batches = max_inflight;
    o.transfer_timeout = std::chrono::milliseconds(100);
    o.clock = [this] { return now; };
    return o;
  }

  void fill(BlockId b, std::uint32_t salt) {
    const auto bytes = store.block_bytes(b);
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = pattern(b, i, salt);
  }
  std::vector<std::byte> copy(BlockId b) {
    const auto bytes = store.block_bytes(b);
    return {bytes.begin(), bytes.end()};
  }

  /// A request with `prompt` OutputCritical blocks and `think` reasoning blocks, after ExitThink's demotion.
  std::vector<BlockId> reasoning_request(RequestId r, std::uint32_t prompt, std::uint32_t think) {
    std::vector<BlockId> all;
    for (const auto& [tier, n] :
         {std::pair{BlockTier::kOutputCritical, prompt}, std::pair{BlockTier::kThinkActive, think}}) {
      const AllocResult a = manager.allocate(r, tier, n);
      EXPECT_TRUE(a.ok());
      all.insert(all.end(), a.blocks.begin(), a.blocks.end());
    }
    for (BlockId b : all) fill(b, static_cast<std::uint32_t>(r));
    manager.demote_think_blocks(r);
    return all;
  }

  void check() { ASSERT_EQ(manager.check_invariants(), ""); }

  std::chrono::steady_clock::time_point now{};
  KvBlockManager manager;
  HostBlockStore store;
  InProcessFabric fabric;
  KvOffloader offloader;
};

std::size_t remote_count(const std::vector<BlockLocation>& locations) {
  std::size_t n = 0;
  for (const BlockLocation& l : locations) n += l.kind == BlockLocation::Kind::kRemote ? 1 : 0;
  return n;
}

TEST(KvOffload, OffloadsAtExitThinkInThresholdBatchesAndIngestRestoresEveryByte) {
  Rig rig(32);
  const std::vector<BlockId> blocks = rig.reasoning_request(1, 2, 10);
  std::vector<std::vector<std::byte>> original;
  for (BlockId b : blocks) original.push_back(rig.copy(b));

  const OffloadStart start = rig.offloader.on_exit_think(1);
  EXPECT_EQ(start.batches_pushed, 3U);  // 4 + 4 + a final 2
  EXPECT_EQ(start.blocks_pushed, 10U);
  EXPECT_TRUE(start.all_pushed());
  for (std::size_t i = 2; i < blocks.size(); ++i) EXPECT_NE(rig.manager.pin_token(blocks[i]), 0U);
  EXPECT_EQ(rig.manager.pin_token(blocks[0]), 0U);  // prompt blocks stay
  rig.check();

  const OffloadProgress progress = rig.offloader.poll();
  EXPECT_EQ(progress.batches_committed, 3U);
  EXPECT_EQ(progress.blocks_committed, 10U);
  rig.check();
  for (std::size_t i = 2; i < blocks.size(); ++i) EXPECT_TRUE(rig.manager.is_free(blocks[i]));
  EXPECT_EQ(rig.manager.blocks_of(1).size(), 2U);
  EXPECT_EQ(rig.manager.remote_block_count(), 10U);
  const std::vector<BlockLocation> locations = rig.manager.block_locations(1);
  ASSERT_EQ(locations.size(), 12U);
  EXPECT_EQ(locations[0].kind, BlockLocation::Kind::kLocal);
  EXPECT_EQ(locations[1].kind, BlockLocation::Kind::kLocal);
  for (std::size_t i = 2; i < 12; ++i) {
    ASSERT_EQ(locations[i].kind, BlockLocation::Kind::kRemote);
    EXPECT_EQ(locations[i].remote.frame, (i - 2) % 4);
    EXPECT_EQ(locations[i].remote.tier, BlockTier::kThinkComplete);
  }
  const KvOffloadCounters& c = rig.offloader.counters();
  EXPECT_EQ(c.batches_pushed, 3U);
  EXPECT_EQ(c.batches_committed, 3U);
  EXPECT_EQ(c.blocks_offloaded[0], 10U);
  EXPECT_EQ(c.bytes_pushed, 10U * mrdn::frame_size(kBlockSize));
  EXPECT_EQ(c.inflight_batches, 0U);
  EXPECT_EQ(rig.manager.counters().offloaded_live[0], 10U);

  // The freed slots are reused and overwritten before the request comes back.
  const AllocResult other = rig.manager.allocate(2, BlockTier::kOutputCritical, 28);
  ASSERT_TRUE(other.ok());
  for (BlockId b : other.blocks) rig.fill(b, 99);
  rig.manager.release(2, ReleaseKind::kAbort);

  const IngestResult in = rig.offloader.ingest(1);
  EXPECT_EQ(in.status, IngestStatus::kOk) << in.detail;
  EXPECT_EQ(in.restored.size(), 10U);
  EXPECT_TRUE(in.recompute_positions.empty());
  rig.check();
  const std::vector<BlockLocation> back = rig.manager.block_locations(1);
  ASSERT_EQ(back.size(), 12U);
  EXPECT_EQ(remote_count(back), 0U);
  for (std::size_t i = 0; i < back.size(); ++i) {
    const BlockId b = back[i].block;
    EXPECT_EQ(rig.manager.tier_of(b), i < 2 ? BlockTier::kOutputCritical : BlockTier::kThinkComplete);
    EXPECT_EQ(rig.copy(b), original[i]) << "logical block " << i;
  }
  EXPECT_EQ(rig.offloader.counters().blocks_ingested, 10U);
  EXPECT_EQ(rig.offloader.counters().bytes_pulled, c.bytes_pushed);
  EXPECT_EQ(rig.fabric.entries(), 0U);  // every handle released after ingest
}

TEST(KvOffload, PreemptionOffloadsEveryTierAsOnePayloadAndRestoresTiers) {
  Rig rig(16);
  const std::vector<BlockId> blocks = rig.reasoning_request(1, 3, 0);
  const AllocResult think = rig.manager.allocate(1, BlockTier::kThinkActive, 2);
  for (BlockId b : think.blocks) rig.fill(b, 5);
  std::vector<std::vector<std::byte>> original;
  for (BlockId b : rig.manager.blocks_of(1)) original.push_back(rig.copy(b));
  ASSERT_TRUE(rig.offloader.offload_for_preemption(1));
  EXPECT_EQ(rig.offloader.counters().batches_pushed, 1U);
  rig.offloader.poll();
  rig.check();
  EXPECT_FALSE(rig.manager.holds_blocks(1));
  EXPECT_EQ(rig.offloader.counters().blocks_offloaded[2], 3U);
  EXPECT_EQ(rig.offloader.counters().blocks_offloaded[1], 2U);
  EXPECT_FALSE(rig.offloader.offload_for_preemption(1));  // nothing local left
  const IngestResult in = rig.offloader.ingest(1);
  ASSERT_EQ(in.status, IngestStatus::kOk);
  const auto local = rig.manager.blocks_of(1);
  ASSERT_EQ(local.size(), 5U);
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(rig.manager.tier_of(local[i]), i < 3 ? BlockTier::kOutputCritical : BlockTier::kThinkActive);
    EXPECT_EQ(rig.copy(local[i]), original[i]);
  }
  rig.check();
}

TEST(KvOffload, SlowFabricKeepsBlocksPinnedUntilCommit) {
  Rig rig(8, {.commit_after_polls = 3}, 4, 4, /*fabric_offload=*/true);
  const std::vector<BlockId> blocks = rig.reasoning_request(1, 0, 4);
  ASSERT_EQ(rig.offloader.on_exit_think(1).batches_pushed, 1U);
  ASSERT_TRUE(rig.manager.allocate(2, BlockTier::kOutputCritical, 4).ok());
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(rig.offloader.poll().batches_committed, 0U);
    // The lazy offload path of allocate() must not take pinned blocks.
    EXPECT_EQ(rig.manager.usage().allocatable_blocks, 0U);
    EXPECT_EQ(rig.manager.allocate(3, BlockTier::kOutputCritical, 1).status, AllocStatus::kOutOfBlocks);
    for (BlockId b : blocks) EXPECT_FALSE(rig.manager.is_free(b));
    rig.check();
  }
  EXPECT_EQ(rig.offloader.counters().inflight_batches, 1U);
  EXPECT_EQ(rig.offloader.poll().batches_committed, 1U);
  for (BlockId b : blocks) EXPECT_TRUE(rig.manager.is_free(b));
  rig.check();
}

TEST(KvOffload, QueueFullFallsBackAndCounts) {
  Rig rig(16, {.commit_after_polls = 5}, 4, /*max_inflight=*/1);
  const std::vector<BlockId> blocks = rig.reasoning_request(1, 0, 8);
  const OffloadStart start = rig.offloader.on_exit_think(1);
  EXPECT_EQ(start.batches_pushed, 1U);
  EXPECT_EQ(start.batches_fallen_back, 1U);
  EXPECT_EQ(rig.offloader.counters().fallback(OffloadFallbackReason::kQueueFull), 1U);
  EXPECT_EQ(rig.offloader.counters().fallback_blocks, 4U);
  // The second batch stays local, unpinned, ThinkComplete: evictable as usual.
  for (std::size_t i = 4; i < 8; ++i) {
    EXPECT_EQ(rig.manager.pin_token(blocks[i]), 0U);
    EXPECT_EQ(rig.manager.tier_of(blocks[i]), BlockTier::kThinkComplete);
  }
  EXPECT_EQ(rig.manager.offload_candidates(1).size(), 4U);
  rig.check();
}

TEST(KvOffload, BusyFabricFallsBack) {
  Rig rig(16, {.capacity_bytes = 3 * mrdn::frame_size(kBlockSize)}, 2);
  rig.reasoning_request(1, 0, 4);
  const OffloadStart start = rig.offloader.on_exit_think(1);
  EXPECT_EQ(start.batches_pushed, 1U);  // 2 frames fit, the next 2 do not
  EXPECT_EQ(rig.offloader.counters().fallback(OffloadFallbackReason::kBusy), 1U);
  rig.check();
}

TEST(KvOffload, FabricDownMidFlightKeepsBlocksLocal) {
  Rig rig(16, {.commit_after_polls = 4});
  const std::vector<BlockId> blocks = rig.reasoning_request(1, 1, 4);
  ASSERT_EQ(rig.offloader.on_exit_think(1).batches_pushed, 1U);
  rig.fabric.set_down(true);
  const OffloadProgress p = rig.offloader.poll();
  EXPECT_EQ(p.batches_failed, 1U);
  EXPECT_EQ(rig.offloader.counters().fallback(OffloadFallbackReason::kFailed), 1U);
  EXPECT_EQ(rig.fabric.entries(), 0U);  // the failed handle was released
  EXPECT_EQ(rig.manager.blocks_of(1).size(), 5U);
  for (BlockId b : blocks) {
    EXPECT_FALSE(rig.manager.is_free(b));
    EXPECT_EQ(rig.manager.pin_token(b), 0U);
  }
  rig.check();
  // While down, a push is refused at once.
  rig.offloader.on_exit_think(1);
  EXPECT_EQ(rig.offloader.counters().fallback(OffloadFallbackReason::kDown), 1U);
  rig.fabric.set_down(false);
  EXPECT_EQ(rig.offloader.on_exit_think(1).batches_pushed, 1U);
  rig.check();
}

TEST(KvOffload, PullFailureDropsRemoteBlocksForRecompute) {
  Rig rig(16);
  rig.reasoning_request(1, 1, 3);
  rig.offloader.on_exit_think(1);
  rig.offloader.poll();
  rig.fabric.set_down(true);
  const IngestResult in = rig.offloader.ingest(1);
  EXPECT_EQ(in.status, IngestStatus::kPartial);
  EXPECT_EQ(in.recompute_positions, (std::vector<std::uint32_t>{1, 2, 3}));
  EXPECT_NE(in.detail.find("unavailable"), std::string::npos) << in.detail;
  EXPECT_EQ(rig.offloader.counters().pull_failures, 1U);
  EXPECT_EQ(rig.offloader.counters().recompute_blocks, 3U);
  EXPECT_EQ(rig.manager.block_locations(1).size(), 1U);
  rig.check();
}

// Flips one byte of the second batch's payload at `offset` and ingests.
void expect_corrupt_rejected(std::size_t offset, std::string_view expected) {
  SCOPED_TRACE(offset);
  Rig rig(32, {}, 2);
  rig.reasoning_request(1, 1, 4);
  rig.offloader.on_exit_think(1);
  rig.offloader.poll();
  const std::vector<FabricHandle> handles = rig.offloader.committed_handles(1);
  ASSERT_EQ(handles.size(), 2U);
  ASSERT_TRUE(rig.fabric.corrupt_byte(handles[1], offset));
  const IngestResult in = rig.offloader.ingest(1);
  EXPECT_EQ(in.status, IngestStatus::kPartial);
  EXPECT_EQ(in.restored.size(), 2U);  // the first payload is fine
  EXPECT_EQ(in.recompute_positions, (std::vector<std::uint32_t>{3, 4}));
  EXPECT_NE(in.detail.find(expected), std::string::npos) << in.detail;
  EXPECT_EQ(rig.offloader.counters().corrupt_payloads, 1U);
  EXPECT_EQ(rig.offloader.counters().recompute_blocks, 2U);
  EXPECT_EQ(rig.offloader.counters().blocks_ingested, 2U);
  EXPECT_EQ(rig.manager.block_locations(1).size(), 3U);
  EXPECT_EQ(rig.manager.remote_block_count(), 0U);
  EXPECT_EQ(rig.fabric.entries(), 0U);
  rig.check();
}

TEST(KvOffload, CorruptPayloadIsRejectedInEveryRegion) {
  const std::size_t second = mrdn::frame_size(kBlockSize);
  expect_corrupt_rejected(0, "bad magic at byte 0");
  expect_corrupt_rejected(5, "unsupported version at byte 4");
  // body_len 256 -> 257: frame 0's body takes a byte of frame 1, its checksum no longer matches.
  expect_corrupt_rejected(8, "checksum mismatch at byte 16");
  expect_corrupt_rejected(12, "frame 0 is think_active");  // tier 0 -> 1: valid, but not what was offloaded
  expect_corrupt_rejected(14, "nonzero padding at byte 14");
  expect_corrupt_rejected(20, "checksum mismatch at byte 16");
  expect_corrupt_rejected(32, "checksum mismatch at byte 16");          // first body byte
  expect_corrupt_rejected(second - 1, "checksum mismatch at byte 16");  // last body byte of frame 0
  expect_corrupt_rejected(second + 1, "bad magic at byte 288");         // frame 1's header
  expect_corrupt_rejected(second + 8, "truncated body at byte");  // frame 1's body_len runs past the end
  expect_corrupt_rejected(second + 40, "checksum mismatch at byte 304");  // frame 1's body
}

TEST(KvOffload, DoubleIngestDoesNothing) {
  Rig rig(16);
  rig.reasoning_request(1, 0, 4);
  rig.offloader.on_exit_think(1);
  rig.offloader.poll();
  ASSERT_EQ(rig.offloader.ingest(1).restored.size(), 4U);
  const KvOffloadCounters before = rig.offloader.counters();
  const KvBlockUsage usage = rig.manager.usage();
  const IngestResult again = rig.offloader.ingest(1);
  EXPECT_EQ(again.status, IngestStatus::kOk);
  EXPECT_TRUE(again.restored.empty());
  EXPECT_EQ(rig.offloader.counters().blocks_ingested, before.blocks_ingested);
  EXPECT_EQ(rig.offloader.counters().bytes_pulled, before.bytes_pulled);
  EXPECT_EQ(rig.manager.usage().free_blocks, usage.free_blocks);
  rig.check();
}

TEST(KvOffload, RequestReleasedInFlightIsCancelledWithoutDoubleFree) {
  for (const bool tell_offloader : {true, false}) {
    SCOPED_TRACE(tell_offloader);
    Rig rig(8, {.commit_after_polls = 2});
    rig.reasoning_request(1, 0, 4);
    ASSERT_EQ(rig.offloader.on_exit_think(1).batches_pushed, 1U);
    if (tell_offloader) rig.offloader.on_release(1);
    rig.manager.release(1, ReleaseKind::kAbort);
    rig.check();
    // The slots go to another request (same ids) before the payload commits.
    const AllocResult other = rig.manager.allocate(2, BlockTier::kOutputCritical, 8);
    ASSERT_TRUE(other.ok());
    rig.offloader.poll();
    rig.offloader.poll();
    rig.check();
    EXPECT_EQ(rig.manager.blocks_of(2).size(), 8U);
    EXPECT_EQ(rig.manager.usage().free_blocks, 0U);
    EXPECT_EQ(rig.manager.remote_block_count(), 0U);
    EXPECT_EQ(rig.offloader.counters().batches_committed, 0U);
    EXPECT_EQ(rig.offloader.counters().batches_cancelled, 1U);
    EXPECT_EQ(rig.fabric.entries(), 0U);
  }
}

TEST(KvOffload, ReleaseAfterCommitReleasesHandlesAndRemoteEntries) {
  Rig rig(16);
  rig.reasoning_request(1, 1, 4);
  rig.offloader.on_exit_think(1);
  rig.offloader.poll();
  EXPECT_EQ(rig.fabric.entries(), 1U);
  rig.offloader.on_release(1);
  rig.manager.release(1, ReleaseKind::kFinished);
  EXPECT_EQ(rig.fabric.entries(), 0U);
  EXPECT_EQ(rig.manager.remote_block_count(), 0U);
  EXPECT_TRUE(rig.offloader.ingest(1).restored.empty());
  rig.check();
}

TEST(KvOffload, UncommittedPushTimesOutOnTheInjectedClock) {
  Rig rig(16, {.commit_after_polls = 1000});
  const std::vector<BlockId> blocks = rig.reasoning_request(1, 0, 4);
  rig.offloader.on_exit_think(1);
  rig.now += std::chrono::milliseconds(99);
  EXPECT_EQ(rig.offloader.poll().batches_failed, 0U);
  rig.now += std::chrono::milliseconds(1);
  EXPECT_EQ(rig.offloader.poll().batches_failed, 1U);
  EXPECT_EQ(rig.offloader.counters().fallback(OffloadFallbackReason::kTimeout), 1U);
  EXPECT_EQ(rig.fabric.entries(), 0U);
  for (BlockId b : blocks) EXPECT_EQ(rig.manager.pin_token(b), 0U);
  rig.check();
}

TEST(KvOffload, IngestWithoutRoomKeepsThePayloadRemote) {
  Rig rig(8);
  rig.reasoning_request(1, 0, 4);
  rig.offloader.on_exit_think(1);
  rig.offloader.poll();
  ASSERT_TRUE(rig.manager.allocate(2, BlockTier::kOutputCritical, 6).ok());
  const IngestResult full = rig.offloader.ingest(1);
  EXPECT_EQ(full.status, IngestStatus::kOutOfBlocks);
  EXPECT_EQ(rig.manager.remote_block_count(), 4U);
  EXPECT_EQ(rig.offloader.committed_handles(1).size(), 1U);
  rig.check();
  rig.manager.release(2, ReleaseKind::kAbort);
  EXPECT_EQ(rig.offloader.ingest(1).restored.size(), 4U);
  rig.check();
}

TEST(KvOffload, RejectsMismatchedStoreAndBadOptions) {
  KvBlockManager manager(Rig::manager_options(8, false));
  HostBlockStore wrong(9, kBlockSize);
  InProcessFabric fabric;
  EXPECT_THROW(KvOffloader(manager, wrong, fabric), InvalidArgument);
  HostBlockStore store(8, kBlockSize);
  KvOffloaderOptions zero;
  zero.max_inflight_batches = 0;
  EXPECT_THROW(KvOffloader(manager, store, fabric, zero), InvalidArgument);
  MeridianConfig config = MeridianConfig::defaults();
  config.disagg.offload_threshold_blocks = 0;
  EXPECT_THROW((void)KvOffloaderOptions::from_config(config), InvalidArgument);
  config.disagg.offload_threshold_blocks = 6;
  config.disagg.transfer_timeout_ms = 750;
  const KvOffloaderOptions o = KvOffloaderOptions::from_config(config);
  EXPECT_EQ(o.offload_threshold_blocks, 6U);
  EXPECT_EQ(o.transfer_timeout, std::chrono::milliseconds(750));
}

TEST(HostBlockStore, OwnsOrViewsMemoryAndChecksRanges) {
  HostBlockStore owned(4, 64);
  EXPECT_TRUE(owned.owns_memory());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(owned.block_bytes(0).data()) % 4096, 0U);
  EXPECT_EQ(owned.block_bytes(3).data() - owned.block_bytes(0).data(), 3 * 64);
  EXPECT_THROW((void)owned.block_bytes(4), OutOfRange);
  std::vector<std::byte> memory(4 * 64);
  HostBlockStore view(memory, 4, 64);
  EXPECT_FALSE(view.owns_memory());
  view.block_bytes(2)[5] = std::byte{7};
  EXPECT_EQ(memory[2 * 64 + 5], std::byte{7});
  EXPECT_THROW(HostBlockStore(memory, 5, 64), InvalidArgument);
  EXPECT_THROW(HostBlockStore(0, 64), InvalidArgument);
}

TEST(InProcessFabric, BoundedCommitsAndReleases) {
  InProcessFabric fabric({.capacity_bytes = 100, .max_entries = 2, .commit_after_polls = 1});
  std::vector<std::byte> payload(40, std::byte{3});
  const PushResult a = fabric.push(payload);
  ASSERT_EQ(a.status, FabricStatus::kOk);
  EXPECT_NE(a.handle, 0U);
  std::vector<std::byte> out;
  EXPECT_EQ(fabric.pull(a.handle, out).status, FabricStatus::kFailed);  // not committed yet
  EXPECT_EQ(fabric.health().in_flight, 1U);
  EXPECT_EQ(fabric.poll(a.handle), TransferState::kCommitted);
  ASSERT_EQ(fabric.pull(a.handle, out).status, FabricStatus::kOk);
  EXPECT_EQ(out, payload);
  EXPECT_EQ(fabric.health().stored_bytes, 40U);
  ASSERT_EQ(fabric.push(payload).status, FabricStatus::kOk);
  EXPECT_EQ(fabric.push(std::vector<std::byte>(10)).status, FabricStatus::kBusy);  // max_entries
  fabric.release(a.handle);
  fabric.release(a.handle);  // idempotent
  EXPECT_EQ(fabric.poll(a.handle), TransferState::kUnknown);
  EXPECT_EQ(fabric.pull(a.handle, out).status, FabricStatus::kNotFound);
  EXPECT_EQ(fabric.push(std::vector<std::byte>(61)).status, FabricStatus::kBusy);  // 40 + 61 > 100
  EXPECT_EQ(fabric.label(), "nixl-synth");
  EXPECT_FALSE(fabric.corrupt_byte(a.handle, 0));
  EXPECT_EQ(to_string(FabricStatus::kUnavailable), "unavailable");
  EXPECT_EQ(to_string(TransferState::kInFlight), "in_flight");
}

TEST(InProcessFabric, ConcurrentCallersEachGetTheirOwnPayloadsBack) {
  InProcessFabric fabric({.commit_after_polls = 1});
  constexpr int kThreads = 4;
  constexpr int kRounds = 200;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&fabric, &mismatches, t] {
      std::vector<std::byte> out;
      for (int i = 0; i < kRounds; ++i) {
        const std::vector<std::byte> payload(static_cast<std::size_t>(16 + i % 7),
                                             static_cast<std::byte>(t * 50 + i));
        const PushResult pushed = fabric.push(payload);
        const bool ok = pushed.status == FabricStatus::kOk &&
                        fabric.poll(pushed.handle) == TransferState::kCommitted &&
                        fabric.pull(pushed.handle, out).status == FabricStatus::kOk && out == payload;
        mismatches[static_cast<std::size_t>(t)] += ok ? 0 : 1;
        fabric.release(pushed.handle);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(kThreads, 0));
  EXPECT_EQ(fabric.entries(), 0U);
  EXPECT_EQ(fabric.health().stored_bytes, 0U);
}

}  // namespace
}  // namespace meridian
