// Metric recording cost on the hot path, against prometheus-cpp's own metric
// objects measured in the same binary (docs/benchmarks.md): what an engine
// would pay per visible token (an ITL histogram observation) and per event (a
// counter add) if it recorded into the client library directly instead of
// into MetricRegistry's relaxed atomic cells. Also the per-step cost of
// EngineMetrics mirroring the router and scheduler (context).
#include <cstddef>
#include <vector>

#include <benchmark/benchmark.h>

#include "meridian/config.h"
#include "meridian/metrics.h"
#include "meridian/phase_router.h"
#include "meridian/scheduler.h"
#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace {

using meridian::telemetry::MetricId;
using meridian::telemetry::MetricRegistry;

// Gaps around the ITL buckets (seconds), cycled so every bucket is hit.
std::vector<double> gaps() {
  std::vector<double> out;
  for (int i = 0; i < 64; ++i) out.push_back(0.0005 * (i + 1));
  return out;
}

MetricRegistry& shared_registry() {
  static MetricRegistry registry;
  return registry;
}

void BM_RegistryObserveItl(benchmark::State& state) {
  MetricRegistry& registry = shared_registry();
  const std::vector<double> values = gaps();
  std::size_t i = 0;
  for (auto _ : state) {
    registry.observe(MetricId::kOutputItl, values[i++ & 63]);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RegistryObserveItl)->Threads(1)->Threads(2)->UseRealTime();

prometheus::Histogram& shared_prometheus_histogram() {
  static auto registry = std::make_shared<prometheus::Registry>();
  const auto itl = meridian::telemetry::spec(MetricId::kOutputItl).buckets;
  static prometheus::Histogram& histogram =
      prometheus::BuildHistogram()
          .Name("itl_seconds")
          .Help("baseline")
          .Register(*registry)
          .Add({}, prometheus::Histogram::BucketBoundaries(itl.begin(), itl.end()));
  return histogram;
}

void BM_PrometheusCppHistogramObserve(benchmark::State& state) {
  prometheus::Histogram& histogram = shared_prometheus_histogram();
  const std::vector<double> values = gaps();
  std::size_t i = 0;
  for (auto _ : state) {
    histogram.Observe(values[i++ & 63]);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PrometheusCppHistogramObserve)->Threads(1)->Threads(2)->UseRealTime();

void BM_RegistryCounterAdd(benchmark::State& state) {
  MetricRegistry& registry = shared_registry();
  for (auto _ : state) {
    registry.add(MetricId::kBudgetForceReason, 1, {2});
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RegistryCounterAdd)->Threads(1)->Threads(2)->UseRealTime();

prometheus::Counter& shared_prometheus_counter() {
  static auto registry = std::make_shared<prometheus::Registry>();
  static prometheus::Counter& counter = prometheus::BuildCounter()
                                            .Name("forces_total")
                                            .Help("baseline")
                                            .Register(*registry)
                                            .Add({{"reason", "hard_cap"}});
  return counter;
}

void BM_PrometheusCppCounterIncrement(benchmark::State& state) {
  prometheus::Counter& counter = shared_prometheus_counter();
  for (auto _ : state) {
    counter.Increment();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PrometheusCppCounterIncrement)->Threads(1)->Threads(2)->UseRealTime();

// Once per engine step: mirror the router's and the scheduler's counters and
// record the step (what the replay and the vLLM adapter do). Items = steps.
void BM_EngineMetricsPerStep(benchmark::State& state) {
  const meridian::MeridianConfig config = meridian::MeridianConfig::defaults();
  meridian::PhaseRouter router(config, "qwen3");
  meridian::DualQueueScheduler scheduler(meridian::SchedulerOptions::from_config(config, 1 << 20),
                                         meridian::StepCostModel::from_config(config.scheduler));
  MetricRegistry registry;
  meridian::telemetry::EngineMetrics metrics(registry);
  meridian::StepStats stats;
  stats.output_batch = 64;
  stats.think_batch = 128;
  stats.predicted_step_ms = 18;
  for (auto _ : state) {
    metrics.sync(router);
    metrics.sync(scheduler);
    metrics.record_step(stats, 20e-6);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EngineMetricsPerStep);

}  // namespace
