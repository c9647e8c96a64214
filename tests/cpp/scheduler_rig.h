// Test rig for scheduler trace tables: a manual clock, and a compact text form
// of each step's plan so a table row reads like the step it describes.
//   o7     answer-phase decode of request 7      t7   think decode
//   T7     think decode forced by the TPOT guarantee
//   p7:16  prefill chunk of 16 tokens            s7   swap-in (+ one decode)
//   !7r    request 7 preempted (r recompute, s swap, f offload, i.e. fabric)
//   x7     request 7 aborted (can never fit)
#pragma once

#include <string>

#include <fmt/format.h>

#include "meridian/scheduler.h"

namespace meridian::testing {

inline std::string describe(const StepPlan& plan) {
  std::string out;
  auto add = [&out](const std::string& part) {
    if (!out.empty()) out += ' ';
    out += part;
  };
  for (const Preemption& p : plan.preemptions) {
    const char mode = p.mode == ReclaimMode::kRecompute ? 'r' : p.mode == ReclaimMode::kSwap ? 's' : 'f';
    add(fmt::format("!{}{}", p.id, mode));
  }
  for (const ScheduledWork& w : plan.work) {
    switch (w.kind) {
      case WorkKind::kPrefill: add(fmt::format("p{}:{}", w.id, w.tokens)); break;
      case WorkKind::kSwapIn: add(fmt::format("s{}", w.id)); break;
      case WorkKind::kDecode:
        add(fmt::format("{}{}", w.phase == Phase::kOutputDecode ? 'o' : (w.due ? 'T' : 't'), w.id));
        break;
    }
  }
  for (RequestId id : plan.aborted) add(fmt::format("x{}", id));
  return out.empty() ? "-" : out;
}

/// Scheduler + manual clock. step() plans at `now`, reports the step as taking
/// `ms` (default: the cost model's prediction) and advances the clock.
class SchedulerRig {
 public:
  SchedulerRig(const SchedulerOptions& options, StepCostCoefficients cost)
      : scheduler(options, StepCostModel(cost, false, 1.0)) {}

  std::string step(StepLimits limits = {}, double ms = -1) {
    const StepPlan& plan = scheduler.schedule(limits, now_ns);
    last = plan;
    const double took = ms >= 0 ? ms : plan.stats.predicted_step_ms;
    now_ns += static_cast<std::int64_t>(took * 1e6);
    scheduler.complete_step(took, now_ns);
    return describe(last);
  }

  void add(RequestId id, std::uint32_t prompt, bool thinking = true, std::uint32_t cached = 0) {
    scheduler.add({id, thinking ? Phase::kThinkDecode : Phase::kOutputDecode, prompt, cached, now_ns});
  }

  DualQueueScheduler scheduler;
  StepPlan last;
  std::int64_t now_ns = 0;
};

}  // namespace meridian::testing
