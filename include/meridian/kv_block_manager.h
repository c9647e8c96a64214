// Phase-aware KV block manager: three eviction tiers with LRU inside each,
// one-way demotion, per-request block lists and a prefix cache of finished
// turns (SPEC §3.6, ADR-0009).
//
// Thread-safety: KvBlockManager is NOT thread-safe. It belongs to the engine's
// scheduling loop (one thread); callers that share it must serialise calls.
// Ownership: the manager owns all block bookkeeping; returned spans point into
// it and stay valid until the next non-const call.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meridian/config.h"
#include "meridian/phase.h"

namespace meridian {

using BlockId = std::uint32_t;

/// Eviction tiers, in eviction order: kThinkComplete goes first.
/// A block's tier only ever moves down (ADR-0004): ThinkActive -> ThinkComplete.
enum class BlockTier : std::uint8_t {
  kThinkComplete = 0,   ///< reasoning of a request whose </think> was seen
  kThinkActive = 1,     ///< reasoning still being generated
  kOutputCritical = 2,  ///< prompt and answer: what the stream and the next turn need
};
inline constexpr std::size_t kBlockTierCount = 3;

/// What happened to a block that was taken from its owner or from the cache.
enum class ReclaimAction : std::uint8_t {
  kEvictCached = 0,  ///< a cached block of a finished (or preempted) request was reused
  kOffload = 1,      ///< a live ThinkComplete block moved to the disagg fabric
};

/// One block taken from somewhere other than the free list during an allocation.
/// `owner` is 0 for cached blocks (nobody holds them any more).
struct ReclaimedBlock {
  BlockId block = 0;
  RequestId owner = 0;
  BlockTier tier = BlockTier::kThinkComplete;
  ReclaimAction action = ReclaimAction::kEvictCached;

  friend bool operator==(const ReclaimedBlock&, const ReclaimedBlock&) = default;
};

enum class AllocStatus : std::uint8_t {
  kOk = 0,
  kOutOfBlocks = 1,  ///< not enough free + reclaimable blocks; nothing changed
  kInvalidTier = 3,  ///< allocations are ThinkActive or OutputCritical only
  kNotFound = 4,     ///< restore_remote: the request has no remote entries under that handle
};

struct AllocResult {
  AllocStatus status = AllocStatus::kOk;
  std::vector<BlockId> blocks;            ///< appended to the request's list, in order
  std::vector<ReclaimedBlock> reclaimed;  ///< owners to notify (offloads) and cache losses

  [[nodiscard]] bool ok() const noexcept { return status == AllocStatus::kOk; }
};

/// Why a request gives its blocks back.
enum class ReleaseKind : std::uint8_t {
  kFinished = 0,   ///< request done: hashed blocks stay cached for prefix hits
  kRecompute = 1,  ///< preempted, will be recomputed: hashed blocks stay cached
  kSwap = 2,       ///< preempted, KV copied to host: blocks freed
  kOffload = 3,    ///< preempted, KV moved to the fabric: blocks freed
  kAbort = 4,      ///< request aborted: blocks freed, nothing cached
};

struct KvBlockManagerOptions {
  std::uint32_t num_blocks = 0;  ///< > 0
  std::uint64_t block_size_bytes = 16384;
  /// (0, 1): soft share of ThinkActive blocks. Not enforced here (think KV may
  /// use the whole pool); the scheduler holds back new reasoning admissions
  /// while the pool is short and think KV is over it (ADR-0015).
  double think_phase_memory_fraction = 0.40;
  bool aggressive_think_eviction = false;  ///< drop ThinkComplete blocks at </think>
  bool fabric_offload = false;             ///< live ThinkComplete blocks may be offloaded
  /// release() gives blocks back tail first, as vLLM does (false: head first;
  /// the replay keeps it to measure the difference).
  bool release_tail_first = true;

  /// From [kv_memory] and [disagg]; capacity_bytes is the resolved KV budget.
  /// Throws ConfigError if [kv_memory] is invalid, InvalidArgument if the
  /// capacity holds more than 2^32-1 blocks.
  static KvBlockManagerOptions from_config(const MeridianConfig& config, std::uint64_t capacity_bytes);
};

/// Counters that count: every reclaimed or dropped block increments exactly one.
struct KvBlockCounters {
  std::uint64_t allocated_blocks = 0;
  std::uint64_t failed_allocations = 0;
  std::uint64_t evicted_cached[kBlockTierCount] = {};  ///< cached blocks reused, by tier
  std::uint64_t offloaded_live[kBlockTierCount] = {};  ///< live blocks moved to the fabric
  std::uint64_t released_live[kBlockTierCount] = {};   ///< live blocks given back by preemption/abort
  std::uint64_t dropped_think_complete = 0;            ///< aggressive_think_eviction drops
  std::uint64_t demoted_blocks = 0;                    ///< ThinkActive -> ThinkComplete
  /// User-visible degradation: live blocks of an answer-phase request taken away
  /// (preemption of an answer-phase request, or its blocks offloaded). Zero is the target.
  std::uint64_t output_critical_eviction_events = 0;
  std::uint64_t prefix_hit_blocks = 0;
  std::uint64_t prefix_lookup_blocks = 0;

  /// Per-tier evictions in the seeds' sense: cached + offloaded + released.
  [[nodiscard]] std::uint64_t evictions(BlockTier tier) const noexcept;
};

/// Point-in-time occupancy.
struct KvBlockUsage {
  std::uint32_t total_blocks = 0;
  std::uint32_t free_blocks = 0;
  std::uint32_t live_blocks[kBlockTierCount] = {};    ///< held by at least one request
  std::uint32_t cached_blocks[kBlockTierCount] = {};  ///< held by nobody, kept for prefix hits
  std::uint32_t think_block_limit = 0;                ///< soft share of live ThinkActive blocks
  std::uint64_t block_size_bytes = 0;

  /// Blocks an allocation could obtain right now without preempting anyone
  /// (free + cached, plus live ThinkComplete when fabric offload is on).
  std::uint32_t allocatable_blocks = 0;

  [[nodiscard]] std::uint32_t used_blocks() const noexcept { return total_blocks - free_blocks; }
  [[nodiscard]] std::uint64_t used_bytes() const noexcept {
    return std::uint64_t{used_blocks()} * block_size_bytes;
  }
  /// ThinkActive blocks below the soft share (0 when think KV is over it).
  [[nodiscard]] std::uint32_t think_headroom() const noexcept {
    const std::uint32_t live = live_blocks[static_cast<std::size_t>(BlockTier::kThinkActive)];
    return live >= think_block_limit ? 0 : think_block_limit - live;
  }
};

/// Where one remote (offloaded) block of a request lives: frame `frame` of
/// the fabric payload `handle` (a meridian::FabricHandle; a plain integer here
/// so the core does not depend on the fabric), holding a block of `tier`.
struct RemoteBlockRef {
  std::uint64_t handle = 0;
  std::uint32_t frame = 0;
  BlockTier tier = BlockTier::kThinkComplete;

  friend bool operator==(const RemoteBlockRef&, const RemoteBlockRef&) = default;
};

/// One entry of a request's logical block order: a local block, or a remote one.
struct BlockLocation {
  enum class Kind : std::uint8_t { kLocal = 0, kRemote = 1 };
  Kind kind = Kind::kLocal;
  BlockId block = 0;      ///< when kLocal
  RemoteBlockRef remote;  ///< when kRemote

  friend bool operator==(const BlockLocation&, const BlockLocation&) = default;
};

/// Which of a request's blocks offload_candidates() returns.
enum class OffloadScope : std::uint8_t {
  kThinkComplete = 0,  ///< ExitThink offload: finished reasoning only
  kAllTiers = 1,       ///< preemption offload: every tier
};

class KvBlockManager {
 public:
  /// Throws InvalidArgument (with the field name) on num_blocks == 0 or a
  /// fraction outside (0, 1).
  explicit KvBlockManager(const KvBlockManagerOptions& options);
  ~KvBlockManager();
  KvBlockManager(KvBlockManager&&) noexcept;
  KvBlockManager& operator=(KvBlockManager&&) noexcept;
  KvBlockManager(const KvBlockManager&) = delete;
  KvBlockManager& operator=(const KvBlockManager&) = delete;

  /// Appends `count` blocks of `tier` (ThinkActive or OutputCritical) to the
  /// request's list. Sources, in order: free list, cached blocks (ThinkComplete,
  /// then ThinkActive, then OutputCritical; LRU first), then live ThinkComplete
  /// blocks when fabric offload is on (not pinned ones). Feasibility is checked
  /// first: a failed allocation changes nothing. `hashes` (optional, one per block) makes the
  /// new blocks cacheable under those content hashes once the request ends.
  AllocResult allocate(RequestId request, BlockTier tier, std::uint32_t count,
                       std::span<const std::uint64_t> hashes = {});

  /// Attaches the longest run of cached or live blocks matching `hashes` (a
  /// chain hash per full prompt block) to the request. Returns the number of
  /// leading blocks reused; the caller skips prefill for them. Throws
  /// InvalidArgument, changing nothing, when the request already holds blocks
  /// (local or remote: a prefix is a request's first blocks), when a hash
  /// repeats (chain hashes are distinct) or for the reserved id 0, which
  /// allocate() also refuses.
  std::uint32_t attach_prefix(RequestId request, std::span<const std::uint64_t> hashes);
  /// Read-only: how many leading blocks attach_prefix would reuse; with
  /// `evictable`, also how many of those sit in the evictable cache (no live
  /// owner), which attaching would take out of allocatable_blocks.
  [[nodiscard]] std::uint32_t match_prefix(std::span<const std::uint64_t> hashes,
                                           std::uint32_t* evictable = nullptr) const;

  /// ExitThink: the request's ThinkActive blocks become ThinkComplete, or are
  /// dropped under aggressive_think_eviction (ids returned). O(blocks of request).
  std::vector<BlockId> demote_think_blocks(RequestId request);

  /// Gives back all of the request's blocks (and drops its remote entries and
  /// pins). Blocks still shared with another request stay live. `answer_phase`
  /// marks a preempted answer-phase request, which counts one output-critical
  /// eviction event. Blocks are given back tail first (release_tail_first),
  /// as vLLM frees them, so a cached prefix's head outlives its tail.
  /// O(blocks of request).
  void release(RequestId request, ReleaseKind kind, bool answer_phase = false);

  /// Moves the request's blocks to the most-recently-used end of their lists.
  void touch(RequestId request);

  /// The request's local blocks in logical order (remote entries left out).
  [[nodiscard]] std::span<const BlockId> blocks_of(RequestId request) const;
  /// Whether the request holds local blocks (remote entries do not count).
  [[nodiscard]] bool holds_blocks(RequestId request) const;
  /// Throw OutOfRange (naming the block and the pool size) for an id >= num_blocks.
  [[nodiscard]] BlockTier tier_of(BlockId block) const;
  [[nodiscard]] bool is_free(BlockId block) const;
  [[nodiscard]] KvBlockUsage usage() const noexcept;
  [[nodiscard]] const KvBlockCounters& counters() const noexcept;
  [[nodiscard]] const KvBlockManagerOptions& options() const noexcept;

  // ---- Remote blocks (disaggregated KV, SPEC §3.10) ----------------------
  // The offloader (meridian/kv_offload.h) moves a request's blocks to a fabric
  // in three steps: pin() the blocks it copies (allocate()'s lazy offload path
  // never takes a pinned block, attach_prefix() never shares one and
  // aggressive_think_eviction never drops one), mark_remote()
  // when the fabric commits (the local slots are freed and the request keeps
  // remote entries in the blocks' logical positions), restore_remote() or
  // forget_remote() when the request needs them back. release() drops a
  // request's remote entries and pins; the caller releases the fabric handles.

  /// Live, unshared, unpinned blocks of the request in list order:
  /// ThinkComplete ones (kThinkComplete) or every tier (kAllTiers).
  [[nodiscard]] std::vector<BlockId> offload_candidates(
      RequestId request, OffloadScope scope = OffloadScope::kThinkComplete) const;
  /// Pins blocks of the request under `token` (nonzero, the caller's batch id).
  /// Throws InvalidArgument (naming the block) if one is not held by the
  /// request alone or is already pinned; nothing changes then.
  void pin(RequestId request, std::span<const BlockId> blocks, std::uint64_t token);
  /// Unpins those of `blocks` still pinned under `token`; others are ignored
  /// (a released request's blocks may already belong to someone else).
  void unpin(std::span<const BlockId> blocks, std::uint64_t token) noexcept;
  /// The token a block is pinned under, 0 when it is not pinned.
  [[nodiscard]] std::uint64_t pin_token(BlockId block) const;
  /// Commit of an offload: `blocks` (pinned for `request`, refs[i] says where
  /// blocks[i] went) leave the pool and become remote entries in place.
  /// Throws InvalidArgument on a size mismatch, a block not pinned by the
  /// request, a ref whose tier differs from the block's, frames of a handle
  /// that are not 0..n-1 each once, or a handle the request already holds
  /// remote blocks under; nothing changes then.
  void mark_remote(RequestId request, std::span<const BlockId> blocks, std::span<const RemoteBlockRef> refs);
  /// The request's blocks in logical order, local and remote (empty if none).
  [[nodiscard]] std::vector<BlockLocation> block_locations(RequestId request) const;
  /// Distinct fabric handles of the request's remote entries, in first-use order.
  [[nodiscard]] std::vector<std::uint64_t> remote_handles(RequestId request) const;
  /// The request's remote entries under `handle`, in frame order.
  [[nodiscard]] std::vector<RemoteBlockRef> remote_entries(RequestId request, std::uint64_t handle) const;
  /// Remote entries of all requests.
  [[nodiscard]] std::uint64_t remote_block_count() const noexcept;
  /// Allocates local blocks for the request's remote entries under `handle`
  /// (same sources and feasibility rule as allocate(); any tier) and puts them
  /// back in their logical positions with their tier; the lazy offload path
  /// leaves this request's own blocks alone (result.reclaimed names the owners
  /// of any other blocks it took). result.blocks is in frame order. kNotFound
  /// if there are no such entries, kOutOfBlocks (nothing changed) if the pool
  /// cannot take them now.
  AllocResult restore_remote(RequestId request, std::uint64_t handle);
  /// Drops the request's remote entries under `handle` (payload lost or
  /// corrupt: the caller recomputes them). Returns how many were dropped.
  std::uint32_t forget_remote(RequestId request, std::uint64_t handle);

  /// Full consistency check (every block in exactly one tier list or free,
  /// counts match, ref counts match the request lists, no block twice in one
  /// request's list, no list under the reserved id 0, live ThinkComplete
  /// blocks unshared, pins on live unshared blocks, remote entries well
  /// placed). The think share is soft (ADR-0015), so it is not checked.
  /// O(num_blocks); for tests and debug builds. Returns an empty string when
  /// consistent, else a description of the first violation.
  [[nodiscard]] std::string check_invariants() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The soft share of ThinkActive blocks: think_phase_memory_fraction of
/// `total_blocks`, rounded down. Only the scheduler's admission reads it.
[[nodiscard]] std::uint64_t think_block_limit(double think_phase_memory_fraction,
                                              std::uint64_t total_blocks) noexcept;

[[nodiscard]] std::string_view to_string(BlockTier tier) noexcept;
[[nodiscard]] std::string_view to_string(AllocStatus status) noexcept;
[[nodiscard]] std::string_view to_string(ReleaseKind kind) noexcept;

}  // namespace meridian
