// Scheduler + block-manager step sequences: bytes decode into the options of
// a small engine and a stream of operations - add a request (any phase,
// prompt and cached prefix, also ones that can never fit), run a step through
// the StepDriver (reporting an ordinary, a zero, a negative, a non-finite or
// a huge step time), produce tokens that end thinking or finish requests,
// change phases, abort, move the clock. Checked at every step: the plan keeps
// the engine's limits and its preemption cap, no request is planned twice,
// the pool stays consistent, every request the scheduler holds is one the
// engine added and did not end; at the end, with every request ended, nothing
// is tracked and every block is free.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "fuzz_check.h"
#include "meridian/kv_block_manager.h"
#include "meridian/scheduler.h"
#include "meridian/step_cost_model.h"
#include "meridian/step_driver.h"
#include <fuzzer/FuzzedDataProvider.h>

namespace meridian::fuzz {
namespace {

constexpr std::size_t kMaxOps = 1024;

SchedulerOptions scheduler_options(FuzzedDataProvider& in, std::uint32_t blocks) {
  SchedulerOptions o;
  o.think_tpot_budget_ms = in.ConsumeIntegralInRange<int>(1, 200);
  o.output_tpot_budget_ms = in.ConsumeIntegralInRange<int>(1, 100);
  o.think_batch_multiplier = 1.0 + in.ConsumeIntegralInRange<int>(0, 40) / 10.0;
  o.min_prefill_tokens_per_step = in.ConsumeIntegralInRange<std::uint32_t>(0, 512);
  o.preemption_enabled = in.ConsumeBool();
  o.preempt_max_fraction = in.ConsumeIntegralInRange<int>(1, 100) / 100.0;
  o.preempt_readmit_guard_steps = in.ConsumeIntegralInRange<std::uint32_t>(0, 16);
  o.fabric_offload = in.ConsumeBool();
  o.block_tokens = in.ConsumeIntegralInRange<std::uint32_t>(1, 32);
  o.total_kv_blocks = blocks;
  return o;
}

KvBlockManagerOptions kv_options(FuzzedDataProvider& in, std::uint32_t blocks, bool fabric_offload) {
  KvBlockManagerOptions k;
  k.num_blocks = blocks;
  k.block_size_bytes = 4096;
  k.think_phase_memory_fraction = in.ConsumeIntegralInRange<int>(1, 99) / 100.0;
  k.aggressive_think_eviction = in.ConsumeBool();
  k.fabric_offload = fabric_offload;
  return k;
}

StepCostModel cost_model(FuzzedDataProvider& in) {
  const StepCostCoefficients c{in.ConsumeIntegralInRange<int>(1, 200) / 10.0,
                               in.ConsumeIntegralInRange<int>(0, 100) / 1000.0,
                               in.ConsumeIntegralInRange<int>(0, 100) / 1000.0};
  return {c, in.ConsumeBool(), in.ConsumeIntegralInRange<int>(50, 100) / 100.0};
}

class Engine {
 public:
  explicit Engine(FuzzedDataProvider& in)
      : in_(in),
        blocks_(in.ConsumeIntegralInRange<std::uint32_t>(1, 256)),
        scheduler_(scheduler_options(in, blocks_), cost_model(in)),
        kv_(kv_options(in, blocks_, scheduler_.options().fabric_offload)),
        driver_(scheduler_, kv_) {
    limits_.token_budget = in.ConsumeIntegralInRange<std::uint32_t>(1, 4096);
    limits_.max_sequences = in.ConsumeIntegralInRange<std::uint32_t>(1, 64);
  }

  void run() {
    for (std::size_t op = 0; op < kMaxOps && in_.remaining_bytes() > 0; ++op) {
      switch (in_.ConsumeIntegralInRange<int>(0, 5)) {
        case 0:
        case 1: add(); break;
        case 2:
        case 3: step(); break;
        case 4: change_phase(); break;
        default: abort_one(); break;
      }
      check_tracking();
    }
    // Drain: step until idle (bounded), then end whatever is left.
    for (int i = 0; i < 64 && !live_.empty(); ++i) step();
    while (!live_.empty()) end(*live_.begin(), ReleaseKind::kAbort);
    check(scheduler_.size() == 0, fmt::format("{} requests tracked after all ended", scheduler_.size()));
    const std::string problem = kv_.check_invariants();
    check(problem.empty(), "check_invariants(): " + problem);
    const KvBlockUsage u = kv_.usage();
    check(u.free_blocks == u.total_blocks,
          fmt::format("{} of {} blocks not free after all requests ended (no block is hashed, so none is "
                      "cached)",
                      u.total_blocks - u.free_blocks, u.total_blocks));
  }

 private:
  RequestId pick() {
    if (live_.empty()) return next_id_;  // unknown: exercises the "false" paths
    auto it = live_.begin();
    std::advance(it, in_.ConsumeIntegralInRange<std::size_t>(0, live_.size() - 1));
    return *it;
  }

  void add() {
    NewRequest r;
    r.id = in_.ConsumeIntegralInRange<int>(0, 15) == 0 && !live_.empty() ? pick() : next_id_++;
    r.phase = static_cast<Phase>(in_.ConsumeIntegralInRange<int>(0, 3));
    r.prompt_tokens = in_.ConsumeIntegralInRange<std::uint32_t>(0, 64 * scheduler_.options().block_tokens);
    r.cached_prompt_tokens = in_.ConsumeIntegralInRange<std::uint32_t>(0, r.prompt_tokens + 1);
    r.arrival_ns = now_;
    const std::size_t size_before = scheduler_.size();
    try {
      scheduler_.add(r);
    } catch (const InvalidArgument&) {
      // The contract's violations: duplicate id, empty prompt, cached > prompt,
      // a completed request, a prompt that can never fit. Nothing was added.
      check(scheduler_.size() == size_before, "a rejected add() adds nothing");
      return;
    }
    check(live_.insert(r.id).second, fmt::format("add() accepted the duplicate id {}", r.id));
  }

  double step_time(const StepPlan& plan) {
    switch (in_.ConsumeIntegralInRange<int>(0, 15)) {
      case 0: return 0.0;
      case 1: return -1.0;
      case 2: return std::numeric_limits<double>::quiet_NaN();
      case 3: return std::numeric_limits<double>::infinity();
      case 4: return 1e308;
      case 5: return 60000.0;
      default: return plan.stats.predicted_step_ms * in_.ConsumeIntegralInRange<int>(50, 200) / 100.0;
    }
  }

  void step() {
    const std::uint32_t running_before = running();
    const std::uint64_t releases_before = scheduler_.counters().livelock_releases;
    const StepPlan& plan = driver_.plan(limits_, now_);
    check_plan(plan, running_before, scheduler_.counters().livelock_releases - releases_before);
    for (RequestId id : plan.aborted) {
      check(live_.erase(id) == 1, "only live requests are aborted");
      check(!scheduler_.view(id), "an aborted request is dropped by the scheduler");
      kv_.release(id, ReleaseKind::kAbort);
    }
    const std::string problem = kv_.check_invariants();
    check(problem.empty(), "check_invariants() after the plan: " + problem);
    const double ms = step_time(plan);
    // The clock moves by a sane amount whatever time is reported.
    now_ += 1'000'000 + in_.ConsumeIntegralInRange<std::int64_t>(0, 100'000'000);
    const std::vector<RequestId> not_run = driver_.not_run();
    const std::vector<ScheduledWork> work = plan.work;
    driver_.complete(ms, now_);
    const StepCostCoefficients k = scheduler_.cost_model().coefficients();
    check(std::isfinite(k.base_ms) && std::isfinite(k.per_token_ms) && std::isfinite(k.per_kv_token_us),
          "the learned step-cost coefficients stay finite");
    for (const ScheduledWork& w : work) {
      if (std::find(not_run.begin(), not_run.end(), w.id) != not_run.end()) continue;
      if (w.kind == WorkKind::kPrefill && !w.completes_prefill) continue;
      if (!live_.contains(w.id)) continue;
      token(w.id, w.phase);
    }
  }

  // A token was generated: most continue, some end thinking, some finish.
  void token(RequestId id, Phase phase) {
    switch (in_.ConsumeIntegralInRange<int>(0, 7)) {
      case 0:
        if (phase == Phase::kThinkDecode) {
          check(scheduler_.set_phase(id, Phase::kOutputDecode), "set_phase() on a live request");
          static_cast<void>(kv_.demote_think_blocks(id));
        }
        break;
      case 1: end(id, ReleaseKind::kFinished); break;
      default: break;
    }
  }

  void change_phase() {
    const RequestId id = pick();
    const auto phase = static_cast<Phase>(in_.ConsumeIntegralInRange<int>(0, 3));
    const bool known = live_.contains(id);
    const std::optional<RequestView> before = scheduler_.view(id);
    const bool changed = scheduler_.set_phase(id, phase);
    check(changed == known, "set_phase() reports whether the request is known");
    if (!known) return;
    if (phase == Phase::kComplete) {
      live_.erase(id);
      kv_.release(id, ReleaseKind::kFinished);
      return;
    }
    const std::optional<RequestView> after = scheduler_.view(id);
    check(after.has_value(), "set_phase() keeps a live request");
    check(static_cast<int>(after->phase) >= static_cast<int>(before->phase),
          "a request's phase only moves forward");
    if (before->phase == Phase::kThinkDecode && after->phase == Phase::kOutputDecode) {
      static_cast<void>(kv_.demote_think_blocks(id));
    }
  }

  void abort_one() { end(pick(), ReleaseKind::kAbort); }

  void end(RequestId id, ReleaseKind kind) {
    const bool known = live_.erase(id) == 1;
    check(scheduler_.finish(id) == known, "finish() reports whether the request is known");
    kv_.release(id, kind);
    check(!kv_.holds_blocks(id), "an ended request holds no blocks");
  }

  [[nodiscard]] std::uint32_t running() const {
    std::uint32_t n = 0;
    for (RequestId id : live_) {
      const auto v = scheduler_.view(id);
      if (v && v->state == RequestView::State::kRunning) ++n;
    }
    return n;
  }

  // `releases`: partial prefills released to break a livelock, outside the cap.
  void check_plan(const StepPlan& plan, std::uint32_t running_before, std::uint64_t releases) const {
    std::set<RequestId> seen;
    std::uint64_t tokens = 0;
    for (const ScheduledWork& w : plan.work) {
      check(seen.insert(w.id).second, fmt::format("request {} planned twice in one step", w.id));
      check(live_.contains(w.id), fmt::format("planned request {} is not live", w.id));
      check(w.new_think_blocks <= w.new_blocks, "think blocks are part of the new blocks");
      tokens += w.tokens;
    }
    check(tokens <= limits_.token_budget,
          fmt::format("the plan computes {} tokens; the budget is {}", tokens, limits_.token_budget));
    check(plan.work.size() <= limits_.max_sequences, "the plan holds at most max_sequences requests");
    const auto cap = std::max<std::uint32_t>(
        1, static_cast<std::uint32_t>(scheduler_.options().preempt_max_fraction * running_before));
    check(plan.preemptions.size() <= cap + releases,
          fmt::format("{} preemptions; the cap is {} (+{} livelock releases)", plan.preemptions.size(), cap,
                      releases));
    for (const Preemption& p : plan.preemptions) {
      check(live_.contains(p.id), "only live requests are preempted");
    }
  }

  void check_tracking() const {
    check(scheduler_.size() == live_.size(),
          fmt::format("the scheduler holds {} requests; {} are live", scheduler_.size(), live_.size()));
    for (RequestId id : live_) check(scheduler_.view(id).has_value(), "every live request has a view");
  }

  FuzzedDataProvider& in_;
  std::uint32_t blocks_;
  DualQueueScheduler scheduler_;
  KvBlockManager kv_;
  StepDriver driver_;
  StepLimits limits_;
  std::set<RequestId> live_;
  RequestId next_id_ = 1;
  std::int64_t now_ = 0;
};

void run(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  Engine(in).run();
}

}  // namespace
}  // namespace meridian::fuzz

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry point
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return meridian::fuzz::run_input([&] { meridian::fuzz::run(data, size); });
}
