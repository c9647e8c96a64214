// Admission by pausing thinking (ADR-0027) as an engine adapter asks for it:
// DualQueueScheduler::admission_victims().
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meridian/error.h"
#include "meridian/scheduler.h"
#include "scheduler_rig.h"

namespace meridian {
namespace {

using testing::SchedulerRig;

constexpr std::int64_t kMs = 1'000'000;

SchedulerOptions options() {
  SchedulerOptions o;
  o.total_kv_blocks = 1024;
  o.preempt_max_fraction = 1.0;
  return o;
}

// Three think requests of a 160-token prompt that have each decoded 40 think
// tokens (a 3.2 s mean deadline at 80 ms a token, far past two TTFT budgets);
// request 3 was added back after a preemption.
class AdmissionVictims : public ::testing::Test {
 protected:
  void SetUp() override {
    rig.add(1, 160);
    rig.add(2, 160);
    rig.scheduler.add({3, Phase::kThinkDecode, 160, 0, 0, 1});
    while (rig.scheduler.view(3)->generated_tokens < 40) rig.step({}, 5.0);
    ASSERT_EQ(rig.scheduler.view(1)->generated_tokens, 40U);
    arrived = rig.now_ns - 600 * kMs;  // waited past half the 1 s TTFT
    blocks = rig.scheduler.view(1)->context_tokens / 16;
  }

  std::vector<RequestId> victims(std::uint64_t need,
                                 std::size_t max_victims = std::numeric_limits<std::size_t>::max()) {
    std::vector<RequestId> out = rig.scheduler.admission_victims(arrived, need, 0, rig.now_ns, max_victims);
    std::sort(out.begin(), out.end());
    return out;
  }

  SchedulerRig rig{options(), StepCostCoefficients{5.0, 0.0, 0.0}};
  std::int64_t arrived = 0;
  std::uint64_t blocks = 0;
};

TEST_F(AdmissionVictims, ARequestPreemptedBeforeIsNeverNamed) {
  EXPECT_EQ(victims(2 * blocks), (std::vector<RequestId>{1, 2}));
  EXPECT_TRUE(victims(3 * blocks).empty());  // only request 3 would cover it: all or nothing
  EXPECT_EQ(rig.scheduler.counters().admission_preemptions, 2U);
}

TEST_F(AdmissionVictims, MaxVictimsBoundsWhatOneCallNames) {
  EXPECT_EQ(rig.scheduler.step_victim_share(), 3U);  // preempt_max_fraction 1.0 of three
  EXPECT_EQ(victims(1, 1).size(), 1U);
  EXPECT_TRUE(victims(2 * blocks, 1).empty());
  EXPECT_TRUE(victims(1, 0).empty());
}

// The share an engine reads before pausing for the first prompt of a step:
// preempt_max_fraction of the requests the core knows, at least one; every
// call is bounded by it whatever max_victims says.
TEST(StepVictimShare, IsTheFractionOfTheRunningRequestsAndAtLeastOne) {
  SchedulerOptions o = options();
  o.preempt_max_fraction = 0.5;
  SchedulerRig rig{o, StepCostCoefficients{5.0, 0.0, 0.0}};
  EXPECT_EQ(rig.scheduler.step_victim_share(), 1U);  // nothing runs
  for (RequestId id = 1; id <= 5; ++id) rig.add(id, 160);
  while (rig.scheduler.view(1)->generated_tokens < 40) rig.step({}, 5.0);
  EXPECT_EQ(rig.scheduler.step_victim_share(), 2U);  // floor(0.5 * 5)
  const std::uint64_t blocks = rig.scheduler.view(1)->context_tokens / 16;
  const std::int64_t arrived = rig.now_ns - 600 * kMs;
  EXPECT_TRUE(rig.scheduler.admission_victims(arrived, 3 * blocks, 0, rig.now_ns).empty());  // three > two
  EXPECT_EQ(rig.scheduler.admission_victims(arrived, 2 * blocks, 0, rig.now_ns).size(), 2U);
}

// The wait victims see is measured and reported (victim_wait_ms(), a
// gauge), not a condition of pausing: ADR-0035 retired ADR-0034's rule, which
// gained only in a simulator that resumed victims in the wrong order. A
// victim the engine re-adds after a 10 s wait sets the estimate; requests 1
// and 2, with about 3 s of slack, are paused all the same.
TEST_F(AdmissionVictims, TheWaitVictimsSeeIsReportedNotAConditionOfPausing) {
  EXPECT_EQ(rig.scheduler.victim_wait_ms(), 0.0);  // no victim has come back
  rig.scheduler.add({4, Phase::kThinkDecode, 160, 0, rig.now_ns, 1, 159, 0, 0, 10'000 * kMs});
  EXPECT_DOUBLE_EQ(rig.scheduler.victim_wait_ms(), 10'000.0);
  // Each later wait moves the estimate a tenth of the way.
  rig.scheduler.add({5, Phase::kThinkDecode, 160, 0, rig.now_ns, 1, 159, 0, 0, 1'000 * kMs});
  EXPECT_DOUBLE_EQ(rig.scheduler.victim_wait_ms(), 9'100.0);
  EXPECT_EQ(victims(blocks), (std::vector<RequestId>{2}));  // the newer of two equals
  EXPECT_EQ(rig.scheduler.counters().admission_preemptions, 1U);
}

TEST(AdmissionVictimsOfEngineRequests, ANegativeVictimWaitIsAnError) {
  SchedulerRig rig{options(), StepCostCoefficients{5.0, 0.0, 0.0}};
  try {
    rig.scheduler.add({7, Phase::kThinkDecode, 160, 0, 0, 1, 159, 0, 0, -1});
    FAIL() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("request 7: victim_wait_ns must be >= 0 (got -1)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(rig.scheduler.size(), 0U);
}

TEST_F(AdmissionVictims, APromptThatHasNotWaitedHalfItsTtftPausesNobody) {
  arrived = rig.now_ns - 400 * kMs;
  EXPECT_TRUE(victims(1).empty());
  EXPECT_EQ(rig.scheduler.counters().admission_preemptions, 0U);
}

// An engine adds a request at its first generated token with its prompt
// computed (computed_prompt_tokens): that KV is the request's own, so a pause
// frees all of it. A prompt found in the prefix cache (cached_prompt_tokens)
// is shared: a pause frees only what the request added.
TEST(AdmissionVictimsOfEngineRequests, AComputedPromptIsFreedAndACachedOneIsNot) {
  SchedulerRig rig{options(), StepCostCoefficients{5.0, 0.0, 0.0}};
  rig.scheduler.add({1, Phase::kThinkDecode, 1600, 0, 0, 0, 1599});  // its own 100 blocks
  rig.scheduler.add({2, Phase::kThinkDecode, 1600, 1599, 0, 0, 0});  // 99 of them shared
  while (rig.scheduler.view(1)->generated_tokens < 40) rig.step({}, 5.0);
  ASSERT_EQ(rig.scheduler.view(2)->context_tokens, 1639U);  // 103 blocks each
  const std::int64_t arrived = rig.now_ns - 600 * kMs;
  auto victims = [&](std::uint64_t need) {
    std::vector<RequestId> out = rig.scheduler.admission_victims(arrived, need, 0, rig.now_ns);
    std::sort(out.begin(), out.end());
    return out;
  };
  // Equal progress: the newer (2) is taken first, and frees 103 - 99 = 4 blocks.
  EXPECT_EQ(victims(4), (std::vector<RequestId>{2}));
  EXPECT_EQ(victims(5), (std::vector<RequestId>{1, 2}));
  EXPECT_EQ(victims(107), (std::vector<RequestId>{1, 2}));  // 4 + 103
  EXPECT_TRUE(victims(108).empty());
}

TEST(AdmissionVictimsOfEngineRequests, AComputedPromptPastThePromptIsAnError) {
  SchedulerRig rig{options(), StepCostCoefficients{5.0, 0.0, 0.0}};
  EXPECT_THROW(rig.scheduler.add({1, Phase::kThinkDecode, 16, 0, 0, 0, 17}), InvalidArgument);
  EXPECT_THROW(rig.scheduler.add({2, Phase::kThinkDecode, 16, 0, 0, 1, 15, 10, 0}), InvalidArgument);
}

// A think request re-added after a preemption with its history (100 tokens
// since a first token 9 s ago: its mean deadline, 8 s after it, has passed)
// is due at once; the same request re-added as new is not.
TEST(EngineReaddedRequests, AResumedThinkRequestKeepsItsDeadline) {
  SchedulerRig rig{options(), StepCostCoefficients{5.0, 0.0, 0.0}};
  rig.now_ns = 20'000 * kMs;
  rig.scheduler.add({1, Phase::kThinkDecode, 200, 0, 0, 1, 199, 100, rig.now_ns - 9'000 * kMs});
  rig.scheduler.add({2, Phase::kThinkDecode, 200, 0, 0, 1, 199});
  EXPECT_EQ(rig.scheduler.view(1)->generated_tokens, 100U);
  rig.step({}, 5.0);  // the one-token steps that put both back
  const std::string next = rig.step({}, 5.0);
  EXPECT_NE(next.find("T1"), std::string::npos) << next;
  EXPECT_EQ(next.find("T2"), std::string::npos) << next;
}

}  // namespace
}  // namespace meridian
