// StepCostModel: static predictions, online RLS convergence, bad samples.
#include "meridian/step_cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace meridian {
namespace {

TEST(StepCostModel, StaticPrediction) {
  StepCostModel m({6.0, 0.03, 0.044}, false, 1.0);
  EXPECT_DOUBLE_EQ(m.predict_ms(0, 0), 6.0);
  EXPECT_NEAR(m.predict_ms(100, 1'000'000), 6.0 + 3.0 + 44.0, 1e-9);
  EXPECT_TRUE(m.observe(10, 10, 99.0));  // counted, but static
  EXPECT_EQ(m.coefficients(), (StepCostCoefficients{6.0, 0.03, 0.044}));
}

TEST(StepCostModel, OnlineEstimatorConvergesToTheTrueCoefficients) {
  StepCostModel m({6.0, 0.03, 0.044}, true, 0.98);
  const StepCostModel truth({9.0, 0.05, 0.08}, false, 1.0);  // a slower machine
  std::uint64_t x = 12345;
  for (int i = 0; i < 400; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const std::uint64_t tokens = 1 + (x >> 33) % 512;
    const std::uint64_t kv = tokens * (100 + (x >> 20) % 4000);
    m.observe(tokens, kv, truth.predict_ms(tokens, kv));
  }
  const StepCostCoefficients c = m.coefficients();
  EXPECT_NEAR(c.base_ms, 9.0, 0.05);
  EXPECT_NEAR(c.per_token_ms, 0.05, 1e-3);
  EXPECT_NEAR(c.per_kv_token_us, 0.08, 1e-3);
}

// A long serving run: mostly decode steps whose batch and context drift
// slowly (nearly collinear features, little excitation), now and then a
// prefill chunk that the linear model cannot fit exactly. Without keeping P
// symmetric the estimate diverged here within a few thousand steps
// (predictions of 10^6 ms) and every think request became "due".
TEST(StepCostModel, StaysBoundedOverALongRunOfSimilarSteps) {
  StepCostModel m({6.0, 0.03, 0.044}, true, 0.98);
  std::uint64_t x = 99;
  double batch = 20;
  for (int i = 0; i < 200000; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    batch = std::clamp(batch + static_cast<double>(static_cast<int>((x >> 40) % 3) - 1), 5.0, 200.0);
    const bool prefill = (x >> 20) % 50 == 0;
    const auto tokens = static_cast<std::uint64_t>(batch) + (prefill ? 512 : 0);
    const auto kv = static_cast<std::uint64_t>(batch * 2300) + (prefill ? 512 : 0);
    // The replay's roofline: a linear part that turns compute-bound, plus KV reads.
    const double linear = std::max(5.65, 0.0278 * static_cast<double>(tokens));
    const double observed = 1.5 + linear + 0.055e-3 * static_cast<double>(kv);
    m.observe(tokens, kv, observed);
    const double predicted = m.predict_ms(tokens, kv);
    ASSERT_TRUE(std::isfinite(predicted)) << i;
    ASSERT_LT(predicted, 3 * observed + 10) << "step " << i;
  }
}

TEST(StepCostModel, RejectsNonFiniteAndNonPositiveTimes) {
  StepCostModel m({6.0, 0.03, 0.044}, true, 0.98);
  EXPECT_FALSE(m.observe(1, 1, std::numeric_limits<double>::quiet_NaN()));
  EXPECT_FALSE(m.observe(1, 1, -1.0));
  EXPECT_FALSE(m.observe(1, 1, 0.0));
  EXPECT_EQ(m.rejected(), 3U);
  EXPECT_EQ(m.observations(), 0U);
  EXPECT_EQ(m.coefficients(), (StepCostCoefficients{6.0, 0.03, 0.044}));
}

TEST(StepCostModel, RejectsBadConstruction) {
  EXPECT_THROW(StepCostModel({-1.0, 0.0, 0.0}, true, 0.9), std::invalid_argument);
  EXPECT_THROW(StepCostModel({1.0, 0.0, 0.0}, true, 0.0), std::invalid_argument);
  EXPECT_THROW(StepCostModel({1.0, 0.0, 0.0}, true, 1.5), std::invalid_argument);
}

TEST(StepCostModel, FromConfig) {
  MeridianConfig c = MeridianConfig::defaults();
  c.scheduler.step_cost_base_ms = 4.0;
  c.scheduler.step_cost_online = false;
  const StepCostModel m = StepCostModel::from_config(c.scheduler);
  EXPECT_FALSE(m.online());
  EXPECT_DOUBLE_EQ(m.coefficients().base_ms, 4.0);
}

}  // namespace
}  // namespace meridian
