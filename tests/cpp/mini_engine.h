// A small deterministic engine loop for tests: drives the real DualQueueScheduler
// and KvBlockManager the way an engine does (schedule, carry out preemptions,
// allocate blocks, advance a simulated clock by the step-cost model, report
// tokens and phase changes). The replay simulator (apps) is the full version;
// this one exists so scheduler and block-manager properties can be checked
// together without it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "meridian/kv_block_manager.h"
#include "meridian/scheduler.h"
#include "meridian/step_driver.h"

namespace meridian::testing {

struct MiniRequest {
  RequestId id = 0;
  std::uint32_t prompt = 16;
  std::uint32_t think = 8;  ///< think tokens (0 = thinking disabled)
  std::uint32_t answer = 8;
  std::int64_t arrival_ns = 0;
};

struct MiniRequestStats {
  std::uint32_t tokens = 0;
  bool finished = false;
  bool aborted = false;
  std::int64_t last_token_ns = -1;
  std::int64_t max_think_gap_ns = 0;
  std::int64_t first_token_ns = -1;
  std::int64_t last_think_ns = -1;  ///< time of the last think token
  /// Mean gap between think tokens, (last - first) / (think - 1): the SLO's think TPOT.
  [[nodiscard]] double mean_think_gap_ns(std::uint32_t think) const {
    return think < 2 ? 0.0 : static_cast<double>(last_think_ns - first_token_ns) / (think - 1);
  }
  std::int64_t max_answer_gap_ns = 0;
  std::uint64_t last_token_step = 0;
  std::uint64_t max_answer_gap_steps = 0;
  std::uint32_t preemptions = 0;
};

class MiniEngine {
 public:
  MiniEngine(const SchedulerOptions& sched, const StepCostCoefficients& truth,
             const KvBlockManagerOptions& kv, StepLimits limits, bool learn = false)
      : truth_(truth, false, 1.0),
        scheduler_(sched, StepCostModel(truth, learn, 0.98)),
        blocks_(kv),
        limits_(limits),
        driver_(scheduler_, blocks_) {}

  void submit(const MiniRequest& r) {
    auto at = std::upper_bound(pending_.begin(), pending_.end(), r.arrival_ns,
                               [](std::int64_t t, const MiniRequest& x) { return t < x.arrival_ns; });
    pending_.insert(at, r);
    specs_[r.id] = r;
  }

  /// One engine step. Returns false when nothing is left to do.
  bool step() {
    admit();
    if (scheduler_.size() == 0) {
      if (pending_.empty()) return false;
      now_ns_ = std::max(now_ns_, pending_.front().arrival_ns);
      admit();
    }
    // The core driver: plan against the pool, release victims, allocate per tier.
    const StepPlan& plan = driver_.plan(limits_, now_ns_);
    ++steps_;
    check_answer_victims(plan);
    for (const Preemption& p : plan.preemptions) ++stats_[p.id].preemptions;
    for (RequestId id : plan.aborted) {
      blocks_.release(id, ReleaseKind::kAbort);
      stats_[id].aborted = true;
    }
    const std::vector<RequestId> not_run = driver_.not_run();
    allocation_failures_ += not_run.size();
    if (plan.work.empty()) {
      ++idle_steps_;
      // Nothing runnable: jump to the next arrival if there is one.
      // An empty step still takes the engine's fixed step time.
      const double ms = truth_.predict_ms(0, 0);
      now_ns_ += static_cast<std::int64_t>(ms * 1e6);
      if (!pending_.empty()) now_ns_ = std::max(now_ns_, pending_.front().arrival_ns);
      driver_.complete(ms, now_ns_);
      return true;
    }
    const double ms = truth_.predict_ms(plan.stats.total_tokens, plan.stats.kv_tokens);
    now_ns_ += static_cast<std::int64_t>(ms * 1e6);
    last_plan_ = plan;
    driver_.complete(ms, now_ns_);
    for (const ScheduledWork& w : last_plan_.work) {
      if (std::find(not_run.begin(), not_run.end(), w.id) != not_run.end()) continue;
      if (w.kind == WorkKind::kPrefill && !w.completes_prefill) continue;
      on_token(w.id);
    }
    return true;
  }

  /// Steps in which an answer-phase request was preempted although a running
  /// think-phase request outside the batch held KV (ADR-0015 forbids it).
  [[nodiscard]] std::uint64_t answer_preemptions_with_think_victims() const {
    return answer_with_think_victim_;
  }

  /// Runs until every submitted request finished or `max_steps` passed.
  bool run(std::uint64_t max_steps) {
    while (steps_ < max_steps) {
      if (!step()) return true;
    }
    return false;
  }

  [[nodiscard]] const std::map<RequestId, MiniRequestStats>& stats() const { return stats_; }
  [[nodiscard]] const DualQueueScheduler& scheduler() const { return scheduler_; }
  [[nodiscard]] const KvBlockManager& blocks() const { return blocks_; }
  [[nodiscard]] const StepPlan& last_plan() const { return last_plan_; }
  [[nodiscard]] std::uint64_t steps() const { return steps_; }
  [[nodiscard]] std::uint64_t idle_steps() const { return idle_steps_; }
  [[nodiscard]] std::uint64_t allocation_failures() const { return allocation_failures_; }
  [[nodiscard]] std::int64_t now_ns() const { return now_ns_; }

 private:
  void admit() {
    while (!pending_.empty() && pending_.front().arrival_ns <= now_ns_) {
      const MiniRequest& r = pending_.front();
      scheduler_.add(
          {r.id, r.think > 0 ? Phase::kThinkDecode : Phase::kOutputDecode, r.prompt, 0, r.arrival_ns});
      stats_[r.id];
      pending_.erase(pending_.begin());
    }
  }

  void check_answer_victims(const StepPlan& plan) {
    const bool answer_preempted =
        std::any_of(plan.preemptions.begin(), plan.preemptions.end(),
                    [](const Preemption& p) { return p.phase == Phase::kOutputDecode; });
    if (!answer_preempted) return;
    for (const auto& [id, spec] : specs_) {
      const auto v = scheduler_.view(id);
      if (!v || v->state != RequestView::State::kRunning || v->phase != Phase::kThinkDecode) continue;
      if (v->context_tokens == 0) continue;
      const bool in_batch = std::any_of(plan.work.begin(), plan.work.end(),
                                        [id = id](const ScheduledWork& w) { return w.id == id; });
      if (!in_batch) {
        ++answer_with_think_victim_;
        return;
      }
    }
  }

  void on_token(RequestId id) {
    const MiniRequest& spec = specs_[id];
    MiniRequestStats& st = stats_[id];
    const bool thinking = st.tokens < spec.think;
    if (st.last_token_ns >= 0) {
      const std::int64_t gap = now_ns_ - st.last_token_ns;
      if (thinking) {
        st.max_think_gap_ns = std::max(st.max_think_gap_ns, gap);
      } else if (st.tokens > spec.think) {
        st.max_answer_gap_ns = std::max(st.max_answer_gap_ns, gap);
        st.max_answer_gap_steps = std::max(st.max_answer_gap_steps, steps_ - st.last_token_step);
      }
    }
    if (st.first_token_ns < 0) st.first_token_ns = now_ns_;
    if (thinking) st.last_think_ns = now_ns_;
    st.last_token_ns = now_ns_;
    st.last_token_step = steps_;
    ++st.tokens;
    if (spec.think > 0 && st.tokens == spec.think) {
      scheduler_.set_phase(id, Phase::kOutputDecode);
      blocks_.demote_think_blocks(id);
    }
    if (st.tokens == spec.think + spec.answer) {
      st.finished = true;
      scheduler_.finish(id);
      blocks_.release(id, ReleaseKind::kFinished);
    }
  }

  std::uint64_t answer_with_think_victim_ = 0;
  StepCostModel truth_;
  DualQueueScheduler scheduler_;
  KvBlockManager blocks_;
  StepLimits limits_;
  StepDriver driver_;
  std::vector<MiniRequest> pending_;  // sorted by arrival
  std::map<RequestId, MiniRequest> specs_;
  std::map<RequestId, MiniRequestStats> stats_;
  StepPlan last_plan_;
  std::int64_t now_ns_ = 0;
  std::uint64_t steps_ = 0;
  std::uint64_t idle_steps_ = 0;
  std::uint64_t allocation_failures_ = 0;
};

}  // namespace meridian::testing
