// Meridian in the replay engine: the real DualQueueScheduler, driven by the
// core StepDriver over the real KvBlockManager (plan against the pool's
// counts, preemptions released on the pool — recompute keeps hashed blocks
// cached, swap and offload free them — and each item's blocks allocated in
// its tier: answer/prompt OutputCritical, reasoning ThinkActive).
#include <algorithm>
#include <span>
#include <vector>

#include "meridian/step_driver.h"
#include "sim/policy.h"

namespace meridian::sim::detail {
namespace {

class MeridianPolicy final : public SchedulingPolicy {
 public:
  MeridianPolicy(const SchedulerOptions& options, StepCostModel model, StepLimits limits, KvPool& pool)
      : scheduler_(options, model),
        limits_(limits),
        pool_(pool),
        driver_(scheduler_, pool.kv(),
                [&pool](RequestId id, std::uint32_t first, std::span<std::uint64_t> out) {
                  for (std::uint32_t i = 0; i < out.size(); ++i) out[i] = pool.hash(id, first + i);
                }) {
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
  void set_phase(RequestId id, Phase phase, std::uint32_t answer_decodes_in_flight) override {
    scheduler_.set_phase(id, phase, answer_decodes_in_flight);
  }
  void finish(RequestId id) override { scheduler_.finish(id); }
  bool looks_up_prefix_at_arrival() const override { return false; }
  bool tiered_kv() const override { return true; }
  const DualQueueScheduler* scheduler() const override { return &scheduler_; }

  const EngineStep& plan(std::int64_t now_ns) override {
    step_.items.clear();
    step_.preempted.clear();
    const StepPlan& plan = driver_.plan(limits_, now_ns);
    for (std::size_t i = 0; i < plan.preemptions.size(); ++i) {
      Preemption p = plan.preemptions[i];
      p.blocks = driver_.released_blocks()[i];  // what was actually taken away, for the report
      step_.preempted.push_back(p);
    }
    step_.aborted = plan.aborted;
    const std::vector<RequestId>& not_run = driver_.not_run();
    for (const ScheduledWork& w : plan.work) {
      if (std::find(not_run.begin(), not_run.end(), w.id) != not_run.end()) continue;
      const bool samples = w.kind != WorkKind::kPrefill || w.completes_prefill;
      step_.items.push_back({w.id, w.kind, w.tokens, w.context_tokens, samples});
    }
    step_.output_queue = plan.stats.output_queue_depth;
    step_.think_queue = plan.stats.think_queue_depth;
    step_.waiting = plan.stats.waiting_depth;
    step_.swapped = plan.stats.swapped_depth;
    return step_;
  }

  void complete(double ms, std::int64_t end_ns) override { driver_.complete(ms, end_ns); }

 private:
  DualQueueScheduler scheduler_;
  StepLimits limits_;
  KvPool& pool_;
  StepDriver driver_;
  EngineStep step_;
  std::vector<bool> looked_up_;  // by request id: the first lookup counts in the prompt hit rate
};

}  // namespace

std::unique_ptr<SchedulingPolicy> make_meridian_policy(const SchedulerOptions& options, StepCostModel model,
                                                       StepLimits limits, KvPool& pool) {
  return std::make_unique<MeridianPolicy>(options, model, limits, pool);
}

}  // namespace meridian::sim::detail
