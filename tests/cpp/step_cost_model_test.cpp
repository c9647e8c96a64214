// StepCostModel: static predictions, online RLS convergence, bad samples.
#include "meridian/step_cost_model.h"

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
