// The SLO grid study (meridian/slo_grid.h): its sets, the targets it judges,
// and its reports.
#include "meridian/slo_grid.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace meridian::sim {
namespace {

TEST(SloGrid, SetsAreTheGridThenTheDefaultThenTheDefaultWithTtfvThenMlperfs) {
  SloParams base;
  base.attainment_pct = 95;
  const std::vector<SloSet> sets = slo_grid_sets(base);
  ASSERT_EQ(sets.size(), 12U);
  std::vector<std::vector<double>> grid;
  for (std::size_t i = 0; i < 8; ++i) {
    grid.push_back({sets[i].slo.ttft_ms, sets[i].slo.output_tpot_ms, sets[i].slo.think_tpot_ms});
    EXPECT_EQ(sets[i].slo.ttfv_ms, 0);
    EXPECT_EQ(sets[i].slo.attainment_pct, 95);  // the target is not part of the grid
  }
  EXPECT_EQ(grid, (std::vector<std::vector<double>>{{500, 15, 40},
                                                    {500, 15, 120},
                                                    {500, 40, 40},
                                                    {500, 40, 120},
                                                    {2000, 15, 40},
                                                    {2000, 15, 120},
                                                    {2000, 40, 40},
                                                    {2000, 40, 120}}));
  EXPECT_EQ(sets[0].label, "ttft 500 ms / answer 15 ms / think 40 ms");
  EXPECT_EQ(sets[8].label, "default");
  EXPECT_EQ(sets[8].slo.ttft_ms, base.ttft_ms);
  EXPECT_EQ(sets[9].slo.ttfv_ms, 60000);
  EXPECT_EQ(sets[9].slo.output_tpot_ms, base.output_tpot_ms);
  // MLPerf Inference's DeepSeek-R1 sets (loadgen mlperf.conf): the 99th percentile, TPOT over
  // every output token, reasoning included.
  EXPECT_EQ(sets[10].label, "mlperf deepseek-r1 server");
  EXPECT_EQ(sets[10].slo.ttft_ms, 2000);
  EXPECT_EQ(sets[10].slo.output_tpot_ms, 80);
  EXPECT_EQ(sets[10].slo.think_tpot_ms, 80);
  EXPECT_EQ(sets[10].slo.attainment_pct, 99);
  EXPECT_EQ(sets[11].label, "mlperf deepseek-r1 interactive");
  EXPECT_EQ(sets[11].slo.ttft_ms, 1500);
  EXPECT_EQ(sets[11].slo.output_tpot_ms, 15);
  EXPECT_EQ(sets[11].slo.think_tpot_ms, 15);
  EXPECT_EQ(sets[11].slo.attainment_pct, 99);
  EXPECT_EQ(sets[11].slo.ttfv_ms, 0);
}

PolicyGoodput goodput(PolicyKind policy, std::vector<double> per_seed) {
  PolicyGoodput p;
  p.policy = policy;
  p.goodput_rps = seed_stat(std::move(per_seed));
  p.at_least.assign(p.goodput_rps.per_seed.size(), false);
  return p;
}

TEST(SloGrid, TargetsJudgeEachSetAgainstEveryBaselineThatRan) {
  SloGridResult grid;
  grid.sets = {SloSet{"a", SloParams{}}};
  GoodputResult g;
  g.seeds = {1, 2, 3};
  g.policies = {goodput(PolicyKind::kVllmFcfs, {1.0, 1.0, 1.0}),
                goodput(PolicyKind::kPascal, {1.1, 1.2, 1.0}),
                goodput(PolicyKind::kMeridianNoForcing, {1.2, 1.2, 1.2}),
                goodput(PolicyKind::kMeridian, {1.5, 1.5, 1.5})};
  grid.goodput = {g};
  const std::vector<SloGridTarget> targets = slo_grid_targets(grid);
  ASSERT_EQ(targets.size(), 2U);  // no vllm-best: neither its row nor meridian's 1.3x row
  EXPECT_EQ(targets[0].baseline, "vllm-fcfs");
  EXPECT_TRUE(targets[0].met());
  EXPECT_TRUE(targets[0].win());  // 1.2 on every seed: the interval is above 1
  EXPECT_EQ(targets[1].baseline, "pascal");
  EXPECT_TRUE(targets[1].met());   // mean of 1.09, 1.0, 1.2
  EXPECT_FALSE(targets[1].win());  // its interval reaches below 1
  const auto json = nlohmann::json::parse(slo_grid_json(grid, ReportContext{}));
  EXPECT_EQ(json["sets"][0]["label"], "a");
  EXPECT_EQ(json["sets"][0]["goodput_rps"]["pascal"]["per_seed"].size(), 3U);
  EXPECT_EQ(json["targets"].size(), 2U);
  const std::string md = slo_grid_markdown(grid, ReportContext{});
  EXPECT_NE(md.find("2 of 2 targets met (0 not judged"), std::string::npos) << md;
}

TEST(SloGrid, ATargetWhoseBaselineNeverMeetsTheSloIsNotJudged) {
  SloGridResult grid;
  grid.sets = {SloSet{"ttfv", SloParams{}}};
  GoodputResult g;
  g.seeds = {1, 2};
  g.policies = {goodput(PolicyKind::kVllmFcfs, {0.0, 0.0}),
                goodput(PolicyKind::kMeridianNoForcing, {0.0, 0.0})};
  grid.goodput = {g};
  const std::vector<SloGridTarget> targets = slo_grid_targets(grid);
  ASSERT_EQ(targets.size(), 1U);
  EXPECT_TRUE(targets[0].baseline_zero);
  EXPECT_FALSE(targets[0].met());
  const auto json = nlohmann::json::parse(slo_grid_json(grid, ReportContext{}));
  EXPECT_TRUE(json["targets"][0]["met"].is_null());
  EXPECT_NE(slo_grid_markdown(grid, ReportContext{}).find("0 of 0 targets met (1 not judged"),
            std::string::npos);
}

}  // namespace
}  // namespace meridian::sim
