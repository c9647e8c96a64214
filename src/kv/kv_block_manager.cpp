#include "meridian/kv_block_manager.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <absl/container/flat_hash_map.h>
#include <fmt/format.h>

#include "kv/block_lists.h"

namespace meridian {

using kv_detail::BlockLists;
using kv_detail::kCachedBase;
using kv_detail::kFreeList;
using kv_detail::kNil;

namespace {

constexpr std::size_t idx(BlockTier tier) noexcept { return static_cast<std::size_t>(tier); }
constexpr std::uint8_t live_list(BlockTier tier) noexcept { return static_cast<std::uint8_t>(tier); }
constexpr std::uint8_t cached_list(BlockTier tier) noexcept {
  return static_cast<std::uint8_t>(kCachedBase + static_cast<std::uint8_t>(tier));
}
constexpr std::array kEvictionOrder{BlockTier::kThinkComplete, BlockTier::kThinkActive,
                                    BlockTier::kOutputCritical};

}  // namespace

std::uint64_t think_block_limit(double think_phase_memory_fraction, std::uint64_t total_blocks) noexcept {
  return static_cast<std::uint64_t>(
      std::floor(think_phase_memory_fraction * static_cast<double>(total_blocks)));
}

std::uint64_t KvBlockCounters::evictions(BlockTier tier) const noexcept {
  const std::size_t t = idx(tier);
  return evicted_cached[t] + offloaded_live[t] + released_live[t] +
         (tier == BlockTier::kThinkComplete ? dropped_think_complete : 0);
}

KvBlockManagerOptions KvBlockManagerOptions::from_config(const MeridianConfig& config,
                                                         std::uint64_t capacity_bytes) {
  validate_or_throw(config.kv_memory);
  KvBlockManagerOptions o;
  o.block_size_bytes = config.kv_memory.block_size_bytes;
  const std::uint64_t blocks = o.block_size_bytes == 0 ? 0 : capacity_bytes / o.block_size_bytes;
  if (blocks > std::numeric_limits<std::uint32_t>::max()) {
    throw InvalidArgument(fmt::format(
        "kv_memory: capacity_bytes / block_size_bytes = {} blocks exceeds the supported 4294967295", blocks));
  }
  o.num_blocks = static_cast<std::uint32_t>(blocks);
  o.think_phase_memory_fraction = config.kv_memory.think_phase_memory_fraction;
  o.aggressive_think_eviction = config.kv_memory.aggressive_think_eviction;
  o.fabric_offload = config.disagg.enabled && config.disagg.fabric != FabricKind::kNone;
  return o;
}

struct KvBlockManager::Impl {
  struct Block {
    std::uint64_t hash = 0;
    RequestId owner = 0;  ///< last request to take it; exact when refs == 1
    std::uint32_t refs = 0;
    BlockTier tier = BlockTier::kOutputCritical;
    bool hashed = false;
  };

  KvBlockManagerOptions options;
  std::uint32_t think_limit = 0;
  BlockLists lists;
  std::vector<Block> blocks;
  absl::flat_hash_map<RequestId, std::vector<BlockId>> owned;
  absl::flat_hash_map<std::uint64_t, BlockId> by_hash;
  KvBlockCounters counters;

  explicit Impl(const KvBlockManagerOptions& o)
      : options(o),
        think_limit(
            static_cast<std::uint32_t>(think_block_limit(o.think_phase_memory_fraction, o.num_blocks))),
        lists(o.num_blocks),
        blocks(o.num_blocks) {}

  [[nodiscard]] std::uint32_t cached_total() const {
    return lists.size(cached_list(BlockTier::kThinkComplete)) +
           lists.size(cached_list(BlockTier::kThinkActive)) +
           lists.size(cached_list(BlockTier::kOutputCritical));
  }
  [[nodiscard]] std::uint32_t offloadable() const {
    return options.fabric_offload ? lists.size(live_list(BlockTier::kThinkComplete)) : 0;
  }
  [[nodiscard]] std::uint32_t allocatable() const {
    return lists.size(kFreeList) + cached_total() + offloadable();
  }

  void forget_hash(BlockId b) {
    Block& blk = blocks[b];
    if (blk.hashed) {
      by_hash.erase(blk.hash);
      blk.hashed = false;
    }
  }

  // Takes one block for a new allocation. Feasibility was checked by the caller.
  BlockId take_one(std::vector<ReclaimedBlock>& reclaimed) {
    if (lists.size(kFreeList) > 0) return lists.front(kFreeList);
    for (BlockTier tier : kEvictionOrder) {
      const std::uint8_t list = cached_list(tier);
      if (lists.size(list) == 0) continue;
      const BlockId b = lists.front(list);
      forget_hash(b);
      ++counters.evicted_cached[idx(tier)];
      reclaimed.push_back({b, 0, tier, ReclaimAction::kEvictCached});
      return b;
    }
    // Fabric offload of a live ThinkComplete block (refs == 1 by construction).
    const BlockId b = lists.front(live_list(BlockTier::kThinkComplete));
    Block& blk = blocks[b];
    auto& list = owned[blk.owner];
    list.erase(std::find(list.begin(), list.end(), b));
    if (list.empty()) owned.erase(blk.owner);
    forget_hash(b);
    ++counters.offloaded_live[idx(BlockTier::kThinkComplete)];
    reclaimed.push_back({b, blk.owner, BlockTier::kThinkComplete, ReclaimAction::kOffload});
    blk.refs = 0;
    return b;
  }

  void to_free(BlockId b) {
    forget_hash(b);
    blocks[b].refs = 0;
    blocks[b].owner = 0;
    lists.move_to_back(kFreeList, b);
  }
};

KvBlockManager::KvBlockManager(const KvBlockManagerOptions& options) {
  if (options.num_blocks == 0) {
    throw InvalidArgument("kv_memory: the KV capacity holds 0 blocks (capacity_bytes < block_size_bytes?)");
  }
  if (!(options.think_phase_memory_fraction > 0.0 && options.think_phase_memory_fraction < 1.0)) {
    throw InvalidArgument(fmt::format("kv_memory.think_phase_memory_fraction must be in (0, 1); got {}",
                                      options.think_phase_memory_fraction));
  }
  impl_ = std::make_unique<Impl>(options);
}

KvBlockManager::~KvBlockManager() = default;
KvBlockManager::KvBlockManager(KvBlockManager&&) noexcept = default;
KvBlockManager& KvBlockManager::operator=(KvBlockManager&&) noexcept = default;

AllocResult KvBlockManager::allocate(RequestId request, BlockTier tier, std::uint32_t count,
                                     std::span<const std::uint64_t> hashes) {
  Impl& m = *impl_;
  AllocResult result;
  if (tier == BlockTier::kThinkComplete) {
    result.status = AllocStatus::kInvalidTier;
    return result;
  }
  if (count > m.allocatable()) {
    result.status = AllocStatus::kOutOfBlocks;
    ++m.counters.failed_allocations;
    return result;
  }
  if (count == 0) return result;
  result.blocks.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    const BlockId b = m.take_one(result.reclaimed);
    Impl::Block& blk = m.blocks[b];
    blk.refs = 1;
    blk.owner = request;
    blk.tier = tier;
    if (i < hashes.size() && m.by_hash.try_emplace(hashes[i], b).second) {
      blk.hash = hashes[i];
      blk.hashed = true;
    }
    m.lists.move_to_back(live_list(tier), b);
    result.blocks.push_back(b);
  }
  // Taken only now: an offload above may have erased another owner's entry.
  auto& list = m.owned[request];
  list.insert(list.end(), result.blocks.begin(), result.blocks.end());
  m.counters.allocated_blocks += count;
  return result;
}

std::uint32_t KvBlockManager::match_prefix(std::span<const std::uint64_t> hashes) const {
  const Impl& m = *impl_;
  std::uint32_t matched = 0;
  for (std::uint64_t h : hashes) {
    auto it = m.by_hash.find(h);
    if (it == m.by_hash.end()) break;
    const Impl::Block& blk = m.blocks[it->second];
    // Reasoning of finished turns is never part of a later prompt; never share it.
    if (blk.tier == BlockTier::kThinkComplete) break;
    ++matched;
  }
  return matched;
}

std::uint32_t KvBlockManager::attach_prefix(RequestId request, std::span<const std::uint64_t> hashes) {
  Impl& m = *impl_;
  const std::uint32_t matched = match_prefix(hashes);
  m.counters.prefix_lookup_blocks += hashes.size();
  m.counters.prefix_hit_blocks += matched;
  if (matched == 0) return 0;
  auto& list = m.owned[request];
  for (std::uint32_t i = 0; i < matched; ++i) {
    const BlockId b = m.by_hash.find(hashes[i])->second;
    Impl::Block& blk = m.blocks[b];
    if (blk.refs++ == 0) m.lists.move_to_back(live_list(blk.tier), b);
    blk.owner = request;
    list.push_back(b);
  }
  return matched;
}

std::vector<BlockId> KvBlockManager::demote_think_blocks(RequestId request) {
  Impl& m = *impl_;
  std::vector<BlockId> dropped;
  auto it = m.owned.find(request);
  if (it == m.owned.end()) return dropped;
  auto& list = it->second;
  std::size_t keep = 0;
  for (BlockId b : list) {
    Impl::Block& blk = m.blocks[b];
    if (blk.tier == BlockTier::kThinkActive && blk.refs == 1) {
      ++m.counters.demoted_blocks;
      blk.tier = BlockTier::kThinkComplete;
      blk.owner = request;  // exact from now on: live ThinkComplete blocks are never shared
      if (m.options.aggressive_think_eviction) {
        ++m.counters.dropped_think_complete;
        m.to_free(b);
        dropped.push_back(b);
        continue;
      }
      m.lists.move_to_back(live_list(BlockTier::kThinkComplete), b);
    }
    list[keep++] = b;
  }
  list.resize(keep);
  if (list.empty()) m.owned.erase(it);
  return dropped;
}

void KvBlockManager::release(RequestId request, ReleaseKind kind, bool answer_phase) {
  Impl& m = *impl_;
  auto it = m.owned.find(request);
  if (it == m.owned.end()) return;
  const bool preempted = kind != ReleaseKind::kFinished;
  const bool keep_cached = kind == ReleaseKind::kFinished || kind == ReleaseKind::kRecompute;
  for (BlockId b : it->second) {
    Impl::Block& blk = m.blocks[b];
    if (--blk.refs > 0) continue;
    if (preempted) ++m.counters.released_live[idx(blk.tier)];
    if (keep_cached && blk.hashed) {
      m.lists.move_to_back(cached_list(blk.tier), b);
    } else {
      m.to_free(b);
    }
  }
  if (preempted && answer_phase) ++m.counters.output_critical_eviction_events;
  m.owned.erase(it);
}

void KvBlockManager::touch(RequestId request) {
  Impl& m = *impl_;
  auto it = m.owned.find(request);
  if (it == m.owned.end()) return;
  for (BlockId b : it->second) m.lists.move_to_back(m.lists.list_of(b), b);
}

std::span<const BlockId> KvBlockManager::blocks_of(RequestId request) const {
  auto it = impl_->owned.find(request);
  if (it == impl_->owned.end()) return {};
  return it->second;
}

bool KvBlockManager::holds_blocks(RequestId request) const { return impl_->owned.contains(request); }

namespace {
void check_block(BlockId block, std::size_t num_blocks) {
  if (block >= num_blocks) {
    throw OutOfRange(fmt::format("block {} out of range: the manager has {} blocks", block, num_blocks));
  }
}
}  // namespace

BlockTier KvBlockManager::tier_of(BlockId block) const {
  check_block(block, impl_->blocks.size());
  return impl_->blocks[block].tier;
}

bool KvBlockManager::is_free(BlockId block) const {
  check_block(block, impl_->blocks.size());
  return impl_->lists.list_of(block) == kFreeList;
}

KvBlockUsage KvBlockManager::usage() const noexcept {
  const Impl& m = *impl_;
  KvBlockUsage u;
  u.total_blocks = m.options.num_blocks;
  u.free_blocks = m.lists.size(kFreeList);
  for (BlockTier tier : kEvictionOrder) {
    u.live_blocks[idx(tier)] = m.lists.size(live_list(tier));
    u.cached_blocks[idx(tier)] = m.lists.size(cached_list(tier));
  }
  u.think_block_limit = m.think_limit;
  u.block_size_bytes = m.options.block_size_bytes;
  u.allocatable_blocks = m.allocatable();
  return u;
}

const KvBlockCounters& KvBlockManager::counters() const noexcept { return impl_->counters; }
const KvBlockManagerOptions& KvBlockManager::options() const noexcept { return impl_->options; }

std::string KvBlockManager::check_invariants() const {
  const Impl& m = *impl_;
  const std::uint32_t n = m.options.num_blocks;
  std::array<std::uint32_t, kv_detail::kListCount> seen{};
  std::vector<std::uint8_t> visited(n, 0);
  for (std::uint8_t list = 0; list < kv_detail::kListCount; ++list) {
    std::uint32_t count = 0;
    for (std::uint32_t b = m.lists.front(list); b != kNil; b = m.lists.next(b)) {
      if (b >= n) return fmt::format("list {} holds out-of-range block {}", list, b);
      if (visited[b]++ != 0) return fmt::format("block {} is in more than one list", b);
      if (m.lists.list_of(b) != list) {
        return fmt::format("block {} is linked in list {} but tagged {}", b, list, m.lists.list_of(b));
      }
      const Impl::Block& blk = m.blocks[b];
      if (list != kFreeList &&
          static_cast<std::uint8_t>(list % kCachedBase) != static_cast<std::uint8_t>(blk.tier)) {
        return fmt::format("block {} of tier {} sits in list {}", b, to_string(blk.tier), list);
      }
      const bool live = list < kCachedBase;
      if (live != (blk.refs > 0)) return fmt::format("block {} in list {} has {} refs", b, list, blk.refs);
      if (list >= kCachedBase && list != kFreeList && !blk.hashed) {
        return fmt::format("cached block {} has no hash", b);
      }
      ++count;
    }
    if (count != m.lists.size(list)) {
      return fmt::format("list {} size {} but {} linked", list, m.lists.size(list), count);
    }
    seen[list] = count;
  }
  for (std::uint32_t b = 0; b < n; ++b) {
    if (visited[b] == 0) return fmt::format("block {} is in no list", b);
  }
  absl::flat_hash_map<BlockId, std::uint32_t> refs;
  for (const auto& [request, list] : m.owned) {
    if (list.empty()) return fmt::format("request {} has an empty block list", request);
    for (BlockId b : list) ++refs[b];
  }
  for (std::uint32_t b = 0; b < n; ++b) {
    const auto it = refs.find(b);
    const std::uint32_t expected = it == refs.end() ? 0 : it->second;
    if (m.blocks[b].refs != expected) {
      return fmt::format("block {} refs {} but held by {} requests", b, m.blocks[b].refs, expected);
    }
    if (m.blocks[b].tier == BlockTier::kThinkComplete && m.blocks[b].refs > 1) {
      return fmt::format("live ThinkComplete block {} is shared", b);
    }
  }
  for (const auto& [hash, b] : m.by_hash) {
    if (!m.blocks[b].hashed || m.blocks[b].hash != hash) {
      return fmt::format("hash index points at block {} wrongly", b);
    }
  }
  return {};
}

std::string_view to_string(BlockTier tier) noexcept {
  switch (tier) {
    case BlockTier::kThinkComplete: return "think_complete";
    case BlockTier::kThinkActive: return "think_active";
    case BlockTier::kOutputCritical: return "output_critical";
  }
  return "unknown";
}

std::string_view to_string(AllocStatus status) noexcept {
  switch (status) {
    case AllocStatus::kOk: return "ok";
    case AllocStatus::kOutOfBlocks: return "out_of_blocks";
    case AllocStatus::kInvalidTier: return "invalid_tier";
  }
  return "unknown";
}

std::string_view to_string(ReleaseKind kind) noexcept {
  switch (kind) {
    case ReleaseKind::kFinished: return "finished";
    case ReleaseKind::kRecompute: return "recompute";
    case ReleaseKind::kSwap: return "swap";
    case ReleaseKind::kOffload: return "offload";
    case ReleaseKind::kAbort: return "abort";
  }
  return "unknown";
}

}  // namespace meridian
