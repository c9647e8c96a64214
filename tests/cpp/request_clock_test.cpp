// RequestClock: the per-request times of an engine adapter, recorded into the
// real MetricRegistry through EngineMetrics, on a hand-driven wall clock.
#include "meridian/request_clock.h"

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "meridian/config.h"
#include "meridian/error.h"
#include "meridian/metrics.h"

namespace meridian::telemetry {
namespace {

constexpr TokenId kThinkStart = 151667;
constexpr TokenId kWord = 42;
constexpr std::uint8_t kMet = 0;
constexpr std::uint8_t kMissed = 1;

struct Rig {
  explicit Rig(RequestClock::Slo bounds = {1.0, 0.02, 0.08}) : clock(feed, bounds, starts) {}
  MetricRegistry registry;
  EngineMetrics feed{registry};
  std::vector<TokenId> starts{kThinkStart};
  RequestClock clock;

  [[nodiscard]] double bound(std::string_view name) const {
    for (std::uint8_t bit = 0; bit < kSloMissBounds; ++bit) {
      if (slo_miss_name(bit) == name) return registry.value(MetricId::kSloBoundMisses, {bit});
    }
    return -1;
  }

  [[nodiscard]] double count(MetricId id) const { return registry.value(id); }
  [[nodiscard]] double slo(std::uint8_t outcome) const {
    return registry.value(MetricId::kSloRequests, {outcome});
  }
  [[nodiscard]] double sum(MetricId id) const {
    for (const FamilySnapshot& f : registry.snapshot()) {
      if (f.id == id) return f.series.at(0).sum;
    }
    return -1;
  }
};

TEST(RequestClock, AnswerOnlyRequestTimesTtftTtfvItlAndE2e) {
  Rig rig;
  rig.clock.add(1, 10.0, false);
  rig.clock.sampled(1, kWord, 10.2);  // first token, visible
  rig.clock.sampled(1, kWord, 10.21);
  rig.clock.sampled(1, kWord, 10.23);
  EXPECT_EQ(rig.count(MetricId::kOutputItl), 2);
  EXPECT_NEAR(rig.sum(MetricId::kOutputItl), 0.03, 1e-9);
  rig.clock.finish(1, true, 0, 10.5);
  EXPECT_EQ(rig.clock.size(), 0U);
  EXPECT_NEAR(rig.sum(MetricId::kRequestTtft), 0.2, 1e-9);
  EXPECT_NEAR(rig.sum(MetricId::kRequestTtfv), 0.2, 1e-9);
  EXPECT_EQ(rig.count(MetricId::kRequestTtot), 0);  // no think block
  EXPECT_NEAR(rig.sum(MetricId::kRequestE2e), 0.5, 1e-9);
  EXPECT_EQ(rig.slo(kMet), 1);  // mean TPOT 15 ms <= 20 ms
}

TEST(RequestClock, ThinkTokensAreInvisibleUntilThePhaseChanges) {
  Rig rig;
  rig.clock.add(7, 0.0, true);
  rig.clock.sampled(7, kWord, 0.1);  // TTFT, not visible
  rig.clock.sampled(7, kWord, 0.15);
  rig.clock.think_ended(7, 0.2);
  rig.clock.set_thinking(7, false);
  rig.clock.sampled(7, kWord, 0.22);  // first visible: TTOT 20 ms
  rig.clock.finish(7, true, 3, 0.3);
  EXPECT_NEAR(rig.sum(MetricId::kRequestTtft), 0.1, 1e-9);
  EXPECT_NEAR(rig.sum(MetricId::kRequestTtfv), 0.22, 1e-9);
  EXPECT_NEAR(rig.sum(MetricId::kRequestTtot), 0.02, 1e-9);
  EXPECT_EQ(rig.count(MetricId::kOutputItl), 0);
  EXPECT_EQ(rig.slo(kMet), 1);  // think TPOT (0.2 - 0.1) / 2 = 50 ms <= 80 ms
}

TEST(RequestClock, AThinkStartSampledWhileAnsweringIsNotVisible) {
  Rig rig;
  rig.clock.add(3, 0.0, false);
  rig.clock.sampled(3, kThinkStart, 0.1);
  rig.clock.finish(3, true, 0, 0.2);
  EXPECT_EQ(rig.count(MetricId::kRequestTtfv), 0);
  EXPECT_EQ(rig.count(MetricId::kRequestTtft), 1);
}

TEST(RequestClock, EachBoundDecidesTheVerdict) {
  Rig rig;
  rig.clock.add(1, 0.0, false);  // TTFT 1.5 s > 1 s
  rig.clock.sampled(1, kWord, 1.5);
  rig.clock.finish(1, true, 0, 2.0);
  rig.clock.add(2, 0.0, false);  // answer TPOT 30 ms > 20 ms
  rig.clock.sampled(2, kWord, 0.1);
  rig.clock.sampled(2, kWord, 0.13);
  rig.clock.finish(2, true, 0, 0.2);
  rig.clock.add(3, 0.0, true);  // think TPOT 100 ms > 80 ms
  rig.clock.sampled(3, kWord, 0.1);
  rig.clock.think_ended(3, 0.3);
  rig.clock.finish(3, true, 3, 0.4);
  rig.clock.add(4, 0.0, false);  // aborted: missed, no E2E
  rig.clock.sampled(4, kWord, 0.1);
  rig.clock.finish(4, false, 0, 0.2);
  EXPECT_EQ(rig.slo(kMet), 0);
  EXPECT_EQ(rig.slo(kMissed), 4);
  EXPECT_EQ(rig.count(MetricId::kRequestE2e), 3);
  // Each request under the one bound it missed (slo_miss_name order).
  EXPECT_EQ(rig.bound("incomplete"), 1);
  EXPECT_EQ(rig.bound("ttft"), 1);
  EXPECT_EQ(rig.bound("ttfv"), 0);
  EXPECT_EQ(rig.bound("think_tpot"), 1);
  EXPECT_EQ(rig.bound("output_tpot"), 1);
}

TEST(RequestClock, ATtfvBoundAppliesToReasoningRequestsOnlyWhenSet) {
  // Reasoning request: first answer token at 2.5 s; chat request: at 2.5 s too.
  const auto drive = [](RequestClock& clock) {
    clock.add(1, 0.0, true);
    clock.sampled(1, kWord, 0.5);
    clock.think_ended(1, 2.4);
    clock.set_thinking(1, false);
    clock.sampled(1, kWord, 2.5);
    clock.finish(1, true, 40, 2.6);
    clock.add(2, 0.0, false);
    clock.sampled(2, kWord, 0.5);
    clock.finish(2, true, 0, 0.6);
    clock.add(3, 0.0, true);  // thought, then finished with no answer token
    clock.sampled(3, kWord, 0.5);
    clock.think_ended(3, 0.9);
    clock.finish(3, true, 10, 1.0);
  };
  Rig unbounded;
  drive(unbounded.clock);
  EXPECT_EQ(unbounded.slo(kMet), 3);
  EXPECT_EQ(unbounded.bound("ttfv"), 0);
  Rig bounded(RequestClock::Slo{1.0, 0.02, 0.08, 2.0});
  drive(bounded.clock);
  EXPECT_EQ(bounded.slo(kMet), 1);  // the chat request; the others miss TTFV
  EXPECT_EQ(bounded.bound("ttfv"), 2);
  EXPECT_EQ(bounded.bound("ttft"), 0);
}

TEST(RequestClock, UnknownIdsAreIgnoredAndReAddingRestarts) {
  Rig rig;
  rig.clock.sampled(99, kWord, 1.0);
  rig.clock.set_thinking(99, true);
  rig.clock.think_ended(99, 1.0);
  rig.clock.finish(99, true, 0, 1.0);
  EXPECT_EQ(rig.slo(kMet) + rig.slo(kMissed), 0);
  rig.clock.add(5, 0.0, false);
  rig.clock.sampled(5, kWord, 0.5);
  rig.clock.add(5, 1.0, false);  // restarted: its first token is still to come
  rig.clock.sampled(5, kWord, 1.1);
  rig.clock.finish(5, true, 0, 1.2);
  EXPECT_NEAR(rig.sum(MetricId::kRequestTtft), 0.1, 1e-9);
  EXPECT_EQ(rig.clock.size(), 0U);
}

TEST(RequestClock, TheVerdictUsesTheConfiguredBounds) {
  // Inside vLLM the verdict hard-coded TTFT at 1 s and had no TTFV bound, whatever
  // [scheduler] said (issue 48). slo_of() is the one derivation.
  SchedulerConfig scheduler;
  scheduler.ttft_slo_ms = 2000;
  scheduler.output_tpot_budget_ms = 30;
  scheduler.think_tpot_budget_ms = 90;
  scheduler.ttfv_slo_ms = 500;
  const RequestClock::Slo slo = RequestClock::slo_of(scheduler);
  EXPECT_DOUBLE_EQ(slo.ttft_s, 2.0);
  EXPECT_DOUBLE_EQ(slo.output_tpot_s, 0.03);
  EXPECT_DOUBLE_EQ(slo.think_tpot_s, 0.09);
  EXPECT_DOUBLE_EQ(slo.ttfv_s, 0.5);
  Rig rig(slo);
  rig.clock.add(1, 0.0, false);  // TTFT 1.5 s: met under 2 s (missed under the old fixed 1 s)
  rig.clock.sampled(1, kWord, 1.5);
  rig.clock.finish(1, true, 0, 1.6);
  EXPECT_EQ(rig.slo(kMet), 1);
  rig.clock.add(2, 10.0, true);  // a reasoning request's first answer token at 0.6 s > 0.5 s
  rig.clock.sampled(2, kWord, 10.1);
  rig.clock.think_ended(2, 10.5);
  rig.clock.set_thinking(2, false);
  rig.clock.sampled(2, kWord, 10.6);
  rig.clock.finish(2, true, 5, 10.7);
  EXPECT_EQ(rig.slo(kMissed), 1);
  EXPECT_EQ(rig.bound("ttfv"), 1);
  // A positive TTFV bound stays a bound however small; 0 is none.
  scheduler.ttfv_slo_ms = 1e-320;
  EXPECT_GT(RequestClock::slo_of(scheduler).ttfv_s, 0.0);
  scheduler.ttfv_slo_ms = 0;
  EXPECT_EQ(RequestClock::slo_of(scheduler).ttfv_s, 0.0);
}

TEST(RequestClock, ANegativeThinkTokenCountIsRefusedNotAPass) {
  // finish(think_tokens = -1) skipped the think TPOT check and turned a miss into met.
  Rig rig;
  rig.clock.add(3, 0.0, true);
  rig.clock.sampled(3, kWord, 0.1);
  rig.clock.think_ended(3, 10.0);  // 100 s of thinking
  EXPECT_THROW(rig.clock.finish(3, true, -1, 10.1), InvalidArgument);
  EXPECT_EQ(rig.clock.size(), 1U) << "a refused call changes nothing";
  rig.clock.finish(3, true, 11, 10.1);  // 990 ms a think token > 80 ms
  EXPECT_EQ(rig.slo(kMissed), 1);
  EXPECT_EQ(rig.bound("think_tpot"), 1);
}

TEST(RequestClock, RefusesBoundsThatAreNotFinitePositive) {
  MetricRegistry registry;
  EngineMetrics feed(registry);
  const std::vector<TokenId> starts{kThinkStart};
  EXPECT_THROW(RequestClock(feed, {0.0, 0.02, 0.08}, starts), InvalidArgument);
  EXPECT_THROW(RequestClock(feed, {1.0, -1.0, 0.08}, starts), InvalidArgument);
  EXPECT_THROW(RequestClock(feed, {1.0, 0.02, 0.08, -2.0}, starts), InvalidArgument);
  EXPECT_NO_THROW(RequestClock(feed, {1.0, 0.02, 0.08, 0.0}, starts));  // 0: no TTFV bound
  try {
    const RequestClock clock(feed, {1.0, 0.02, std::numeric_limits<double>::infinity()}, starts);
    FAIL() << "an infinite bound was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("slo.think_tpot_s"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace meridian::telemetry
