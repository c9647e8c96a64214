// The sustainable ruler on hand-made timelines: each rule alone, the warm-up
// and late sets, the backlog statistic computed by hand, the watch that stops
// a run early, and the physical bound against an independent check through
// the cost model itself.
#include "meridian/sustainable_ruler.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "meridian/capacity_bound.h"
#include "meridian/replay.h"
#include "sim/engine_setup.h"

namespace meridian::sim {
namespace {

// A request that arrived at `arrival_s` and, when `done`, finished `service_s` later
// within every bound of the default SLO (or, `late`, after its TTFT bound).
RequestTimeline request(double arrival_s, double service_s, bool reasoning = false, bool done = true,
                        bool late = false) {
  RequestTimeline t;
  t.reasoning = reasoning;
  t.arrived = true;
  t.arrival_s = arrival_s;
  t.first_token_s = arrival_s + (late ? 5.0 : 0.05);
  t.first_visible_s = t.first_token_s;
  if (reasoning) {
    t.think_tokens = 100;
    t.natural_think_tokens = 100;
    t.think_end_s = t.first_token_s + 1.0;  // 10 ms a think token
    t.first_visible_s = t.think_end_s + 0.01;
  }
  t.answer_tokens = 50;
  t.last_token_s = t.first_visible_s + 49 * 0.015;
  t.finish_s = done ? std::max(arrival_s + service_s, t.last_token_s) : -1;
  t.completed = done;
  return t;
}

// `n` chat and `n` reasoning requests evenly over [0, window], each served in 2 s.
std::vector<RequestTimeline> steady(int n, double window) {
  std::vector<RequestTimeline> out;
  for (int i = 0; i < n; ++i) {
    const double at = window * i / (n - 1);
    out.push_back(request(at, 2.0, false));
    out.push_back(request(at, 2.0, true));
  }
  return out;
}

constexpr double kWindow = 400;

TEST(SustainableRuler, ASteadyServerMeetsIt) {
  const RunVerdict v = judge_run(steady(100, kWindow), kWindow, SloParams{});
  EXPECT_TRUE(v.meets) << v.explain();
  EXPECT_TRUE(v.sustainable());
  EXPECT_EQ(v.reason, VerdictReason::kMet);
  EXPECT_EQ(v.explain(), "");
  EXPECT_DOUBLE_EQ(v.attainment_pct, 100);
  // The warm-up (the first quarter) is not judged; the late set is the last quarter.
  EXPECT_EQ(v.chat.requests, 75U);
  EXPECT_EQ(v.chat.late_requests, 25U);
  EXPECT_EQ(v.reasoning.requests, 75U);
}

TEST(SustainableRuler, EveryRequestMustComplete) {
  std::vector<RequestTimeline> r = steady(100, kWindow);
  r[10] = request(r[10].arrival_s, 2.0, false, /*done=*/false);  // one never finished
  const RunVerdict v = judge_run(r, kWindow, SloParams{});
  EXPECT_FALSE(v.meets);
  EXPECT_EQ(v.reason, VerdictReason::kIncomplete);
  EXPECT_EQ(v.incomplete, 1U);
  EXPECT_FALSE(v.sustainable());
  // The retired ruler let it pass: 99.5 % pooled.
  EXPECT_TRUE(judge_run(r, kWindow, SloParams{}, Ruler::kPooledWindow).meets);
}

TEST(SustainableRuler, NoClassIsSacrificedForThePooledShare) {
  // 20 % of the reasoning requests (after the warm-up) miss TTFT; chat is perfect: 90 % pooled.
  std::vector<RequestTimeline> r = steady(100, kWindow);
  int sacrificed = 0;
  for (RequestTimeline& t : r) {
    if (t.reasoning && t.arrival_s >= kWindow / 4 && t.arrival_s < 3 * kWindow / 4 && sacrificed < 15) {
      t = request(t.arrival_s, 2.0, true, true, /*late=*/true);
      ++sacrificed;
    }
  }
  const RunVerdict v = judge_run(r, kWindow, SloParams{});
  EXPECT_FALSE(v.meets);
  EXPECT_EQ(v.reason, VerdictReason::kReasoningBelow);
  EXPECT_DOUBLE_EQ(v.chat.pct(), 100);
  EXPECT_DOUBLE_EQ(v.reasoning.pct(), 100.0 * 60 / 75);
  EXPECT_GE(v.attainment_pct, 90);
  EXPECT_TRUE(judge_run(r, kWindow, SloParams{}, Ruler::kPooledWindow).meets);
}

TEST(SustainableRuler, TheWarmupIsNotJudgedButMustComplete) {
  std::vector<RequestTimeline> r = steady(100, kWindow);
  for (RequestTimeline& t : r) {
    if (t.arrival_s < kWindow / 4 - 1) t = request(t.arrival_s, 2.0, t.reasoning, true, /*late=*/true);
  }
  EXPECT_TRUE(judge_run(r, kWindow, SloParams{}).meets);
  // A conversation is judged by when it started: a follow-up of a warm-up conversation is not judged.
  RequestTimeline follow_up = request(kWindow / 2, 2.0, false, true, /*late=*/true);
  follow_up.conversation_arrival_s = 1.0;
  r.push_back(follow_up);
  EXPECT_DOUBLE_EQ(conversation_start(r.back()), 1.0);
  EXPECT_TRUE(judge_run(r, kWindow, SloParams{}).meets);
}

TEST(SustainableRuler, LateArrivalsMustFareAsTheTargetDemands) {
  // The chat requests of the window's last 6 % all miss: 12 of the 150 judged, so the class as a
  // whole meets 90 %, but 12 of the 50 late ones is past the target's 5 and two standard deviations.
  std::vector<RequestTimeline> r = steady(200, kWindow);
  int missed = 0;
  for (RequestTimeline& t : r) {
    if (!t.reasoning && t.arrival_s >= 0.94 * kWindow) {
      t = request(t.arrival_s, 2.0, false, true, /*late=*/true);
      ++missed;
    }
  }
  const RunVerdict v = judge_run(r, kWindow, SloParams{});
  ASSERT_EQ(missed, 12);
  EXPECT_GE(v.chat.pct(), 90) << "the class as a whole meets the target";
  EXPECT_FALSE(v.meets);
  EXPECT_EQ(v.reason, VerdictReason::kLateChat);
  EXPECT_LT(v.chat.late_pct(), 90);
  EXPECT_EQ(v.chat.late_requests, 50U);
  EXPECT_EQ(v.chat.late_allowed_misses, 9U) << "5 for the target, 4 for binomial noise";
}

TEST(SustainableRuler, BacklogIsTheTimeAverageOfRequestsInTheSystem) {
  // Two requests in the system over [0, 100) and [150, 400); the bands of a 400 s window are its
  // second and last quarters, [100, 200] and [300, 400].
  std::vector<RequestTimeline> r = {request(0, 100), request(150, 250)};
  const BacklogStats b = backlog_stats(r, kWindow);
  EXPECT_DOUBLE_EQ(b.mid, 0.5);  // the second request covers [150, 200] of [100, 200]
  EXPECT_DOUBLE_EQ(b.end, 1.0);  // it covers all of [300, 400]
  EXPECT_DOUBLE_EQ(b.allowed_end, 0.5 + 4.0 * std::sqrt(0.5));
  EXPECT_DOUBLE_EQ(b.arrivals, 0) << "neither arrived in the window's second half";
  EXPECT_FALSE(b.growing());
  EXPECT_DOUBLE_EQ(b.growth_pct(), 100);
  // An unfinished request is in the system to the end; what happens after the window does not count.
  r.push_back(request(390, 100, false, /*done=*/false));
  EXPECT_DOUBLE_EQ(backlog_stats(r, kWindow).end, 1.1);
}

TEST(SustainableRuler, AGrowingBacklogFails) {
  // Steady traffic plus requests held from their arrival to past the window: a queue that grows.
  std::vector<RequestTimeline> r = steady(100, kWindow);
  for (int i = 0; i < 60; ++i) r.push_back(request(kWindow * i / 60.0, kWindow + 50 - kWindow * i / 60.0));
  const RunVerdict v = judge_run(r, kWindow, SloParams{});
  EXPECT_FALSE(v.meets);
  EXPECT_EQ(v.reason, VerdictReason::kBacklogGrowing);
  EXPECT_TRUE(v.backlog.growing());
  EXPECT_NE(v.explain().find("backlog grew"), std::string::npos);
  EXPECT_TRUE(judge_run(r, kWindow, SloParams{}, Ruler::kPooledWindow).meets);
}

TEST(SustainableRuler, AllowedMissesAreTheTargetsShareRoundedDown) {
  EXPECT_EQ(allowed_misses(100, 90), 10U);
  EXPECT_EQ(allowed_misses(99, 90), 9U);
  EXPECT_EQ(allowed_misses(0, 90), 0U);
  EXPECT_EQ(allowed_misses(1000, 99), 10U);
  EXPECT_EQ(allowed_misses(7, 100), 0U);
}

TEST(VerdictWatch, DecidesOnlyWhatIsDecidedAndSkipsTheWarmup) {
  Workload w;
  for (std::uint64_t i = 1; i <= 40; ++i) {
    RequestSpec r;
    r.id = i;
    r.arrival_s = static_cast<double>(i);  // first turns over [1, 40]: the warm-up is [0, 10)
    r.think_tokens = i % 2 == 0 ? 100 : 0;
    w.requests.push_back(r);
  }
  VerdictWatch watch(w, SloParams{}, Ruler::kSustainable);
  EXPECT_FALSE(watch.decided());
  for (RequestId id = 1; id <= 9; ++id) watch.missed(id);  // warm-up misses: not judged
  EXPECT_FALSE(watch.decided());
  // 15 judged chat requests (11 .. 39 odd): one miss allowed, the second decides.
  watch.missed(11);
  EXPECT_FALSE(watch.decided());
  watch.missed(13);
  ASSERT_TRUE(watch.decided());
  EXPECT_EQ(*watch.decided(), VerdictReason::kChatBelow);
  VerdictWatch dropped(w, SloParams{}, Ruler::kSustainable);
  dropped.dropped();
  EXPECT_EQ(dropped.decided(), VerdictReason::kIncomplete);
  // The retired ruler pools: 4 of 40 allowed, warm-up included.
  VerdictWatch pooled(w, SloParams{}, Ruler::kPooledWindow);
  for (RequestId id = 1; id <= 4; ++id) pooled.missed(id);
  EXPECT_FALSE(pooled.decided());
  pooled.missed(5);
  EXPECT_EQ(pooled.decided(), VerdictReason::kPooledBelow);
  EXPECT_DOUBLE_EQ(watch.conversation_start(7), 7.0);
}

TEST(Adversaries, TargetTheLongestThinkersShare) {
  Workload w;
  for (std::uint64_t i = 1; i <= 21; ++i) {
    RequestSpec r;
    r.id = i;
    r.think_tokens = i == 21 ? 0 : static_cast<std::uint32_t>(100 * i);  // request 21 is chat
    w.requests.push_back(r);
  }
  const std::vector<char> t = detail::adversary_targets(w, 0.1);  // 10 % of 20 reasoning requests
  int count = 0;
  for (char c : t) count += c;
  EXPECT_EQ(count, 2);
  EXPECT_EQ(t[19], 1);  // 2,000 think tokens
  EXPECT_EQ(t[18], 1);
  EXPECT_EQ(t[20], 0);  // chat is never a target
  EXPECT_EQ(detail::adversary_targets(w, 0.0), std::vector<char>(21, 0));
  int one = 0;
  for (char c : detail::adversary_targets(w, 0.001)) one += c;
  EXPECT_EQ(one, 1) << "a positive share targets at least one";
}

// ---- The physical bound ------------------------------------------------------

Workload one_turn(std::uint32_t prompt, std::uint32_t think, std::uint32_t answer) {
  Workload w;
  RequestSpec r;
  r.id = 1;
  r.prompt_tokens = prompt;
  r.think_tokens = think;
  r.answer_tokens = answer;
  w.requests.push_back(r);
  return w;
}

TEST(CapacityBound, WorkIsCountedByHand) {
  // Prompt 10, 4 think tokens, </think>, 3 answer tokens: 8 generated, 7 decodes reading 11 .. 17.
  const ConversationWork w = conversation_work(one_turn(10, 4, 3));
  EXPECT_DOUBLE_EQ(w.conversations, 1);
  EXPECT_DOUBLE_EQ(w.prefill_tokens, 10);
  EXPECT_DOUBLE_EQ(w.decode_tokens, 7);
  EXPECT_DOUBLE_EQ(w.kv_token_steps, 11 + 12 + 13 + 14 + 15 + 16 + 17);
  EXPECT_DOUBLE_EQ(w.kv_tokens_read, 10 + w.kv_token_steps);
  EXPECT_DOUBLE_EQ(w.attended_pairs, 10.0 * 11 / 2 + w.kv_token_steps);
  // What a policy emitted replaces the natural length: forcing at 1 think token.
  EXPECT_DOUBLE_EQ(conversation_work(one_turn(10, 4, 3), {1}).decode_tokens, 4);
  // A follow-up turn prefills only what its transcript does not cache (a chat answer is cached).
  Workload two = one_turn(10, 0, 5);
  RequestSpec next;
  next.id = 2;
  next.after = 1;
  next.prompt_tokens = 10 + 5 + 7;
  next.answer_tokens = 2;
  two.requests.push_back(next);
  const ConversationWork t = conversation_work(two);
  EXPECT_DOUBLE_EQ(t.conversations, 1);
  EXPECT_DOUBLE_EQ(t.prefill_tokens, 10 + 7);
}

// The bound, checked through the cost model itself: at the bound some uniform step of at most the
// SLO's longest fits its own work and the KV; 2 % above it none does.
bool some_step_fits(const CostModelParams& cost, const SloParams& slo, const ConversationWork& w,
                    double rate) {
  const RooflineCostModel model(cost);
  const double kv_tokens = model.kv_capacity_bytes() / static_cast<double>(cost.kv_bytes_per_token());
  const double longest_ms = std::max(slo.output_tpot_ms, slo.think_tpot_ms);
  for (double ms = 0.5; ms <= longest_ms + 1e-9; ms += 0.05) {
    const double per_step = rate * ms / 1000.0;  // conversations' worth of work per step
    StepShape s;
    s.tokens = static_cast<std::uint64_t>(std::llround(per_step * w.tokens()));
    s.kv_tokens_read = static_cast<std::uint64_t>(std::llround(per_step * w.kv_tokens_read));
    s.attended_pairs = per_step * w.attended_pairs;
    const bool gpu = model.step_ms(s) <= ms * 1.0005;
    const bool kv = rate * ms / 1000.0 * w.kv_token_steps <= kv_tokens * 1.0005;
    if (gpu && kv) return true;
  }
  return false;
}

TEST(CapacityBound, IsTheHighestRateAUniformPerfectScheduleSustains) {
  const CostModelParams cost;
  for (const char* kind : {"mixed", "long-think", "long-prompt"}) {
    WorkloadParams p = workload_preset(kind);
    p.duration_s = 300;
    const ConversationWork w = conversation_work(generate_workload(p, 42));
    for (const SloParams& slo :
         {SloParams{}, SloParams{2000, 0, 80, 80, 99}, SloParams{500, 0, 15, 40, 90}}) {
      const CapacityBound b = capacity_bound(cost, slo, w);
      ASSERT_GT(b.rate, 0) << kind;
      EXPECT_TRUE(some_step_fits(cost, slo, w, b.rate * 0.995)) << kind;
      EXPECT_FALSE(some_step_fits(cost, slo, w, b.rate * 1.02)) << kind;
      EXPECT_LE(b.step_ms, b.max_step_ms + 1e-9);
      EXPECT_TRUE(b.binding == "kv" || b.binding == "gpu");
    }
  }
}

TEST(CapacityBound, LessWorkRaisesItAndALongerStepNeverLowersIt) {
  const CostModelParams cost;
  WorkloadParams p = workload_preset("long-think");
  p.duration_s = 600;
  const Workload w = generate_workload(p, 7);
  std::vector<std::uint32_t> forced;
  for (const RequestSpec& r : w.requests) forced.push_back(r.think_tokens / 2);
  const double natural = capacity_bound(cost, SloParams{}, conversation_work(w)).rate;
  EXPECT_GT(capacity_bound(cost, SloParams{}, conversation_work(w, forced)).rate, natural * 1.2);
  SloParams loose;
  loose.think_tpot_ms = 400;
  EXPECT_GE(capacity_bound(cost, loose, conversation_work(w)).rate, natural);
}

}  // namespace
}  // namespace meridian::sim
