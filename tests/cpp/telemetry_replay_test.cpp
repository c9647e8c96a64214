// The replay simulator's telemetry hook (ReplayOptions::metrics, ::on_time):
// the live metrics agree with the run's own report, and observing a run
// changes none of its results.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meridian/metrics.h"
#include "meridian/replay.h"
#include "meridian/sim_workload.h"

namespace meridian::telemetry {
namespace {

sim::Workload small_workload() {
  sim::WorkloadParams w = sim::workload_preset("mixed");
  w.duration_s = 20;
  return sim::generate_workload(w, 7);
}

// Every reported metric except the run's own wall-clock time.
std::vector<std::pair<std::string, double>> deterministic_metrics(const sim::ReplayResult& r) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [name, value] : r.metrics) {
    if (name != "sim_wall_s" && name != "sim_tokens_per_s") out.emplace_back(name, value);
  }
  return out;
}

TEST(TelemetryReplay, LiveMetricsMatchTheReportAndObservingChangesNothing) {
  const sim::Workload workload = small_workload();
  sim::ReplayOptions plain;
  const sim::ReplayResult unobserved = sim::run_replay(workload, plain);

  MetricRegistry registry;
  EngineMetrics feed(registry);
  sim::ReplayOptions observed;
  observed.metrics = &feed;
  double last_time = -1;
  std::size_t time_calls = 0;
  observed.on_time = [&](double sim_s) {
    EXPECT_GE(sim_s, last_time);  // simulated time never goes back
    last_time = sim_s;
    ++time_calls;
  };
  const sim::ReplayResult r = sim::run_replay(workload, observed);

  EXPECT_EQ(deterministic_metrics(r), deterministic_metrics(unobserved));
  EXPECT_GT(time_calls, 0U);
  EXPECT_GE(last_time, r.metric("makespan_s"));

  EXPECT_EQ(registry.value(MetricId::kRequestTtft), static_cast<double>(r.ttft_ms.size()));
  EXPECT_EQ(registry.value(MetricId::kRequestTtfv), static_cast<double>(r.ttfv_ms.size()));
  EXPECT_EQ(registry.value(MetricId::kRequestTtot), static_cast<double>(r.ttot_ms.size()));
  EXPECT_EQ(registry.value(MetricId::kRequestE2e), static_cast<double>(r.e2e_ms.size()));
  EXPECT_EQ(registry.value(MetricId::kOutputItl), static_cast<double>(r.output_itl_ms.size()));
  EXPECT_EQ(registry.value(MetricId::kRequestsCompleted, {0}), r.metric("completed"));
  const double met = registry.value(MetricId::kSloRequests, {0});
  const double missed = registry.value(MetricId::kSloRequests, {1});
  EXPECT_EQ(met + missed, r.metric("arrived") - r.metric("unfinished"));
  EXPECT_NEAR(100.0 * met / r.metric("requests"), r.metric("slo_attainment_pct"), 1e-9);
  EXPECT_GT(registry.value(MetricId::kSchedulerSteps), 0);
  EXPECT_GT(registry.value(MetricId::kPhaseTransitions, {1}), 0);
  EXPECT_EQ(registry.value(MetricId::kThinkTokensPerRequest),
            registry.value(MetricId::kPhaseTransitions, {1}));
  EXPECT_GT(registry.value(MetricId::kBlockManagerCapacityBytes), 0);
  EXPECT_GT(registry.value(MetricId::kScheduleBatchDuration), 0);
  // The real forcing policy (EntropyProbe through the router): forces by reason
  // move exactly where the report saw forced ends of that reason.
  const char* const reasons[] = {"forced_converged_pct", "forced_overthinking_pct", "forced_hard_cap_pct"};
  double forces = 0;
  for (std::uint8_t reason = 0; reason < 3; ++reason) {
    const double issued = registry.value(MetricId::kBudgetForceReason, {reason});
    EXPECT_EQ(issued > 0, r.metric(reasons[reason]) > 0) << reasons[reason];
    forces += issued;
  }
  EXPECT_GT(forces, 0);
  EXPECT_EQ(registry.value(MetricId::kBudgetForceTriggered), forces);
  // KV and preemption counters equal the report's.
  double preemptions = 0;
  for (std::uint8_t phase = 0; phase < 2; ++phase) {
    for (std::uint8_t mode = 0; mode < 3; ++mode)
      preemptions += registry.value(MetricId::kPreemptions, {phase, mode});
  }
  EXPECT_EQ(preemptions, r.metric("preemptions"));
  EXPECT_EQ(registry.value(MetricId::kBlockManagerEvictions, {0}), r.metric("evictions_think_complete"));
  EXPECT_EQ(registry.value(MetricId::kBlockManagerEvictions, {1}), r.metric("evictions_think_active"));
  EXPECT_EQ(registry.value(MetricId::kBlockManagerEvictions, {2}), r.metric("evictions_output_critical"));
  EXPECT_EQ(registry.value(MetricId::kOutputCriticalEviction), r.metric("output_critical_eviction_events"));
  EXPECT_EQ(registry.misuse_count(), 0U);
}

}  // namespace
}  // namespace meridian::telemetry
