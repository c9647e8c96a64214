// The ruler's own tests (docs/adr/0038): policies that only game a ruler must
// not score above vLLM's default on the sustainable ruler (on the retired one
// they do), and no policy's goodput may exceed its physical upper bound.
#include <vector>

#include <gtest/gtest.h>

#include "meridian/replay.h"
#include "meridian/replay_study.h"

namespace meridian::sim {
namespace {

// `mixed` over 900 s of arrivals on seeds 42-43: long enough for the backlog
// rule to see a held tail, short enough for a unit test.
StudyOptions mixed_study(double adversary_share) {
  StudyOptions o;
  o.seeds = {42, 43};
  o.params.workload = workload_preset("mixed");
  o.params.workload.duration_s = 900;
  o.params.engine.adversary_share = adversary_share;
  return o;
}

double mean_goodput(const GoodputResult& g, PolicyKind p) {
  const PolicyGoodput* found = g.find(p);
  return found != nullptr ? found->goodput_rps.mean : -1;
}

TEST(RulerAdversaries, NeitherBeatsVllmOnTheSustainableRulerWhileThePooledRulerRewardsThem) {
  // Shares inside a 90 % per-class target, so only the sustainability rules can stop them, and
  // inside the pooled one: on `mixed` 0.08 of the reasoning requests are ~3 % of all (an aborted
  // conversation's later turns are never sent: ~6 %).
  for (const double share : {0.04, 0.08}) {
    const std::vector<PolicyKind> policies = {PolicyKind::kVllmFcfs, PolicyKind::kAdversaryHold,
                                              PolicyKind::kAdversaryAbort};
    GoodputOptions sustainable;
    GoodputOptions pooled;
    pooled.ruler = Ruler::kPooledWindow;
    const GoodputResult now = find_goodput(policies, mixed_study(share), sustainable);
    const GoodputResult old = find_goodput(policies, mixed_study(share), pooled);
    const double fcfs = mean_goodput(now, PolicyKind::kVllmFcfs);
    ASSERT_GT(fcfs, 0);
    for (const PolicyKind adversary : {PolicyKind::kAdversaryHold, PolicyKind::kAdversaryAbort}) {
      const PolicyGoodput* a = now.find(adversary);
      ASSERT_NE(a, nullptr);
      for (std::size_t s = 0; s < a->goodput_rps.per_seed.size(); ++s) {
        EXPECT_LE(a->goodput_rps.per_seed[s], now.find(PolicyKind::kVllmFcfs)->goodput_rps.per_seed[s])
            << to_string(adversary) << " share " << share << " seed " << now.seeds[s];
      }
      EXPECT_GT(mean_goodput(old, adversary), mean_goodput(old, PolicyKind::kVllmFcfs))
          << to_string(adversary) << " share " << share << ": the retired ruler rewards it";
    }
  }
}

// Every policy's goodput at a workload's own window stays under its physical bound. Shorter windows
// let a slowly growing backlog pass for a steady state (long-think over 1,200 s: meridian-no-forcing
// 0.204 conv/s against a bound of 0.192), which is what the check is for.
void expect_under_the_bound(const char* kind) {
  StudyOptions o;
  o.seeds = {44};
  o.params.workload = workload_preset(kind);
  const std::vector<PolicyKind> policies = {PolicyKind::kVllmFcfs, PolicyKind::kStaticBudget,
                                            PolicyKind::kMeridianNoForcing, PolicyKind::kMeridian};
  const GoodputResult g = find_goodput(policies, o);
  for (const PolicyGoodput& p : g.policies) {
    ASSERT_EQ(p.bounds.size(), 1U);
    EXPECT_GT(p.bounds[0].rate, 0) << kind << " " << to_string(p.policy);
    EXPECT_FALSE(p.above_bound()) << kind << " " << to_string(p.policy) << ": goodput " << p.goodput_rps.mean
                                  << " above its bound " << p.bounds[0].rate;
  }
  // Forcing does less work per conversation, so its bound is higher than scheduling alone's.
  EXPECT_GT(g.find(PolicyKind::kMeridian)->upper_bound_rps.mean,
            g.find(PolicyKind::kMeridianNoForcing)->upper_bound_rps.mean)
      << kind;
}

TEST(RulerBound, NoPolicyAboveItOnMixed) { expect_under_the_bound("mixed"); }
TEST(RulerBound, NoPolicyAboveItOnLongThink) { expect_under_the_bound("long-think"); }
TEST(RulerBound, NoPolicyAboveItOnLongPrompt) { expect_under_the_bound("long-prompt"); }

}  // namespace
}  // namespace meridian::sim
