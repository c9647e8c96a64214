#include "meridian/kv_block_manager.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <utility>

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

// Request id 0 is the manager's "no owner" mark; an API call naming it would
// make a block look unowned while a request holds it.
void check_request_id(RequestId request, std::string_view call) {
  if (request == 0) {
    throw InvalidArgument(fmt::format("KvBlockManager::{}: request id 0 is reserved (no owner)", call));
  }
}

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
    std::uint64_t pin = 0;  ///< offload batch token while pinned (live, refs == 1), else 0
  };
  /// A remote entry sits before the request's local block number local_before.
  struct RemoteEntry {
    std::uint32_t local_before = 0;
    RemoteBlockRef ref;
  };
  /// One position of a request's logical block order.
  struct Slot {
    bool remote = false;
    BlockId block = 0;
    RemoteBlockRef ref;
  };

  KvBlockManagerOptions options;
  std::uint32_t think_limit = 0;
  BlockLists lists;
  std::vector<Block> blocks;
  absl::flat_hash_map<RequestId, std::vector<BlockId>> owned;
  absl::flat_hash_map<std::uint64_t, BlockId> by_hash;
  KvBlockCounters counters;
  /// Remote entries per request, ordered by logical position.
  absl::flat_hash_map<RequestId, std::vector<RemoteEntry>> remote;
  std::uint64_t remote_total = 0;
  std::uint32_t pinned_think_complete = 0;  ///< pinned blocks in the live ThinkComplete list

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
    return options.fabric_offload ? lists.size(live_list(BlockTier::kThinkComplete)) - pinned_think_complete
                                  : 0;
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
  // `keep_owner`'s own blocks are not offloaded (restore_remote for that request).
  BlockId take_one(std::vector<ReclaimedBlock>& reclaimed, RequestId keep_owner = 0) {
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
    // Fabric offload of a live ThinkComplete block (refs == 1 by construction),
    // skipping blocks pinned by an offload batch in flight.
    BlockId b = lists.front(live_list(BlockTier::kThinkComplete));
    while (blocks[b].pin != 0 || (keep_owner != 0 && blocks[b].owner == keep_owner)) b = lists.next(b);
    Block& blk = blocks[b];
    auto& list = owned[blk.owner];
    const auto pos = std::find(list.begin(), list.end(), b);
    shift_remote_after_erase(blk.owner, static_cast<std::uint32_t>(pos - list.begin()));
    list.erase(pos);
    if (list.empty()) owned.erase(blk.owner);
    forget_hash(b);
    ++counters.offloaded_live[idx(BlockTier::kThinkComplete)];
    reclaimed.push_back({b, blk.owner, BlockTier::kThinkComplete, ReclaimAction::kOffload});
    blk.refs = 0;
    return b;
  }

  void clear_pin(BlockId b) {
    Block& blk = blocks[b];
    if (blk.pin == 0) return;
    if (blk.tier == BlockTier::kThinkComplete) --pinned_think_complete;
    blk.pin = 0;
  }

  // The owner's local block number `erased` left its list: later remote
  // entries now sit one local block earlier.
  void shift_remote_after_erase(RequestId owner, std::uint32_t erased) {
    auto it = remote.find(owner);
    if (it == remote.end()) return;
    for (RemoteEntry& e : it->second) {
      if (e.local_before > erased) --e.local_before;
    }
  }

  [[nodiscard]] std::vector<Slot> logical(RequestId request) const {
    std::vector<Slot> slots;
    const auto own = owned.find(request);
    const auto rem = remote.find(request);
    const std::vector<BlockId> no_blocks;
    const std::vector<RemoteEntry> no_entries;
    const auto& local = own == owned.end() ? no_blocks : own->second;
    const auto& entries = rem == remote.end() ? no_entries : rem->second;
    slots.reserve(local.size() + entries.size());
    std::size_t e = 0;
    for (std::size_t k = 0; k <= local.size(); ++k) {
      for (; e < entries.size() && entries[e].local_before <= k; ++e) {
        slots.push_back({true, 0, entries[e].ref});
      }
      if (k < local.size()) slots.push_back({false, local[k], {}});
    }
    return slots;
  }

  // Writes a request's logical order back into `owned` and `remote`.
  void store(RequestId request, const std::vector<Slot>& slots) {
    std::vector<BlockId> local;
    std::vector<RemoteEntry> entries;
    for (const Slot& slot : slots) {
      if (slot.remote) {
        entries.push_back({static_cast<std::uint32_t>(local.size()), slot.ref});
      } else {
        local.push_back(slot.block);
      }
    }
    if (auto it = remote.find(request); it != remote.end()) {
      remote_total -= it->second.size();
      remote.erase(it);
    }
    remote_total += entries.size();
    if (!entries.empty()) remote[request] = std::move(entries);
    if (local.empty()) {
      owned.erase(request);
    } else {
      owned[request] = std::move(local);
    }
  }

  void to_free(BlockId b) {
    clear_pin(b);
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
  check_request_id(request, "allocate");
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

std::uint32_t KvBlockManager::match_prefix(std::span<const std::uint64_t> hashes,
                                           std::uint32_t* evictable) const {
  const Impl& m = *impl_;
  std::uint32_t matched = 0;
  if (evictable != nullptr) *evictable = 0;
  for (std::uint64_t h : hashes) {
    auto it = m.by_hash.find(h);
    if (it == m.by_hash.end()) break;
    const Impl::Block& blk = m.blocks[it->second];
    // Reasoning of finished turns is never part of a later prompt; never share it.
    if (blk.tier == BlockTier::kThinkComplete) break;
    // A block being offloaded is about to leave the pool; never share it.
    if (blk.pin != 0) break;
    ++matched;
    if (evictable != nullptr && blk.refs == 0) ++*evictable;
  }
  return matched;
}

std::uint32_t KvBlockManager::attach_prefix(RequestId request, std::span<const std::uint64_t> hashes) {
  Impl& m = *impl_;
  check_request_id(request, "attach_prefix");
  // A prefix is the start of a request's blocks: attached twice, or after its
  // own blocks, the list no longer matches its tokens and the caller would skip
  // prefill it has not done.
  const auto own = m.owned.find(request);
  const auto rem = m.remote.find(request);
  const std::size_t held =
      (own == m.owned.end() ? 0 : own->second.size()) + (rem == m.remote.end() ? 0 : rem->second.size());
  if (held != 0) {
    throw InvalidArgument(
        fmt::format("KvBlockManager::attach_prefix: request {} already holds {} blocks; a "
                    "prefix attaches only before its first block",
                    request, held));
  }
  // Chain hashes cover everything before them, so one never repeats; a
  // repeated hash would attach one block twice.
  absl::flat_hash_map<std::uint64_t, std::size_t> first_at;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    if (const auto [it, fresh] = first_at.try_emplace(hashes[i], i); !fresh) {
      throw InvalidArgument(fmt::format(
          "KvBlockManager::attach_prefix: hashes[{}] repeats hashes[{}] ({:#x}); chain hashes are distinct",
          i, it->second, hashes[i]));
    }
  }
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
  // kept_before[k]: local blocks kept among the first k, to re-place remote entries.
  std::vector<std::uint32_t> kept_before;
  const bool has_remote = m.remote.contains(request);
  if (has_remote) kept_before.reserve(list.size() + 1);
  for (BlockId b : list) {
    if (has_remote) kept_before.push_back(static_cast<std::uint32_t>(keep));
    Impl::Block& blk = m.blocks[b];
    if (blk.tier == BlockTier::kThinkActive && blk.refs == 1) {
      ++m.counters.demoted_blocks;
      blk.tier = BlockTier::kThinkComplete;
      blk.owner = request;  // exact from now on: live ThinkComplete blocks are never shared
      if (blk.pin != 0) ++m.pinned_think_complete;
      // A pinned block is on its way to the fabric: it is not dropped here.
      if (m.options.aggressive_think_eviction && blk.pin == 0) {
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
  if (has_remote) {
    kept_before.push_back(static_cast<std::uint32_t>(keep));
    for (Impl::RemoteEntry& e : m.remote[request]) e.local_before = kept_before[e.local_before];
  }
  if (list.empty()) m.owned.erase(it);
  return dropped;
}

void KvBlockManager::release(RequestId request, ReleaseKind kind, bool answer_phase) {
  Impl& m = *impl_;
  if (auto rem = m.remote.find(request); rem != m.remote.end()) {
    m.remote_total -= rem->second.size();
    m.remote.erase(rem);
  }
  auto it = m.owned.find(request);
  if (it == m.owned.end()) return;
  const bool preempted = kind != ReleaseKind::kFinished;
  const bool keep_cached = kind == ReleaseKind::kFinished || kind == ReleaseKind::kRecompute;
  // Tail first, as vLLM frees (single_type_kv_cache_manager.free): the tail
  // joins the LRU lists first and is reclaimed first, so a prefix's head, the
  // part other requests can share, stays cached longest.
  const std::vector<BlockId>& owned = it->second;
  const bool tail_first = m.options.release_tail_first;
  for (std::size_t i = 0; i < owned.size(); ++i) {
    const BlockId b = owned[tail_first ? owned.size() - 1 - i : i];
    Impl::Block& blk = m.blocks[b];
    if (--blk.refs > 0) continue;
    m.clear_pin(b);
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

// ---- Remote blocks ----------------------------------------------------------

std::vector<BlockId> KvBlockManager::offload_candidates(RequestId request, OffloadScope scope) const {
  const Impl& m = *impl_;
  std::vector<BlockId> out;
  const auto it = m.owned.find(request);
  if (it == m.owned.end()) return out;
  for (BlockId b : it->second) {
    const Impl::Block& blk = m.blocks[b];
    if (blk.refs != 1 || blk.pin != 0) continue;
    if (scope == OffloadScope::kThinkComplete && blk.tier != BlockTier::kThinkComplete) continue;
    out.push_back(b);
  }
  return out;
}

void KvBlockManager::pin(RequestId request, std::span<const BlockId> blocks, std::uint64_t token) {
  Impl& m = *impl_;
  if (token == 0) throw InvalidArgument("KvBlockManager::pin: token must be nonzero");
  // `owner` is exact only for unshared blocks of their last taker; check the list itself.
  absl::flat_hash_map<BlockId, bool> held;
  if (const auto it = m.owned.find(request); it != m.owned.end()) {
    for (BlockId b : it->second) held.try_emplace(b, false);
  }
  for (BlockId b : blocks) {
    check_block(b, m.blocks.size());
    const Impl::Block& blk = m.blocks[b];
    const auto mine = held.find(b);
    if (blk.refs != 1 || mine == held.end()) {
      throw InvalidArgument(fmt::format(
          "KvBlockManager::pin: block {} is not held by request {} alone (refs {})", b, request, blk.refs));
    }
    if (blk.pin != 0 || std::exchange(mine->second, true)) {
      throw InvalidArgument(fmt::format("KvBlockManager::pin: block {} is already pinned", b));
    }
  }
  for (BlockId b : blocks) {
    Impl::Block& blk = m.blocks[b];
    blk.pin = token;
    blk.owner = request;  // exact while pinned: a pinned block is never shared
    if (blk.tier == BlockTier::kThinkComplete) ++m.pinned_think_complete;
  }
}

void KvBlockManager::unpin(std::span<const BlockId> blocks, std::uint64_t token) noexcept {
  Impl& m = *impl_;
  for (BlockId b : blocks) {
    if (b < m.blocks.size() && token != 0 && m.blocks[b].pin == token) m.clear_pin(b);
  }
}

std::uint64_t KvBlockManager::pin_token(BlockId block) const {
  check_block(block, impl_->blocks.size());
  return impl_->blocks[block].pin;
}

void KvBlockManager::mark_remote(RequestId request, std::span<const BlockId> blocks,
                                 std::span<const RemoteBlockRef> refs) {
  Impl& m = *impl_;
  if (blocks.size() != refs.size()) {
    throw InvalidArgument(
        fmt::format("KvBlockManager::mark_remote: {} blocks but {} remote refs", blocks.size(), refs.size()));
  }
  absl::flat_hash_map<BlockId, std::size_t> index;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const BlockId b = blocks[i];
    check_block(b, m.blocks.size());
    const Impl::Block& blk = m.blocks[b];
    if (blk.pin == 0 || blk.refs != 1 || blk.owner != request) {
      throw InvalidArgument(
          fmt::format("KvBlockManager::mark_remote: block {} is not pinned by request {}", b, request));
    }
    if (refs[i].tier != blk.tier) {
      throw InvalidArgument(
          fmt::format("KvBlockManager::mark_remote: block {} is {} but its remote ref says {}", b,
                      to_string(blk.tier), to_string(refs[i].tier)));
    }
    if (!index.try_emplace(b, i).second) {
      throw InvalidArgument(fmt::format("KvBlockManager::mark_remote: block {} given twice", b));
    }
  }
  // One commit per fabric handle: its frames are 0..n-1, each once, and the
  // request holds nothing under it yet. Otherwise restore_remote() would put
  // one frame in two slots and leak another (check_invariants() only saw it
  // afterwards).
  const std::vector<std::uint64_t> used = remote_handles(request);
  absl::flat_hash_map<std::uint64_t, std::vector<std::uint8_t>> frames;
  for (const RemoteBlockRef& ref : refs) frames[ref.handle];
  for (auto& [handle, seen] : frames) {
    if (std::find(used.begin(), used.end(), handle) != used.end()) {
      throw InvalidArgument(
          fmt::format("KvBlockManager::mark_remote: request {} already holds remote blocks under handle {}",
                      request, handle));
    }
    std::size_t count = 0;
    for (const RemoteBlockRef& ref : refs) count += ref.handle == handle ? 1 : 0;
    seen.assign(count, 0);
  }
  for (const RemoteBlockRef& ref : refs) {
    std::vector<std::uint8_t>& seen = frames[ref.handle];
    if (ref.frame >= seen.size() || seen[ref.frame]++ != 0) {
      throw InvalidArgument(
          fmt::format("KvBlockManager::mark_remote: handle {}'s frames must be 0..{}, each "
                      "once; got frame {}",
                      ref.handle, seen.size() - 1, ref.frame));
    }
  }
  std::vector<Impl::Slot> slots = m.logical(request);
  for (Impl::Slot& slot : slots) {
    if (slot.remote) continue;
    const auto it = index.find(slot.block);
    if (it == index.end()) continue;
    const BlockId b = slot.block;
    slot = {true, 0, refs[it->second]};
    ++m.counters.offloaded_live[idx(m.blocks[b].tier)];
    m.to_free(b);
  }
  m.store(request, slots);
}

std::vector<BlockLocation> KvBlockManager::block_locations(RequestId request) const {
  std::vector<BlockLocation> out;
  for (const Impl::Slot& slot : impl_->logical(request)) {
    out.push_back(slot.remote ? BlockLocation{BlockLocation::Kind::kRemote, 0, slot.ref}
                              : BlockLocation{BlockLocation::Kind::kLocal, slot.block, {}});
  }
  return out;
}

std::vector<std::uint64_t> KvBlockManager::remote_handles(RequestId request) const {
  std::vector<std::uint64_t> out;
  const auto it = impl_->remote.find(request);
  if (it == impl_->remote.end()) return out;
  for (const Impl::RemoteEntry& e : it->second) {
    if (std::find(out.begin(), out.end(), e.ref.handle) == out.end()) out.push_back(e.ref.handle);
  }
  return out;
}

std::vector<RemoteBlockRef> KvBlockManager::remote_entries(RequestId request, std::uint64_t handle) const {
  std::vector<RemoteBlockRef> out;
  const auto it = impl_->remote.find(request);
  if (it == impl_->remote.end()) return out;
  for (const Impl::RemoteEntry& e : it->second) {
    if (e.ref.handle == handle) out.push_back(e.ref);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.frame < b.frame; });
  return out;
}

std::uint64_t KvBlockManager::remote_block_count() const noexcept { return impl_->remote_total; }

AllocResult KvBlockManager::restore_remote(RequestId request, std::uint64_t handle) {
  Impl& m = *impl_;
  AllocResult result;
  const std::vector<RemoteBlockRef> entries = remote_entries(request, handle);
  if (entries.empty()) {
    result.status = AllocStatus::kNotFound;
    return result;
  }
  const auto count = static_cast<std::uint32_t>(entries.size());
  // The request's own ThinkComplete blocks are not offloaded to make room for its restore.
  const auto own_offloadable =
      m.options.fabric_offload
          ? static_cast<std::uint32_t>(offload_candidates(request, OffloadScope::kThinkComplete).size())
          : 0U;
  if (count > m.allocatable() - own_offloadable) {
    result.status = AllocStatus::kOutOfBlocks;
    return result;
  }
  absl::flat_hash_map<std::uint32_t, BlockId> by_frame;
  for (const RemoteBlockRef& ref : entries) {
    const BlockId b = m.take_one(result.reclaimed, request);
    Impl::Block& blk = m.blocks[b];
    blk.refs = 1;
    blk.owner = request;
    blk.tier = ref.tier;
    m.lists.move_to_back(live_list(ref.tier), b);
    by_frame[ref.frame] = b;
    result.blocks.push_back(b);
  }
  std::vector<Impl::Slot> slots = m.logical(request);
  for (Impl::Slot& slot : slots) {
    if (slot.remote && slot.ref.handle == handle) slot = {false, by_frame.at(slot.ref.frame), {}};
  }
  m.store(request, slots);
  m.counters.allocated_blocks += count;
  return result;
}

std::uint32_t KvBlockManager::forget_remote(RequestId request, std::uint64_t handle) {
  Impl& m = *impl_;
  if (!m.remote.contains(request)) return 0;
  std::vector<Impl::Slot> slots = m.logical(request);
  const auto before = slots.size();
  std::erase_if(slots, [&](const Impl::Slot& s) { return s.remote && s.ref.handle == handle; });
  const auto dropped = static_cast<std::uint32_t>(before - slots.size());
  if (dropped > 0) m.store(request, slots);
  return dropped;
}

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
    if (request == 0) return "request id 0 (reserved: no owner) holds blocks";
    absl::flat_hash_map<BlockId, std::size_t> at;
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (const auto [it, fresh] = at.try_emplace(list[i], i); !fresh) {
        return fmt::format("request {} lists block {} twice (positions {} and {})", request, list[i],
                           it->second, i);
      }
      ++refs[list[i]];
    }
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
  std::uint32_t pinned_tc = 0;
  for (std::uint32_t b = 0; b < n; ++b) {
    const Impl::Block& blk = m.blocks[b];
    if (blk.pin == 0) continue;
    if (blk.refs != 1) return fmt::format("pinned block {} has {} refs", b, blk.refs);
    if (blk.tier == BlockTier::kThinkComplete) ++pinned_tc;
  }
  if (pinned_tc != m.pinned_think_complete) {
    return fmt::format("{} pinned ThinkComplete blocks counted, {} found", m.pinned_think_complete,
                       pinned_tc);
  }
  std::uint64_t remote_total = 0;
  for (const auto& [request, entries] : m.remote) {
    if (entries.empty()) return fmt::format("request {} has an empty remote list", request);
    const auto own = m.owned.find(request);
    const std::size_t local = own == m.owned.end() ? 0 : own->second.size();
    absl::flat_hash_map<std::uint64_t, std::uint32_t> frames;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const Impl::RemoteEntry& e = entries[i];
      if (e.local_before > local || (i > 0 && e.local_before < entries[i - 1].local_before)) {
        return fmt::format("request {} remote entry {} sits before local block {} of {}", request, i,
                           e.local_before, local);
      }
      if (idx(e.ref.tier) >= kBlockTierCount) {
        return fmt::format("request {} remote entry {} has a bad tier", request, i);
      }
      ++frames[e.ref.handle];
    }
    for (const auto& [handle, count] : frames) {
      std::vector<std::uint8_t> frame_seen(count, 0);
      for (const Impl::RemoteEntry& e : entries) {
        if (e.ref.handle != handle) continue;
        if (e.ref.frame >= count || frame_seen[e.ref.frame]++ != 0) {
          return fmt::format("request {} handle {} frames are not 0..{}", request, handle, count - 1);
        }
      }
    }
    remote_total += entries.size();
  }
  if (remote_total != m.remote_total) {
    return fmt::format("{} remote entries counted, {} found", m.remote_total, remote_total);
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
    case AllocStatus::kNotFound: return "not_found";
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
