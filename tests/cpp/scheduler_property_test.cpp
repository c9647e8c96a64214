// RapidCheck properties of the dual-queue scheduler driven together with the
// real block manager (MiniEngine): answers are never starved, think requests
// keep the think TPOT budget when the system is feasible, plans respect the
// engine limits and the preemption cap, and long random runs under memory
// pressure end with every request finished (no deadlock, no livelock).
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "mini_engine.h"
#include "scheduler_rig.h"

namespace meridian {
namespace {

using testing::MiniEngine;
using testing::MiniRequest;

// A Qwen3-8B-on-H100-like cost model (the config defaults).
constexpr StepCostCoefficients kH100{6.0, 0.03, 0.044};

struct Workload {
  std::vector<MiniRequest> requests;
};

// Draws a workload; call from inside a property.
Workload workload(std::uint32_t max_requests, std::uint32_t max_prompt, std::uint32_t max_think,
                  std::uint32_t max_answer, std::int64_t max_arrival_ms) {
  const auto n = *rc::gen::inRange<std::uint32_t>(1, max_requests + 1);
  {
    Workload w;
    for (std::uint32_t i = 0; i < n; ++i) {
      MiniRequest r;
      r.id = i + 1;
      r.prompt = *rc::gen::inRange<std::uint32_t>(1, max_prompt + 1);
      const bool thinking = *rc::gen::weightedElement<bool>({{4, true}, {1, false}});
      r.think = thinking ? *rc::gen::inRange<std::uint32_t>(1, max_think + 1) : 0;
      r.answer = *rc::gen::inRange<std::uint32_t>(1, max_answer + 1);
      r.arrival_ns = *rc::gen::inRange<std::int64_t>(0, max_arrival_ms + 1) * 1'000'000;
      w.requests.push_back(r);
    }
    return w;
  }
}

SchedulerOptions base_options() {
  SchedulerOptions o;
  o.block_tokens = 16;
  o.min_prefill_tokens_per_step = 64;
  return o;
}

KvBlockManagerOptions kv_options(std::uint32_t blocks, double think_fraction) {
  KvBlockManagerOptions k;
  k.num_blocks = blocks;
  k.think_phase_memory_fraction = think_fraction;
  return k;
}

// Scheduled requests in `state`.
std::uint32_t count_in(const MiniEngine& engine, RequestView::State state) {
  std::uint32_t n = 0;
  for (const auto& [id, st] : engine.stats()) {
    const auto v = engine.scheduler().view(id);
    if (v && v->state == state) ++n;
  }
  return n;
}

bool any_running_or_swapped(const MiniEngine& engine) {
  return count_in(engine, RequestView::State::kRunning) + count_in(engine, RequestView::State::kSwapped) > 0;
}

// Checks one plan against the limits and the ordering contract.
// `released`: the step's idle-engine releases of partial prefills, which ADR-0008 puts outside
// the per-step cap (nothing runs; the victims are prefills holding blocks and producing nothing).
void check_plan(const StepPlan& plan, const StepLimits& limits, std::uint32_t running_before,
                double max_fraction, std::uint64_t released = 0) {
  std::set<RequestId> seen;
  std::uint64_t tokens = 0;
  bool think_seen = false;
  for (const ScheduledWork& w : plan.work) {
    RC_ASSERT(seen.insert(w.id).second);  // nobody twice in one step
    tokens += w.tokens;
    if (w.kind == WorkKind::kDecode && w.phase == Phase::kThinkDecode) think_seen = true;
    // Answer-phase decode is never behind think-phase decode.
    if (w.kind == WorkKind::kDecode && w.phase == Phase::kOutputDecode) RC_ASSERT(!think_seen);
  }
  RC_ASSERT(tokens <= limits.token_budget);
  RC_ASSERT(plan.work.size() <= limits.max_sequences);
  const auto cap = std::max<std::uint32_t>(1, static_cast<std::uint32_t>(max_fraction * running_before));
  RC_ASSERT(plan.preemptions.size() <= cap + released);
}

RC_GTEST_PROP(SchedulerProperty, AnswersAreNeverStarved, ()) {
  // Ample memory and sequence slots: every answer-phase request gets a token
  // on every step from its first answer token to its last.
  const Workload w = workload(40, 300, 200, 60, 500);
  StepLimits limits;
  limits.max_sequences = 256;
  MiniEngine engine(base_options(), kH100, kv_options(100'000, 0.5), limits);
  for (const MiniRequest& r : w.requests) engine.submit(r);
  RC_ASSERT(engine.run(100'000));
  for (const auto& [id, st] : engine.stats()) {
    RC_ASSERT(st.finished);
    RC_ASSERT(st.max_answer_gap_steps <= 1U);
  }
}

// The think guarantee (ADR-0015): every request's mean think gap (the SLO's
// think TPOT) within the budget, and no single gap beyond 4 budgets.
void check_think_guarantee(const MiniEngine& engine, const std::vector<MiniRequest>& requests,
                           double budget_ms) {
  for (const MiniRequest& r : requests) {
    const testing::MiniRequestStats& st = engine.stats().at(r.id);
    const double mean_ms = st.mean_think_gap_ns(r.think) / 1e6;
    if (mean_ms > budget_ms * (1 + 1e-9)) {
      const std::string why = fmt::format("request {}: mean think gap {} ms over {} tokens (budget {} ms)",
                                          r.id, mean_ms, r.think, budget_ms);
      RC_FAIL(why);
    }
    const double max_gap_ms = static_cast<double>(st.max_think_gap_ns) / 1e6;
    if (max_gap_ms > 4 * budget_ms) {
      const std::string why = fmt::format("request {} waited {} ms between think tokens (backstop {} ms)",
                                          r.id, max_gap_ms, 4 * budget_ms);
      RC_FAIL(why);
    }
  }
}

RC_GTEST_PROP(SchedulerProperty, ThinkRequestsKeepTheThinkTpotBudgetWhenFeasible, ()) {
  // A slow step-cost model, so answers fill the output budget and think is
  // throttled: the guarantee has to do the work. Feasible: a step holding
  // every request, plus the prefill floor, fits in the part of the think
  // budget the due rule plans with (budget / 2.5).
  const Workload w = workload(60, 200, 300, 100, 200);
  const StepCostCoefficients cost{*rc::gen::inRange(2, 8) * 1.0, *rc::gen::inRange(30, 100) / 100.0, 0.044};
  SchedulerOptions o = base_options();
  o.think_tpot_budget_ms = *rc::gen::inRange(60, 300) * 1.0;
  o.output_tpot_budget_ms = *rc::gen::inRange(8, 20) * 1.0;
  o.min_prefill_tokens_per_step = 16;
  const StepCostModel truth(cost, false, 1.0);
  std::uint64_t ctx = 0;
  for (const MiniRequest& r : w.requests) ctx += r.prompt + r.think + r.answer;
  const double worst_step = truth.predict_ms(w.requests.size() + o.min_prefill_tokens_per_step, ctx);
  RC_PRE(worst_step * 2.5 <= o.think_tpot_budget_ms);
  StepLimits limits;
  limits.max_sequences = 512;
  limits.token_budget = 80;  // prefill cannot make one step long
  MiniEngine engine(o, cost, kv_options(100'000, 0.5), limits);
  for (const MiniRequest& r : w.requests) engine.submit(r);
  RC_ASSERT(engine.run(100'000));
  check_think_guarantee(engine, w.requests, o.think_tpot_budget_ms);
  RC_TAG(engine.scheduler().counters().due_think_decodes > 0 ? "guarantee engaged" : "not needed");
}

RC_GTEST_PROP(SchedulerProperty, ThinkTpotHoldsWhileAnswersSaturateTheOutputBudget, ()) {
  // More answering requests than the output budget holds, for longer than
  // the reasoning lasts: optional think never fits, so every think token
  // before the answers drain comes from the guarantee. The think budget is
  // feasible by construction (2.5 x the full-batch step, plus slack).
  const StepCostCoefficients cost{*rc::gen::inRange(2, 7) * 1.0, *rc::gen::inRange(50, 150) / 100.0, 0.044};
  SchedulerOptions o = base_options();
  o.min_prefill_tokens_per_step = 16;
  const auto answer_slots = *rc::gen::inRange(2, 5);
  o.output_tpot_budget_ms = cost.base_ms + cost.per_token_ms * answer_slots + 0.5;
  std::vector<MiniRequest> requests;
  const auto answers = *rc::gen::inRange(answer_slots + 2, 12);
  const auto thinkers = *rc::gen::inRange(1, 16);
  for (int i = 0; i < answers + thinkers; ++i) {
    MiniRequest r;
    r.id = static_cast<RequestId>(i) + 1;
    r.prompt = *rc::gen::inRange<std::uint32_t>(4, 64);
    const bool answer_only = i < answers;
    r.think = answer_only ? 0 : *rc::gen::inRange<std::uint32_t>(10, 120);
    r.answer = answer_only ? *rc::gen::inRange<std::uint32_t>(300, 500) : 4;
    r.arrival_ns = answer_only ? 0 : *rc::gen::inRange<std::int64_t>(0, 30) * 1'000'000;
    requests.push_back(r);
  }
  std::uint64_t ctx = 0;
  for (const MiniRequest& r : requests) ctx += r.prompt + r.think + r.answer;
  const StepCostModel truth(cost, false, 1.0);
  const double worst_step = truth.predict_ms(requests.size() + o.min_prefill_tokens_per_step, ctx);
  o.think_tpot_budget_ms = std::ceil(worst_step * 2.5 * (1 + *rc::gen::inRange(0, 50) / 100.0));
  StepLimits limits;
  limits.max_sequences = 512;
  limits.token_budget = 80;
  MiniEngine engine(o, cost, kv_options(100'000, 0.5), limits);
  for (const MiniRequest& r : requests) engine.submit(r);
  RC_ASSERT(engine.run(100'000));
  for (const auto& [id, st] : engine.stats()) RC_ASSERT(st.finished);
  check_think_guarantee(engine, requests, o.think_tpot_budget_ms);
  RC_ASSERT(engine.scheduler().counters().due_think_decodes > 0U);
}

// Runs `w` on tight memory with preemption: no deadlock or livelock, no
// failed allocation (the scheduler's block accounting matches the manager's),
// block-manager invariants at every step, nothing leaked at the end.
void run_under_pressure(const Workload& w, const SchedulerOptions& o, std::uint32_t blocks,
                        double think_fraction, const StepLimits& limits) {
  MiniEngine engine(o, kH100, kv_options(blocks, think_fraction), limits);
  for (const MiniRequest& r : w.requests) engine.submit(r);
  std::uint64_t steps = 0;
  while (steps++ < 50'000) {
    const std::uint32_t running = count_in(engine, RequestView::State::kRunning);
    const std::uint64_t idle_before = engine.idle_steps();
    const std::uint64_t aborted_before = engine.scheduler().counters().aborted;
    const std::uint64_t released_before = engine.scheduler().counters().livelock_releases;
    if (!engine.step()) break;
    check_plan(engine.last_plan(), limits, running, o.preempt_max_fraction,
               engine.scheduler().counters().livelock_releases - released_before);
    RC_ASSERT(engine.blocks().check_invariants() == "");
    // No livelock step: with nothing running or swapped out, waiting
    // requests are never all parked (partial prefills holding every block
    // must give way), so such a step runs or aborts something.
    if (engine.idle_steps() > idle_before && engine.scheduler().counters().aborted == aborted_before &&
        engine.scheduler().size() > 0) {
      RC_ASSERT(any_running_or_swapped(engine));
    }
  }
  if (steps >= 50'000) {
    // Livelock or deadlock: say who is stuck where.
    std::string stuck;
    for (const auto& [id, st] : engine.stats()) {
      if (const auto v = engine.scheduler().view(id)) {
        stuck += fmt::format(" [{} phase={} ctx={} preempted={}x]", id, to_string(v->phase),
                             v->context_tokens, v->preemptions);
      }
    }
    RC_FAIL(fmt::format("no progress after 50000 steps; last plan '{}';{}",
                        testing::describe(engine.last_plan()), stuck));
  }
  RC_ASSERT(engine.allocation_failures() == 0U);
  for (const auto& [id, st] : engine.stats()) {
    RC_ASSERT(st.finished);
    RC_ASSERT(!st.aborted);
  }
  const KvBlockUsage u = engine.blocks().usage();
  for (const auto live : u.live_blocks) RC_ASSERT(live == 0U);
  RC_ASSERT(engine.scheduler().size() == 0U);
  RC_ASSERT(engine.answer_preemptions_with_think_victims() == 0U);
  RC_TAG(engine.scheduler().counters().admission_preemptions > 0 ? "paused for admission" : "no pause");
  RC_TAG(engine.scheduler().counters().ttft_deferred > 0 ? "ttft triage deferred" : "nothing deferred");
  const auto& preemptions = engine.scheduler().counters().preemptions;
  RC_TAG(preemptions[2] > 0                    ? "offloaded"
         : preemptions[0] + preemptions[1] > 0 ? "preempted"
                                               : "no preemption");
}

RC_GTEST_PROP(SchedulerProperty, EveryRequestFinishesUnderMemoryPressure, ()) {
  const Workload w = workload(64, 96, 160, 64, 100);
  const auto blocks = *rc::gen::inRange<std::uint32_t>(24, 200);
  const double think_fraction = *rc::gen::inRange(50, 80) / 100.0;
  SchedulerOptions o = base_options();
  o.preempt_max_fraction = *rc::gen::inRange(1, 101) / 100.0;
  o.preempt_readmit_guard_steps = *rc::gen::inRange<std::uint32_t>(0, 16);
  // With a fabric, running victims are offloaded and later swapped back in.
  o.fabric_offload = *rc::gen::weightedElement<bool>({{3, false}, {1, true}});
  // Short TTFT SLOs: new prompts pause thinking (ADR-0027) in many runs.
  // A third of the runs have a TTFT of a few ms, below the prefill of most
  // prompts (0.03 ms a token here), so that TTFT triage defers many.
  const bool tight_ttft = *rc::gen::weightedElement<bool>({{1, true}, {2, false}});
  o.ttft_slo_ms = tight_ttft ? *rc::gen::inRange(1, 20) * 0.25 : *rc::gen::inRange(1, 2000) * 1.0;
  o.ttfv_slo_ms = *rc::gen::weightedElement<double>({{3, 0.0}, {1, 5000.0}});
  // ... and TTFT triage defers the prompts that miss them (ADR-0028).
  o.ttft_triage = *rc::gen::weightedElement<bool>({{3, true}, {1, false}});
  o.total_kv_blocks = blocks;
  for (const MiniRequest& r : w.requests) {
    // Every request fits alone, or it would (correctly) be aborted.
    RC_PRE((r.prompt + r.think + r.answer) / 16 + 2 <= blocks);
  }
  StepLimits limits;
  limits.max_sequences = *rc::gen::inRange<std::uint32_t>(4, 64);
  limits.token_budget = *rc::gen::inRange<std::uint32_t>(64, 2048);
  run_under_pressure(w, o, blocks, think_fraction, limits);
}

RC_GTEST_PROP(SchedulerProperty, PartialPrefillsNeverParkAnIdleEngine, ()) {
  // The soak's --outgrow-every livelock: while small think requests run, big
  // prompts (up to 60 % of the pool each) get partial prefills in their lanes
  // (reasoning is held back while think KV is over its small share); once the
  // runners finish, the partial prefills can hold the whole pool with nothing
  // running. Some prefill must still progress.
  const auto blocks = *rc::gen::inRange<std::uint32_t>(16, 64);
  Workload w;
  const auto runners = *rc::gen::inRange<std::uint32_t>(1, 4);
  const auto big = *rc::gen::inRange<std::uint32_t>(2, 5);
  for (std::uint32_t i = 0; i < runners + big; ++i) {
    MiniRequest r;
    r.id = i + 1;
    const bool runner = i < runners;
    r.prompt = runner ? *rc::gen::inRange<std::uint32_t>(1, 33)
                      : *rc::gen::inRange<std::uint32_t>(blocks * 16 / 4, blocks * 16 * 6 / 10);
    r.think = runner || *rc::gen::arbitrary<bool>() ? *rc::gen::inRange<std::uint32_t>(1, 161) : 0;
    r.answer = *rc::gen::inRange<std::uint32_t>(1, 33);
    r.arrival_ns = runner ? 0 : *rc::gen::inRange<std::int64_t>(1, 100) * 1'000'000;
    RC_PRE((r.prompt + r.think + r.answer) / 16 + 2 <= blocks);
    w.requests.push_back(r);
  }
  SchedulerOptions o = base_options();
  o.preempt_max_fraction = *rc::gen::inRange(1, 101) / 100.0;
  o.preempt_readmit_guard_steps = *rc::gen::inRange<std::uint32_t>(0, 16);
  o.min_prefill_tokens_per_step = *rc::gen::inRange<std::uint32_t>(16, 128);
  // Deferred partial prefills (ADR-0028) must not park it either.
  o.ttft_slo_ms = *rc::gen::inRange(1, 40) * 0.25;
  o.total_kv_blocks = blocks;
  StepLimits limits;
  limits.max_sequences = *rc::gen::inRange<std::uint32_t>(2, 8);
  limits.token_budget = *rc::gen::inRange<std::uint32_t>(o.min_prefill_tokens_per_step, 256);
  run_under_pressure(w, o, blocks, *rc::gen::inRange(5, 30) / 100.0, limits);
}

TEST(SchedulerProperty, PartialPrefillsHoldingThePoolWithNothingRunningGiveWay) {
  // A case of the property above's generator: once the two think requests
  // finish, the big prompts' partial prefills hold all 18 blocks and nothing
  // runs. Before the fix every later step was empty. (Re-found with prefill
  // ahead of optional think, ADR-0025: the first case no longer got there.)
  SchedulerOptions o = base_options();
  o.preempt_max_fraction = 0.01;
  o.preempt_readmit_guard_steps = 0;
  o.min_prefill_tokens_per_step = 16;
  o.total_kv_blocks = 18;
  StepLimits limits;
  limits.max_sequences = 3;
  limits.token_budget = 54;
  MiniEngine engine(o, kH100, kv_options(18, 0.05), limits);
  engine.submit({1, 28, 141, 7, 0});
  engine.submit({2, 22, 124, 14, 0});
  engine.submit({3, 158, 62, 4, 21'000'000});
  engine.submit({4, 149, 0, 1, 87'000'000});
  engine.submit({5, 136, 0, 29, 80'000'000});
  std::uint64_t parked = 0;  // steps with nothing running, no work, and requests waiting
  while (engine.steps() < 10'000) {
    const std::uint64_t idle_before = engine.idle_steps();
    if (!engine.step()) break;
    if (engine.idle_steps() > idle_before && engine.scheduler().size() > 0 &&
        !any_running_or_swapped(engine)) {
      ++parked;
    }
  }
  EXPECT_EQ(parked, 0U);
  EXPECT_EQ(engine.scheduler().size(), 0U);
  for (const auto& [id, st] : engine.stats()) EXPECT_TRUE(st.finished) << id;
  EXPECT_GT(engine.scheduler().counters().livelock_releases, 0U);
  EXPECT_EQ(engine.allocation_failures(), 0U);
}

TEST(SchedulerProperty, ARequestThatCanNeverFitIsAbortedNotHung) {
  SchedulerOptions o = base_options();
  o.total_kv_blocks = 4;
  MiniEngine engine(o, kH100, kv_options(4, 0.5), StepLimits{});
  engine.submit({1, 16, 200, 8, 0});  // its reasoning outgrows the whole 4-block pool
  EXPECT_TRUE(engine.run(10'000));
  EXPECT_TRUE(engine.stats().at(1).aborted);
  EXPECT_EQ(engine.scheduler().counters().aborted, 1U);
  EXPECT_EQ(engine.blocks().usage().free_blocks, 4U);
}

}  // namespace
}  // namespace meridian
