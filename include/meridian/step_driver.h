// One engine step of Meridian over the KV block manager: the sequence every
// engine repeats — plan with the pool's free and think-share counts, carry out
// the plan's preemptions on the pool, allocate each item's new blocks in its
// tier (prompt and answer OutputCritical, reasoning ThinkActive), run the
// step, report it — written once. The replay simulator, the C++ tests' mini
// engine and the Python tests drive the scheduler through it; a real engine
// adapter that keeps its own block tables (vLLM) mirrors the same sequence.
//
// Thread-safety: not thread-safe (one engine loop). Ownership: the driver
// references the scheduler and the block manager, which must outlive it; the
// plan reference it returns is the scheduler's (valid until the next plan).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "meridian/kv_block_manager.h"
#include "meridian/scheduler.h"

namespace meridian {

/// How the pool gives back a preempted request's blocks for a reclaim mode:
/// recompute keeps hashed blocks cached (the victim re-hits them), swap and
/// offload free them (the KV lives elsewhere).
[[nodiscard]] ReleaseKind release_kind(ReclaimMode mode) noexcept;

/// Content hashes of `out.size()` blocks of `id`, starting at block index
/// `first` (prefix-cache identity). Without one, blocks are not hashed.
using BlockHasher = std::function<void(RequestId id, std::uint32_t first, std::span<std::uint64_t> out)>;

class StepDriver {
 public:
  StepDriver(DualQueueScheduler& scheduler, KvBlockManager& kv, BlockHasher hasher = {});

  /// Plans one step: `limits` with its KV counts taken from the pool, then
  /// the preemptions released on the pool and every item's blocks allocated.
  /// An item whose allocation fails (the engine's accounting diverged) makes
  /// no progress: it is listed in not_run() and passed on by complete().
  /// Aborted requests are the caller's to end (plan().aborted).
  const StepPlan& plan(StepLimits limits, std::int64_t now_ns);
  /// Items of the last plan that did not get their blocks.
  [[nodiscard]] const std::vector<RequestId>& not_run() const noexcept { return not_run_; }
  /// Blocks each of the last plan's preemptions took away (in plan order),
  /// counted on the pool just before the release.
  [[nodiscard]] const std::vector<std::uint32_t>& released_blocks() const noexcept { return released_; }
  /// The planned step ran and took `observed_ms`, ending at `end_ns`.
  void complete(double observed_ms, std::int64_t end_ns);

 private:
  bool allocate(RequestId id, BlockTier tier, std::uint32_t count);

  DualQueueScheduler& scheduler_;
  KvBlockManager& kv_;
  BlockHasher hasher_;
  std::vector<RequestId> not_run_;
  std::vector<std::uint32_t> released_;
  std::vector<std::uint64_t> hashes_;
};

}  // namespace meridian
