// StepDriver (step_driver.h): plan -> preemptions on the pool -> per-tier
// allocation -> complete, once for every engine.
#include "meridian/step_driver.h"

#include <utility>

namespace meridian {

ReleaseKind release_kind(ReclaimMode mode) noexcept {
  switch (mode) {
    case ReclaimMode::kRecompute: return ReleaseKind::kRecompute;
    case ReclaimMode::kSwap: return ReleaseKind::kSwap;
    case ReclaimMode::kOffload: return ReleaseKind::kOffload;
  }
  return ReleaseKind::kRecompute;
}

StepDriver::StepDriver(DualQueueScheduler& scheduler, KvBlockManager& kv, BlockHasher hasher)
    : scheduler_(scheduler), kv_(kv), hasher_(std::move(hasher)) {}

bool StepDriver::allocate(RequestId id, BlockTier tier, std::uint32_t count) {
  if (count == 0) return true;
  if (!hasher_) return kv_.allocate(id, tier, count).ok();
  hashes_.resize(count);
  hasher_(id, static_cast<std::uint32_t>(kv_.blocks_of(id).size()), hashes_);
  return kv_.allocate(id, tier, count, hashes_).ok();
}

const StepPlan& StepDriver::plan(StepLimits limits, std::int64_t now_ns) {
  not_run_.clear();
  released_.clear();
  const KvBlockUsage usage = kv_.usage();
  limits.free_kv_blocks = usage.allocatable_blocks;
  limits.free_think_kv_blocks = usage.think_headroom();
  const StepPlan& plan = scheduler_.schedule(limits, now_ns);
  for (RequestId id : plan.unattached) kv_.release(id, ReleaseKind::kFinished);  // back to the cache
  for (const Preemption& p : plan.preemptions) {
    released_.push_back(static_cast<std::uint32_t>(kv_.blocks_of(p.id).size()));
    kv_.release(p.id, release_kind(p.mode), p.phase == Phase::kOutputDecode);
  }
  for (const ScheduledWork& w : plan.work) {
    const std::uint32_t answer_blocks = w.new_blocks - w.new_think_blocks;
    if (!allocate(w.id, BlockTier::kOutputCritical, answer_blocks) ||
        !allocate(w.id, BlockTier::kThinkActive, w.new_think_blocks)) {
      not_run_.push_back(w.id);
    }
  }
  return plan;
}

void StepDriver::complete(double observed_ms, std::int64_t end_ns) {
  scheduler_.complete_step(observed_ms, end_ns, not_run_);
}

}  // namespace meridian
