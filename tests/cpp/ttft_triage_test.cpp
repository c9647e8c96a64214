// TTFT triage (ADR-0028): Moore-Hodgson over the waiting prompts, and the
// engine query DualQueueScheduler::ttft_deferrals() built on it.
#include "scheduler/ttft_triage.h"

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "meridian/scheduler.h"

namespace meridian {
namespace {

using sched_detail::TtftTriage;
using sched_detail::TtftTriageParams;

constexpr std::int64_t kMs = 1'000'000;

// 1 ms per prompt token, a 10 ms TTFT budget, now = 0.
std::vector<std::size_t> deferred(const std::vector<WaitingPrompt>& queue, double per_token_ms = 1.0) {
  TtftTriage triage;
  std::vector<std::size_t> out;
  triage.run(queue, TtftTriageParams{per_token_ms, 10.0, 0}, [&](std::size_t i) { out.push_back(i); });
  return out;
}

WaitingPrompt prompt(std::uint32_t tokens, std::int64_t arrival_ms = 0) {
  return {arrival_ms * kMs, tokens, false};
}

TEST(TtftTriage, PromptsThatAllFitKeepTheirOrder) {
  EXPECT_TRUE(deferred({prompt(3), prompt(3), prompt(4)}).empty());  // the last ends at exactly 10 ms
  EXPECT_TRUE(deferred({}).empty());
}

TEST(TtftTriage, TheLongestPromptKeptSoFarYieldsWhenADeadlinePasses) {
  // In arrival order, 8 + 3 = 11 ms passes the second prompt's 10 ms: the
  // longest kept (the first) yields, and both short ones make it. FCFS would
  // have met one deadline of three.
  EXPECT_EQ(deferred({prompt(8), prompt(3), prompt(3)}), (std::vector<std::size_t>{0}));
  // 6 + 6: the tie goes to the later prompt; the 3-token prompt after it fits.
  EXPECT_EQ(deferred({prompt(6), prompt(6), prompt(3)}), (std::vector<std::size_t>{1}));
  // A prompt that cannot make it even alone yields at once.
  EXPECT_EQ(deferred({prompt(2), prompt(12), prompt(2)}), (std::vector<std::size_t>{1}));
}

TEST(TtftTriage, DeadlinesFollowArrival) {
  // The first arrived 5 ms ago: 5 ms of its budget is left, and its 6 tokens
  // miss it; the second arrived now and, alone, fits its 10 ms.
  EXPECT_EQ(deferred({prompt(6, -5), prompt(6)}), (std::vector<std::size_t>{0}));
  // Arrival 3 ms ago, 7 tokens: exactly on time.
  EXPECT_TRUE(deferred({prompt(7, -3)}).empty());
}

TEST(TtftTriage, APromptThatWaitedTenBudgetsIsNeverDeferred) {
  // 100 ms = 10 budgets: it keeps its place (and its time counts), so the
  // short prompt behind it is the one that yields.
  EXPECT_EQ(deferred({prompt(8, -100), prompt(3)}), (std::vector<std::size_t>{1}));
  EXPECT_EQ(deferred({prompt(8, -99), prompt(3)}), (std::vector<std::size_t>{0}));
}

TEST(TtftTriage, NothingIsDeferredWithoutACostOrABudget) {
  EXPECT_TRUE(deferred({prompt(50), prompt(50)}, 0.0).empty());
  TtftTriage triage;
  bool any = false;
  triage.run(std::vector<WaitingPrompt>{prompt(50)}, TtftTriageParams{1.0, 0.0, 0},
             [&](std::size_t) { any = true; });
  EXPECT_FALSE(any);
}

TEST(TtftTriage, OnlyTheWindowAtTheHeadIsJudged) {
  std::vector<WaitingPrompt> queue(TtftTriage::kWindow + 10, prompt(20));
  const std::vector<std::size_t> out = deferred(queue);
  ASSERT_EQ(out.size(), TtftTriage::kWindow);  // each alone misses; past the window none is named
  EXPECT_EQ(out.back(), TtftTriage::kWindow - 1);
}

SchedulerOptions triage_options() {
  SchedulerOptions o;
  o.ttft_slo_ms = 10;
  return o;
}

TEST(TtftDeferrals, TheEngineQueryNamesLatePromptsAscendingAndCountsEachOnce) {
  DualQueueScheduler scheduler(triage_options(),
                               StepCostModel(StepCostCoefficients{5.0, 1.0, 0.0}, false, 1.0));
  std::vector<WaitingPrompt> queue{prompt(8), prompt(3), prompt(12), prompt(3)};
  EXPECT_EQ(scheduler.ttft_deferrals(queue, 0), (std::vector<std::size_t>{0, 2}));
  EXPECT_EQ(scheduler.counters().ttft_deferred, 2U);
  queue[0].deferred_before = true;
  queue[2].deferred_before = true;
  EXPECT_EQ(scheduler.ttft_deferrals(queue, 0), (std::vector<std::size_t>{0, 2}));
  EXPECT_EQ(scheduler.counters().ttft_deferred, 2U);  // the engine deferred them already
}

TEST(TtftDeferrals, OffNamesNothing) {
  SchedulerOptions o = triage_options();
  o.ttft_triage = false;
  DualQueueScheduler scheduler(o, StepCostModel(StepCostCoefficients{5.0, 1.0, 0.0}, false, 1.0));
  EXPECT_TRUE(scheduler.ttft_deferrals(std::vector<WaitingPrompt>{prompt(8), prompt(3)}, 0).empty());
  EXPECT_EQ(scheduler.counters().ttft_deferred, 0U);
}

}  // namespace
}  // namespace meridian
