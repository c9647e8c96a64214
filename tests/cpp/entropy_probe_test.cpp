// EAT, RPDI and the forcing decision, against hand-computed values and
// brute-force recomputation.
#include "meridian/entropy_probe.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

namespace meridian {
namespace {

ProbeSettings small_settings() {
  ProbeSettings s;
  s.ema_alpha = 0.5;
  s.eat_ema_variance_threshold = 0.01;
  s.eat_min_samples = 3;
  s.eat_probe_interval_tokens = 4;
  s.transition_entropy_threshold = 2.0;
  s.rpdi_window_tokens = 4;
  s.rpdi_min_samples = 8;
  s.rpdi_threshold = 1.5;
  s.min_think_tokens = 10;
  s.max_think_tokens = 100;
  return s;
}

TEST(EatTracker, SeedsFromTheFirstSampleAndFollowsTheUpdate) {
  EatTracker t(0.5);
  t.add(2.0);
  EXPECT_EQ(t.ema(), 2.0);  // not 0.5 or 0: seeded, so nothing "converges" on a timer
  EXPECT_EQ(t.variance(), 0.0);
  t.add(4.0);
  // ema = 0.5*4 + 0.5*2 = 3; var = 0.5*(4-3)^2 + 0.5*0 = 0.5
  EXPECT_DOUBLE_EQ(t.ema(), 3.0);
  EXPECT_DOUBLE_EQ(t.variance(), 0.5);
  t.add(3.0);
  // ema = 0.5*3 + 0.5*3 = 3; var = 0.5*0 + 0.5*0.5 = 0.25
  EXPECT_DOUBLE_EQ(t.ema(), 3.0);
  EXPECT_DOUBLE_EQ(t.variance(), 0.25);
  EXPECT_EQ(t.samples(), 3U);
  EXPECT_EQ(t.last(), 3.0);
}

TEST(RpdiTracker, RatesCountOnlySampledTokensAndSlideTheWindow) {
  RpdiTracker t(2.0, 4);
  // samples: T . . . . . T T  (T = above 2.0 nats)
  for (const double h : {3.0, 1.0, 1.0, 1.0, 1.0, 0.5, 2.5, 9.0}) t.add(h);
  EXPECT_EQ(t.samples(), 8U);
  EXPECT_EQ(t.transitions(), 3U);
  EXPECT_DOUBLE_EQ(t.global_rate(), 3.0 / 8.0);
  EXPECT_DOUBLE_EQ(t.local_rate(), 2.0 / 4.0);  // window: 1.0 0.5 2.5 9.0
  EXPECT_DOUBLE_EQ(t.ratio(), (2.0 / 4.0) / (3.0 / 8.0));
  RpdiTracker none(2.0, 4);
  none.add(1.0);
  EXPECT_EQ(none.ratio(), 0.0);  // no transition yet: no division by zero
  EXPECT_EQ(RpdiTracker(2.0, 4).local_rate(), 0.0);
}

TEST(EntropyProbe, ConvergesOnlyAfterMinTokensAndMinSamples) {
  EntropyProbe probe(small_settings());
  // A flat EAT trace: variance stays 0, so only the guards hold it back.
  std::uint64_t forced_at = 0;
  for (std::uint64_t t = 1; t <= 40 && forced_at == 0; ++t) {
    ThinkTokenObservation obs{.think_tokens = t};
    if (probe.eat_due(t)) obs.eat = EatSample{0.7, EatSource::kProbePass};
    const EntropySignal s = probe.observe(obs);
    if (s.force) {
      EXPECT_EQ(*s.force, ForceReason::kConverged);
      EXPECT_GE(s.eat_samples, 3U);
      forced_at = t;
    }
  }
  EXPECT_EQ(forced_at, 12U);  // samples at 4, 8, 12: the third sample is after min_think_tokens (10)
  EXPECT_EQ(probe.eat_source(), EatSource::kProbePass);
}

TEST(EntropyProbe, NoisyEatDoesNotConverge) {
  EntropyProbe probe(small_settings());
  for (std::uint64_t t = 1; t <= 99; ++t) {
    ThinkTokenObservation obs{.think_tokens = t};
    if (probe.eat_due(t)) obs.eat = EatSample{(t / 4) % 2 == 0 ? 0.2 : 1.8, EatSource::kProbePass};
    EXPECT_FALSE(probe.observe(obs).force) << t;
  }
  EXPECT_GT(probe.eat().variance(), 0.01);
}

TEST(EntropyProbe, HardCapFiresEvenWhenDisabled) {
  ProbeSettings s = small_settings();
  s.enabled = false;
  EntropyProbe probe(s);
  EXPECT_FALSE(probe.eat_due(4));  // no probe work when disabled
  EXPECT_FALSE(probe.observe({.think_tokens = 99, .token_entropy = 9.0}).force);
  const EntropySignal sig = probe.observe({.think_tokens = 100});
  ASSERT_TRUE(sig.force);
  EXPECT_EQ(*sig.force, ForceReason::kHardCap);
  EXPECT_EQ(probe.rpdi().samples(), 0U);  // disabled: signals ignored
}

TEST(EntropyProbe, OverthinkingFromABurstOfTransitions) {
  EntropyProbe probe(small_settings());
  std::optional<ForceReason> reason;
  std::uint64_t t = 0;
  // 12 calm tokens, then a burst of transitions.
  while (!reason && t < 60) {
    ++t;
    const double h = t <= 12 ? 0.5 : 4.0;
    reason = probe.observe({.think_tokens = t, .token_entropy = h}).force;
  }
  ASSERT_TRUE(reason);
  EXPECT_EQ(*reason, ForceReason::kOverthinking);
  // t=13: 1 transition of 13 (global 1/13, local 1/4): ratio 3.25 > 1.5.
  EXPECT_EQ(t, 13U);
}

TEST(EntropyProbe, ForcingIsHeldWhileAToolCallIsOpen) {
  EntropyProbe probe(small_settings());
  const EntropySignal held = probe.observe({.think_tokens = 100, .tool_call_open = true});
  EXPECT_FALSE(held.force);
  ASSERT_TRUE(held.held_by_tool_call);
  EXPECT_EQ(*held.held_by_tool_call, ForceReason::kHardCap);
  const EntropySignal released = probe.observe({.think_tokens = 101, .tool_call_open = false});
  ASSERT_TRUE(released.force);
  EXPECT_EQ(*released.force, ForceReason::kHardCap);
}

TEST(EntropyProbe, SourcesDoNotMixAndBadValuesAreDroppedAndCounted) {
  EntropyProbe probe(small_settings());
  probe.observe({.think_tokens = 4, .eat = EatSample{1.0, EatSource::kInStepProxy}});
  EXPECT_THROW(probe.observe({.think_tokens = 8, .eat = EatSample{1.0, EatSource::kProbePass}}),
               InvalidArgument);
  probe.observe({.think_tokens = 9,
                 .token_entropy = std::numeric_limits<double>::quiet_NaN(),
                 .eat = EatSample{std::numeric_limits<double>::infinity(), EatSource::kInStepProxy}});
  EXPECT_EQ(probe.counters().invalid_samples, 2U);
  EXPECT_EQ(probe.eat().samples(), 1U);
  EXPECT_EQ(probe.rpdi().samples(), 0U);
  EXPECT_THROW(probe.observe({.think_tokens = 3}), InvalidArgument);  // think tokens never go back
}

TEST(EntropyProbe, SamplesFromRowStats) {
  RowStats row;
  row.entropy = 1.5F;
  EXPECT_EQ(EatSample::from_probe_pass(row).source, EatSource::kProbePass);
  EXPECT_EQ(EatSample::in_step_proxy(row).source, EatSource::kInStepProxy);
  EXPECT_EQ(EatSample::in_step_proxy(row).value, 1.5);
}

TEST(EntropyProbe, SettingsComeFromConfig) {
  MeridianConfig config;
  config.entropy.eat_min_samples = 7;
  config.entropy.rpdi_window_tokens = 64;
  config.scheduler.min_think_tokens = 99;
  const ProbeSettings s = ProbeSettings::from(config);
  EXPECT_EQ(s.eat_min_samples, 7U);
  EXPECT_EQ(s.rpdi_window_tokens, 64U);
  EXPECT_EQ(s.min_think_tokens, 99U);
  EXPECT_EQ(s.max_think_tokens, config.scheduler.max_think_tokens);
}

// Property: the window rates equal a brute-force recount over the sampled
// tokens, and the EMA stays within the range of the samples seen.
RC_GTEST_PROP(EntropyProbeProperty, TrackersMatchBruteForce, ()) {
  const auto window = *rc::gen::inRange<std::uint32_t>(1, 200);
  const auto values = *rc::gen::container<std::vector<int>>(rc::gen::inRange(0, 600));
  const auto alpha = *rc::gen::inRange(1, 101) / 100.0;
  RpdiTracker rpdi(2.5, window);
  EatTracker eat(alpha);
  std::deque<bool> recent;
  std::uint64_t transitions = 0;
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  for (const int v : values) {
    const double h = v / 100.0;
    rpdi.add(h);
    eat.add(h);
    lo = std::min(lo, h);
    hi = std::max(hi, h);
    recent.push_back(h > 2.5);
    if (recent.size() > window) recent.pop_front();
    transitions += h > 2.5 ? 1 : 0;
    const auto in_window = static_cast<double>(std::count(recent.begin(), recent.end(), true));
    RC_ASSERT(std::fabs(rpdi.local_rate() - in_window / static_cast<double>(recent.size())) < 1e-12);
    RC_ASSERT(rpdi.transitions() == transitions);
    RC_ASSERT(eat.variance() >= 0.0);
    RC_ASSERT(eat.ema() >= lo - 1e-9 && eat.ema() <= hi + 1e-9);
  }
}

}  // namespace
}  // namespace meridian
