// KV block manager hot paths against a naive baseline driven by the identical
// operation stream in the same binary (docs/benchmarks.md):
//   * NaiveScanBlockManager - the seeds' design: one array of block records
//     and no per-request lists or tier lists, so finding a free block, the LRU
//     victim, a request's blocks to demote or release are O(N) scans;
//   * KvBlockManager - Meridian: intrusive per-tier LRU lists and per-request
//     block vectors (O(1) per block allocated or evicted, O(k) per request).
// The pool is full of cached prefix blocks in steady state, so every
// allocation evicts one (the path a busy server takes).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include <benchmark/benchmark.h>

#include "meridian/kv_block_manager.h"

namespace {

using meridian::AllocStatus;
using meridian::BlockId;
using meridian::BlockTier;
using meridian::KvBlockManager;
using meridian::KvBlockManagerOptions;
using meridian::ReleaseKind;
using meridian::RequestId;

constexpr std::uint32_t kBlocks = 16384;         // 256 MiB of 16 KiB blocks
constexpr std::uint32_t kLiveRequests = 128;     // decoding concurrently
constexpr std::uint32_t kBlocksPerRequest = 48;  // then the request finishes (blocks cached)
constexpr std::uint32_t kExitThinkBlocks = 64;   // reasoning length of the ExitThink cycle

// --- naive baseline --------------------------------------------------------
class NaiveScanBlockManager {
 public:
  explicit NaiveScanBlockManager(std::uint32_t blocks) : blocks_(blocks) {}

  bool allocate(RequestId request, BlockTier tier, std::uint32_t count, const std::uint64_t* hashes) {
    std::uint32_t available = 0;
    for (const Block& b : blocks_) available += b.owner == 0 || b.cached ? 1U : 0U;
    if (available < count) return false;
    for (std::uint32_t i = 0; i < count; ++i) {
      Block& b = blocks_[take()];
      b = Block{request, tier, false, hashes[i], ++clock_};
    }
    return true;
  }

  void demote(RequestId request) {
    for (Block& b : blocks_) {
      if (b.owner == request && !b.cached && b.tier == BlockTier::kThinkActive)
        b.tier = BlockTier::kThinkComplete;
    }
  }

  void release_finished(RequestId request) {
    for (Block& b : blocks_) {
      if (b.owner == request && !b.cached) b.cached = true;
    }
  }

 private:
  struct Block {
    RequestId owner = 0;  // 0: free
    BlockTier tier = BlockTier::kOutputCritical;
    bool cached = false;
    std::uint64_t hash = 0;
    std::uint64_t last_used = 0;
  };

  // First free block, else the LRU cached block of the most evictable tier.
  std::size_t take() {
    std::size_t best = blocks_.size();
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      const Block& b = blocks_[i];
      if (b.owner == 0) return i;
      if (!b.cached) continue;
      if (best == blocks_.size() || b.tier < blocks_[best].tier ||
          (b.tier == blocks_[best].tier && b.last_used < blocks_[best].last_used)) {
        best = i;
      }
    }
    return best;
  }

  std::vector<Block> blocks_;
  std::uint64_t clock_ = 0;
};

// --- Meridian adapter with the same interface ---------------------------------
class MeridianBlockManager {
 public:
  explicit MeridianBlockManager(std::uint32_t blocks) : manager_(options(blocks)) {}

  bool allocate(RequestId request, BlockTier tier, std::uint32_t count, const std::uint64_t* hashes) {
    const auto result = manager_.allocate(request, tier, count, {hashes, count});
    return result.status == AllocStatus::kOk;
  }
  void demote(RequestId request) { benchmark::DoNotOptimize(manager_.demote_think_blocks(request)); }
  void release_finished(RequestId request) { manager_.release(request, ReleaseKind::kFinished); }

 private:
  static KvBlockManagerOptions options(std::uint32_t blocks) {
    KvBlockManagerOptions o;
    o.num_blocks = blocks;
    return o;
  }
  KvBlockManager manager_;
};

// --- the shared operation stream ---------------------------------------------
// kLiveRequests requests decode round-robin, one block at a time (odd ones
// answering: OutputCritical, even ones reasoning: ThinkActive); a request that
// reaches kBlocksPerRequest finishes and a new one takes its place.
template <typename Manager>
class BlockWorkload {
 public:
  BlockWorkload() : manager_(kBlocks), live_(kLiveRequests), held_(kLiveRequests, 0) {
    for (auto& id : live_) id = next_id_++;
    // Fill the pool with cached blocks so that allocations evict.
    while (allocations_ < kBlocks + kBlocks / 8) decode_one();
  }

  void decode_one() {
    const std::size_t slot = allocations_++ % kLiveRequests;
    const BlockTier tier = slot % 2 == 0 ? BlockTier::kThinkActive : BlockTier::kOutputCritical;
    const std::uint64_t hash = next_hash_++;
    if (!manager_.allocate(live_[slot], tier, 1, &hash)) throw std::logic_error("benchmark pool exhausted");
    if (++held_[slot] == kBlocksPerRequest) {
      manager_.release_finished(live_[slot]);
      live_[slot] = next_id_++;
      held_[slot] = 0;
    }
  }

  // One reasoning request from first think block to finish: allocate, ExitThink, release.
  void exit_think_cycle() {
    const RequestId id = next_id_++;
    std::uint64_t hashes[kExitThinkBlocks];
    for (auto& h : hashes) h = next_hash_++;
    if (!manager_.allocate(id, BlockTier::kThinkActive, kExitThinkBlocks, hashes)) {
      throw std::logic_error("benchmark pool exhausted");
    }
    manager_.demote(id);
    manager_.release_finished(id);
  }

 private:
  Manager manager_;
  std::vector<RequestId> live_;
  std::vector<std::uint32_t> held_;
  std::uint64_t allocations_ = 0;
  std::uint64_t next_hash_ = 1;
  RequestId next_id_ = 1;
};

template <typename Manager>
void run_decode(benchmark::State& state) {
  BlockWorkload<Manager> workload;
  for (auto _ : state) workload.decode_one();
  state.SetItemsProcessed(state.iterations());  // one block allocated (one cached block evicted)
}

template <typename Manager>
void run_exit_think(benchmark::State& state) {
  BlockWorkload<Manager> workload;
  for (auto _ : state) workload.exit_think_cycle();
  state.SetItemsProcessed(state.iterations() * kExitThinkBlocks);  // per block
}

void BM_NaiveKvAllocateEvict(benchmark::State& state) { run_decode<NaiveScanBlockManager>(state); }
BENCHMARK(BM_NaiveKvAllocateEvict);
void BM_KvAllocateEvict(benchmark::State& state) { run_decode<MeridianBlockManager>(state); }
BENCHMARK(BM_KvAllocateEvict);

void BM_NaiveKvExitThinkCycle(benchmark::State& state) { run_exit_think<NaiveScanBlockManager>(state); }
BENCHMARK(BM_NaiveKvExitThinkCycle);
void BM_KvExitThinkCycle(benchmark::State& state) { run_exit_think<MeridianBlockManager>(state); }
BENCHMARK(BM_KvExitThinkCycle);

}  // namespace
