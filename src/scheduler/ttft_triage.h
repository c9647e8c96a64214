// TTFT triage (ADR-0028): which waiting prompts can no longer meet their
// TTFT and so yield to the ones that still can. Used by the core's prefill
// lanes and, through DualQueueScheduler::ttft_deferrals(), by engines that
// order their own waiting queue (the vLLM adapter). Not installed.
//
// Thread-safety: none; TtftTriage holds only scratch space, owned by its user.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "meridian/scheduler.h"

namespace meridian::sched_detail {

struct TtftTriageParams {
  double per_token_ms = 0;  ///< prefill cost of one prompt token (the learned step-cost model)
  double ttft_slo_ms = 0;   ///< the TTFT bound
  std::int64_t now_ns = 0;
};

class TtftTriage {
 public:
  // A prompt that has waited this many TTFT budgets is never deferred: under
  // sustained overload the longest prompts would otherwise wait without end.
  static constexpr double kMaxWaitTtftBudgets = 10.0;
  // Only the first prompts of the queue are judged (the hot path stays O(1)
  // in a long queue); the rest keep their order.
  static constexpr std::size_t kWindow = 256;

  // Moore-Hodgson over `queue` in its order (FCFS: the earliest TTFT
  // deadline first): each prompt's first token is estimated at now plus the
  // prefill of every prompt kept ahead of it and its own, with the whole
  // step on prefill (a lower bound, so only a prompt that surely misses is
  // given up). When a prompt's estimate passes its deadline, the longest
  // prompt kept so far is deferred: that keeps the most prompts within
  // their TTFT on one server (Moore 1968). A prompt whose prefill has begun
  // may be deferred too: finishing a lost prompt first would make the ones
  // behind it miss as well. Calls `defer(index)` for each deferred prompt.
  template <typename Defer>
  void run(std::span<const WaitingPrompt> queue, const TtftTriageParams& p, Defer&& defer) {
    if (!(p.per_token_ms > 0) || !(p.ttft_slo_ms > 0)) return;
    const double max_wait_ms = kMaxWaitTtftBudgets * p.ttft_slo_ms;
    kept_.clear();
    double finish_ms = 0;  // from now, of the prompts kept so far
    const std::size_t n = queue.size() < kWindow ? queue.size() : kWindow;
    for (std::size_t i = 0; i < n; ++i) {
      const WaitingPrompt& w = queue[i];
      const double waited_ms = static_cast<double>(p.now_ns - w.arrival_ns) * 1e-6;
      const double cost_ms = static_cast<double>(w.remaining_tokens) * p.per_token_ms;
      finish_ms += cost_ms;
      if (waited_ms < max_wait_ms) push(cost_ms, i);
      if (waited_ms + finish_ms <= p.ttft_slo_ms || kept_.empty()) continue;
      const auto [longest_ms, index] = pop_longest();
      finish_ms -= longest_ms;
      defer(index);
    }
  }

 private:
  void push(double cost_ms, std::size_t index);
  std::pair<double, std::size_t> pop_longest();

  std::vector<std::pair<double, std::size_t>> kept_;  // max-heap by cost: deferrable prompts kept
};

}  // namespace meridian::sched_detail
