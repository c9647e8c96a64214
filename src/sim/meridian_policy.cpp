// Meridian in the replay engine: the real DualQueueScheduler plans each step
// against the real KvBlockManager's free and think-headroom counts; its
// preemptions are carried out on the pool (recompute keeps hashed blocks
// cached, swap and offload free them) and each item's blocks are allocated
// in their tier (answer/prompt OutputCritical, reasoning ThinkActive).
#include <algorithm>
#include <vector>

#include "sim/policy.h"

namespace meridian::sim::detail {
namespace {

ReleaseKind release_kind(ReclaimMode mode) {
  switch (mode) {
    case ReclaimMode::kRecompute: return ReleaseKind::kRecompute;
    case ReclaimMode::kSwap: return ReleaseKind::kSwap;
    case ReclaimMode::kOffload: return ReleaseKind::kOffload;
  }
  return ReleaseKind::kRecompute;
}

class MeridianPolicy final : public SchedulingPolicy {
 public:
  MeridianPolicy(const SchedulerOptions& options, StepCostModel model, StepLimits limits, KvPool& pool)
      : scheduler_(options, model), limits_(limits), pool_(pool) {
    // The prefix cache is consulted at admission, as vLLM does: a new
    // request's prompt, and a recompute victim's own blocks on re-admission.
    scheduler_.set_prefix_lookup([this](RequestId id, std::uint32_t tokens) {
      if (id >= looked_up_.size()) looked_up_.resize(id + 1, false);
      const bool first = !looked_up_[id];
      looked_up_[id] = true;
      return pool_.attach_prefix(id, tokens, first);
    });
  }

  void add(const NewRequest& request, std::int32_t /*priority*/) override { scheduler_.add(request); }
  void set_phase(RequestId id, Phase phase) override { scheduler_.set_phase(id, phase); }
  void finish(RequestId id) override { scheduler_.finish(id); }
  bool looks_up_prefix_at_arrival() const override { return false; }
  bool tiered_kv() const override { return true; }

  const EngineStep& plan(std::int64_t now_ns) override {
    step_.items.clear();
    step_.preempted.clear();
    step_.aborted.clear();
    not_run_.clear();
    const KvBlockUsage usage = pool_.kv().usage();
    StepLimits limits = limits_;
    limits.free_kv_blocks = usage.allocatable_blocks;
    limits.free_think_kv_blocks = usage.think_headroom();
    const StepPlan& plan = scheduler_.schedule(limits, now_ns);
    for (Preemption p : plan.preemptions) {
      p.blocks = pool_.held(p.id);  // what is actually taken away, for the report
      pool_.kv().release(p.id, release_kind(p.mode), p.phase == Phase::kOutputDecode);
      step_.preempted.push_back(p);
    }
    step_.aborted = plan.aborted;
    for (const ScheduledWork& w : plan.work) {
      const std::uint32_t answer_blocks = w.new_blocks - w.new_think_blocks;
      if (!pool_.allocate(w.id, BlockTier::kOutputCritical, answer_blocks) ||
          !pool_.allocate(w.id, BlockTier::kThinkActive, w.new_think_blocks)) {
        not_run_.push_back(w.id);
        continue;
      }
      const bool samples = w.kind != WorkKind::kPrefill || w.completes_prefill;
      step_.items.push_back({w.id, w.kind, w.tokens, w.context_tokens, samples});
    }
    step_.output_queue = plan.stats.output_queue_depth;
    step_.think_queue = plan.stats.think_queue_depth;
    step_.waiting = plan.stats.waiting_depth;
    step_.swapped = plan.stats.swapped_depth;
    return step_;
  }

  void complete(double ms, std::int64_t end_ns) override { scheduler_.complete_step(ms, end_ns, not_run_); }

 private:
  DualQueueScheduler scheduler_;
  StepLimits limits_;
  KvPool& pool_;
  EngineStep step_;
  std::vector<RequestId> not_run_;
  std::vector<bool> looked_up_;  // by request id: the first lookup counts in the prompt hit rate
};

}  // namespace

std::unique_ptr<SchedulingPolicy> make_meridian_policy(const SchedulerOptions& options, StepCostModel model,
                                                       StepLimits limits, KvPool& pool) {
  return std::make_unique<MeridianPolicy>(options, model, limits, pool);
}

}  // namespace meridian::sim::detail
