// EngineMetrics: every catalog metric moves when its event happens, driven
// through the real PhaseRouter, DualQueueScheduler and KvBlockManager (no
// stand-ins; the disaggregation counters through the real KvOffloader over
// the in-process fabric), and every catalog metric is in the snapshot with its type and
// labels.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meridian/kv_block_manager.h"
#include "meridian/kv_offload.h"
#include "meridian/metrics.h"
#include "meridian/phase_router.h"
#include "meridian/scheduler.h"
#include "router_test_model.h"
#include "scheduler_rig.h"

namespace meridian::telemetry {
namespace {

using meridian::testing::id_model;
using meridian::testing::kEnd;
using meridian::testing::kEos;
using meridian::testing::kStart;
using meridian::testing::kWord;
using meridian::testing::SchedulerRig;

constexpr std::uint8_t kOutput = 0;
constexpr std::uint8_t kThink = 1;
constexpr auto idx = [](auto e) { return static_cast<std::uint8_t>(e); };

RouterLimits limits(std::uint64_t min_think, std::uint64_t max_think) {
  RouterLimits l;
  l.min_think_tokens = min_think;
  l.max_think_tokens = max_think;
  l.force_reissue_grace_steps = 1;
  l.reap_idle_after = std::chrono::seconds(1);
  return l;
}

TEST(TelemetryFeed, RouterCountersMoveWithTheirEvents) {
  MetricRegistry registry;
  EngineMetrics metrics(registry);
  PhaseRouter router(id_model(ReasoningParser::kQwen3, /*supports_disable=*/false), limits(1, 4));
  auto feed = [&](RequestId id, TokenId token) {
    if (const auto event = router.on_token(id, token)) metrics.record_event(*event);
  };

  router.begin(1);
  router.begin(2);
  metrics.sync(router);
  EXPECT_EQ(registry.value(MetricId::kTrackedRequests), 2);
  EXPECT_EQ(registry.value(MetricId::kPhaseTransitions, {0}), 0);

  // Request 1: thinks, is forced (converged), the force is re-issued once, lands, then EOS.
  feed(1, kStart);
  feed(1, kWord);
  feed(1, kWord);
  PhaseEvent force;
  ASSERT_EQ(router.request_force(1, ForceReason::kConverged, &force), ForceResult::kIssued);
  feed(1, kWord);  // the force did not land within the grace: re-issued
  feed(1, kEnd);
  feed(1, kEos);
  // Request 2: hits the hard cap (4 think tokens).
  feed(2, kStart);
  for (int i = 0; i < 5; ++i) feed(2, kWord);
  feed(2, kEnd);
  router.end(2);
  // Request 3 asks for no thinking on a model that cannot switch it off; then goes idle and is reaped.
  router.begin(3, {}, RequestOptions{true});
  feed(99, kWord);  // never begun
  router.advance_clock(router.now_ns() + std::chrono::nanoseconds(std::chrono::seconds(10)).count());
  EXPECT_EQ(router.reap_idle(), 1U);

  metrics.sync(router);
  const RouterCounters c = router.counters();
  EXPECT_EQ(registry.value(MetricId::kTrackedRequests), 0);
  EXPECT_EQ(registry.value(MetricId::kPhaseTransitions, {0}), 2);
  EXPECT_EQ(registry.value(MetricId::kPhaseTransitions, {1}), 2);
  EXPECT_EQ(registry.value(MetricId::kBudgetForceReason, {idx(ForceReason::kConverged)}), 1);
  EXPECT_EQ(registry.value(MetricId::kBudgetForceReason, {idx(ForceReason::kHardCap)}), 1);
  EXPECT_EQ(registry.value(MetricId::kBudgetForceReason, {idx(ForceReason::kOverthinking)}), 0);
  EXPECT_EQ(registry.value(MetricId::kBudgetForceTriggered), 2);  // one series: the sum over reasons
  EXPECT_GE(registry.value(MetricId::kBudgetForceReissued), 1);
  EXPECT_EQ(registry.value(MetricId::kBudgetForceReissued), static_cast<double>(c.forces_reissued));
  EXPECT_EQ(registry.value(MetricId::kBudgetForcedExits), 2);
  EXPECT_EQ(registry.value(MetricId::kRequestsCompleted, {0}), 1);  // eos
  EXPECT_EQ(registry.value(MetricId::kRequestsCompleted, {1}), 1);  // ended
  EXPECT_EQ(registry.value(MetricId::kRequestsCompleted, {2}), 1);  // reaped
  EXPECT_EQ(registry.value(MetricId::kRouterUnknownRequestTokens), 1);
  EXPECT_EQ(registry.value(MetricId::kThinkDisableIgnored), 1);
  // Two closed think blocks: 3 and (at least) 4 think tokens.
  EXPECT_EQ(registry.value(MetricId::kThinkTokensPerRequest), 2);
  EXPECT_EQ(registry.misuse_count(), 0U);
}

// Cost model of the scheduler traces (scheduler_trace_test.cpp): 10 ms + 2 ms per token.
constexpr StepCostCoefficients kCost{10.0, 2.0, 0.0};

SchedulerOptions trace_options(double think_budget_ms) {
  SchedulerOptions o;
  o.think_tpot_budget_ms = think_budget_ms;
  o.output_tpot_budget_ms = 20;
  o.think_batch_multiplier = 2;
  o.min_prefill_tokens_per_step = 64;
  o.block_tokens = 4;
  o.preempt_readmit_guard_steps = 4;
  return o;
}

StepLimits no_free_blocks() {
  StepLimits l;
  l.free_kv_blocks = 0;
  return l;
}

TEST(TelemetryFeed, SchedulerStepsQueuesBatchesAndPreemptionsByPhaseAndMode) {
  MetricRegistry registry;
  EngineMetrics metrics(registry);
  SchedulerRig rig(trace_options(80), kCost);
  for (RequestId id = 1; id <= 8; ++id) rig.add(id, 4);  // think phase, one block each
  rig.step({}, 20);
  metrics.record_step(rig.last.stats, 1e-5);
  EXPECT_EQ(registry.value(MetricId::kSchedulerBatchSize, {2}), 1);  // one prefill batch observed
  EXPECT_EQ(registry.value(MetricId::kQueueDepth, {2}), 8);          // 8 waiting at step start
  rig.step(no_free_blocks(), 50);                                    // everything stalls
  metrics.record_step(rig.last.stats, 1e-5);
  EXPECT_EQ(registry.value(MetricId::kQueueDepth, {1}), 8);
  rig.step(no_free_blocks());  // think due: the newest is recomputed
  metrics.record_step(rig.last.stats, 1e-5);
  metrics.sync(rig.scheduler);
  EXPECT_EQ(registry.value(MetricId::kPreemptions, {kThink, idx(ReclaimMode::kRecompute)}), 1);
  EXPECT_EQ(registry.value(MetricId::kPreemptions, {kOutput, idx(ReclaimMode::kSwap)}), 0);
  EXPECT_EQ(registry.value(MetricId::kSchedulerSteps), 3);
  EXPECT_GT(registry.value(MetricId::kSchedulerScheduledTokens), 0);
  EXPECT_GT(registry.value(MetricId::kSchedulerStalls), 0);
  EXPECT_GT(registry.value(MetricId::kSchedulerDueThink), 0);
  EXPECT_EQ(registry.value(MetricId::kSchedulerBatchSize, {kThink}), 1);  // only the step that decoded
  EXPECT_EQ(registry.value(MetricId::kSchedulerPredictedStep), 3);
  EXPECT_EQ(registry.value(MetricId::kScheduleBatchDuration), 3);
  EXPECT_EQ(registry.value(MetricId::kScheduleBatchDurationNs), 3);  // the same observations, in ns

  // Answer-phase victims are swapped.
  SchedulerRig answers(trace_options(400), kCost);
  answers.add(1, 4, false);
  answers.add(2, 4, false);
  answers.step({}, 20);
  answers.step(no_free_blocks());
  metrics.sync(answers.scheduler);  // another scheduler: counters only go up, so mirror its larger totals
  EXPECT_EQ(registry.value(MetricId::kPreemptions, {kOutput, idx(ReclaimMode::kSwap)}), 1);
  metrics.record_step(answers.last.stats, 1e-5);
  EXPECT_EQ(registry.value(MetricId::kSchedulerBatchSize, {kOutput}), 1);

  // Rejected and clamped step times, over-budget steps, aborts.
  SchedulerOptions o = trace_options(400);
  o.total_kv_blocks = 4;
  DualQueueScheduler s(o, StepCostModel(kCost, true, 1.0));
  s.add({1, Phase::kOutputDecode, 4, 0, 0});
  s.schedule({}, 0);
  s.complete_step(std::numeric_limits<double>::quiet_NaN(), 1);  // rejected
  for (int i = 0; i < 3; ++i) {
    s.schedule({}, 0);
    s.complete_step(1000.0, 1);  // far above the prediction: clamped
  }
  metrics.sync(s);
  EXPECT_EQ(registry.value(MetricId::kStepCostRejected), 1);
  EXPECT_GE(registry.value(MetricId::kStepCostClamped), 1);
  EXPECT_EQ(registry.value(MetricId::kStepCostClamped), static_cast<double>(s.cost_model().clamped()));
  EXPECT_EQ(registry.misuse_count(), 0U);
}

TEST(TelemetryFeed, SchedulerCountsPreemptionsByPhaseAndMode) {
  SchedulerRig rig(trace_options(400), kCost);
  rig.add(1, 4, false);
  rig.add(2, 4, false);
  rig.step({}, 20);
  EXPECT_EQ(rig.step(no_free_blocks()), "!2s o1");
  const SchedulerCounters& c = rig.scheduler.counters();
  EXPECT_EQ(c.preemptions_by_phase[0][idx(ReclaimMode::kSwap)], 1U);
  std::uint64_t cross = 0;
  for (const auto& phase : c.preemptions_by_phase) {
    for (const auto n : phase) cross += n;
  }
  EXPECT_EQ(cross, c.preemptions[0] + c.preemptions[1] + c.preemptions[2]);
  EXPECT_EQ(cross, c.preempted_output + c.preempted_think);
}

KvBlockManagerOptions kv_options(std::uint32_t blocks, bool fabric = false) {
  KvBlockManagerOptions o;
  o.num_blocks = blocks;
  o.block_size_bytes = 1024;
  o.think_phase_memory_fraction = 0.5;
  o.fabric_offload = fabric;
  return o;
}

TEST(TelemetryFeed, BlockManagerUsageEvictionsAndPrefixCache) {
  MetricRegistry registry;
  EngineMetrics metrics(registry);
  KvBlockManager kv(kv_options(10));
  const std::vector<std::uint64_t> prompt{11, 12};
  ASSERT_TRUE(kv.allocate(1, BlockTier::kOutputCritical, 2, prompt).ok());
  ASSERT_TRUE(kv.allocate(1, BlockTier::kThinkActive, 3).ok());
  metrics.sync(kv);
  EXPECT_EQ(registry.value(MetricId::kBlockManagerCapacityBytes), 10 * 1024);
  EXPECT_EQ(registry.value(MetricId::kBlockManagerUsedBytes), 5 * 1024);
  EXPECT_EQ(registry.value(MetricId::kBlockManagerLiveBlocks, {idx(BlockTier::kThinkActive)}), 3);
  EXPECT_EQ(registry.value(MetricId::kBlockManagerLiveBlocks, {idx(BlockTier::kOutputCritical)}), 2);

  kv.release(1, ReleaseKind::kFinished);  // the hashed prompt stays cached
  metrics.sync(kv);
  EXPECT_EQ(registry.value(MetricId::kBlockManagerCachedBlocks, {idx(BlockTier::kOutputCritical)}), 2);
  EXPECT_EQ(registry.value(MetricId::kBlockManagerUsedBytes), 0);  // cached blocks are reclaimable, not used
  EXPECT_EQ(kv.attach_prefix(2, prompt), 2U);
  metrics.sync(kv);
  EXPECT_EQ(registry.value(MetricId::kPrefixCacheHitBlocks), 2);
  EXPECT_EQ(registry.value(MetricId::kPrefixCacheLookupBlocks), 2);

  ASSERT_TRUE(kv.allocate(2, BlockTier::kOutputCritical, 1).ok());
  kv.release(2, ReleaseKind::kSwap, /*answer_phase=*/true);  // an answer-phase victim: user-visible
  metrics.sync(kv);
  EXPECT_EQ(registry.value(MetricId::kOutputCriticalEviction), 1);
  EXPECT_EQ(registry.value(MetricId::kBlockManagerEvictions, {idx(BlockTier::kOutputCritical)}), 3);
  EXPECT_EQ(registry.value(MetricId::kBlockManagerUsedBytes), 0);

  // Fabric offload: live ThinkComplete blocks move to the fabric.
  KvBlockManager fabric(kv_options(6, true));
  ASSERT_TRUE(fabric.allocate(1, BlockTier::kOutputCritical, 1).ok());
  ASSERT_TRUE(fabric.allocate(1, BlockTier::kThinkActive, 3).ok());
  fabric.demote_think_blocks(1);
  ASSERT_TRUE(fabric.allocate(2, BlockTier::kOutputCritical, 2).ok());
  ASSERT_TRUE(fabric.allocate(3, BlockTier::kOutputCritical, 2).ok());
  EXPECT_EQ(fabric.counters().offloaded_live[0], 2U);
  metrics.sync(fabric);  // no fabric named: not exported
  for (std::uint8_t f = 0; f < 3; ++f) EXPECT_EQ(registry.value(MetricId::kDisaggBlocksOffloaded, {f}), 0);
  metrics.sync(fabric, "nixl-synth");
  EXPECT_EQ(registry.value(MetricId::kDisaggBlocksOffloaded, {2}), 2);
  metrics.sync(fabric, "carrier-pigeon");  // not a catalog value: ignored
  EXPECT_EQ(registry.misuse_count(), 0U);
}

TEST(TelemetryFeed, OffloaderCountersByFabricReasonAndDirection) {
  // The catalog's reason label values are OffloadFallbackReason's, in order.
  const MetricSpec& fallbacks = spec(MetricId::kDisaggOffloadFallbacks);
  ASSERT_EQ(fallbacks.labels[1].values.size(), kOffloadFallbackReasonCount);
  for (std::size_t i = 0; i < kOffloadFallbackReasonCount; ++i) {
    EXPECT_EQ(fallbacks.labels[1].values[i], to_string(static_cast<OffloadFallbackReason>(i)));
  }

  MetricRegistry registry;
  EngineMetrics metrics(registry);
  KvBlockManager kv(kv_options(16));
  HostBlockStore store(16, 1024);
  InProcessFabric fabric;
  KvOffloaderOptions options;
  options.offload_threshold_blocks = 2;
  options.max_inflight_batches = 2;
  KvOffloader offloader(kv, store, fabric, options);
  ASSERT_TRUE(kv.allocate(1, BlockTier::kThinkActive, 6).ok());
  kv.demote_think_blocks(1);
  EXPECT_EQ(offloader.on_exit_think(1).batches_pushed, 2U);  // the third batch: queue_full
  metrics.sync_offload(offloader.counters(), offloader.fabric_label());
  constexpr std::uint8_t kSynth = 2;
  EXPECT_EQ(registry.value(MetricId::kDisaggInflightBatches, {kSynth}), 2);
  EXPECT_EQ(
      registry.value(MetricId::kDisaggOffloadFallbacks, {kSynth, idx(OffloadFallbackReason::kQueueFull)}), 1);
  EXPECT_EQ(registry.value(MetricId::kDisaggTransferBytes, {kSynth, 0}), 4 * (32 + 1024));

  offloader.poll();
  const std::vector<FabricHandle> handles = offloader.committed_handles(1);
  ASSERT_EQ(handles.size(), 2U);
  ASSERT_TRUE(fabric.corrupt_byte(handles[1], 40));
  const IngestResult in = offloader.ingest(1);
  EXPECT_EQ(in.restored.size(), 2U);
  metrics.sync(kv, "nixl-synth");
  metrics.sync_offload(offloader.counters(), "nixl-synth");
  // Both feeds mirror the same total: 4 blocks offloaded, not 8.
  EXPECT_EQ(registry.value(MetricId::kDisaggBlocksOffloaded, {kSynth}), 4);
  EXPECT_EQ(registry.value(MetricId::kDisaggInflightBatches, {kSynth}), 0);
  EXPECT_EQ(registry.value(MetricId::kDisaggBlocksIngested, {kSynth}), 2);
  EXPECT_EQ(registry.value(MetricId::kDisaggCorruptPayloads, {kSynth}), 1);
  EXPECT_EQ(registry.value(MetricId::kDisaggTransferBytes, {kSynth, 1}), 4 * (32 + 1024));
  for (std::uint8_t f = 0; f < 2; ++f) {  // nixl and mooncake untouched
    EXPECT_EQ(registry.value(MetricId::kDisaggBlocksIngested, {f}), 0);
    EXPECT_EQ(registry.value(MetricId::kDisaggTransferBytes, {f, 0}), 0);
  }
  metrics.sync_offload(offloader.counters(), "carrier-pigeon");  // not a catalog value: ignored
  EXPECT_EQ(registry.misuse_count(), 0U);
}

TEST(TelemetryFeed, RequestTimesAndSloOutcomes) {
  MetricRegistry registry;
  EngineMetrics metrics(registry);
  metrics.record_request({0.2, 1.5, 0.01, 3.0, true, true});
  metrics.record_request({0.3, -1, -1, 4.0, true, false});  // no visible token, no think block
  metrics.record_request({-1, -1, -1, -1, false, true});    // given up on: a miss, whatever slo_met says
  metrics.record_output_itl(0.02);
  metrics.record_output_itl(-1);  // not a gap
  EXPECT_EQ(registry.value(MetricId::kRequestTtft), 2);
  EXPECT_EQ(registry.value(MetricId::kRequestTtfv), 1);
  EXPECT_EQ(registry.value(MetricId::kRequestTtot), 1);
  EXPECT_EQ(registry.value(MetricId::kRequestE2e), 2);
  EXPECT_EQ(registry.value(MetricId::kOutputItl), 1);
  EXPECT_EQ(registry.value(MetricId::kSloRequests, {0}), 1);
  EXPECT_EQ(registry.value(MetricId::kSloRequests, {1}), 2);
}

// The original catalog's meridian_schedule_batch_duration_ns and the base-unit
// _seconds histogram hold the same observations, in their own units.
TEST(TelemetryFeed, ScheduleDurationIsObservedInSecondsAndNanoseconds) {
  MetricRegistry registry;
  EngineMetrics metrics(registry);
  metrics.record_step(StepStats{}, 2e-6);  // 2 us: the 2.5 us bucket
  metrics.record_step(StepStats{}, 3e-4);  // 300 us: the 500 us bucket
  metrics.record_step(StepStats{}, -1.0);  // no measurement: neither
  const auto snap = registry.snapshot();
  const SeriesSnapshot& s = snap[static_cast<std::size_t>(MetricId::kScheduleBatchDuration)].series.at(0);
  const SeriesSnapshot& ns = snap[static_cast<std::size_t>(MetricId::kScheduleBatchDurationNs)].series.at(0);
  EXPECT_EQ(s.count, 2U);
  EXPECT_EQ(ns.count, 2U);
  EXPECT_NEAR(ns.sum, s.sum * 1e9, 1e-6);
  EXPECT_NEAR(ns.sum, 302'000.0, 1e-6);
  const auto bounds = spec(MetricId::kScheduleBatchDurationNs).buckets;
  ASSERT_EQ(ns.bucket_counts.size(), bounds.size() + 1);
  for (std::size_t b = 0; b < bounds.size(); ++b) {
    const std::uint64_t wanted = bounds[b] == 2.5e3 || bounds[b] == 5e5 ? 1 : 0;
    EXPECT_EQ(ns.bucket_counts[b], wanted) << "le=" << bounds[b];
  }
  EXPECT_EQ(ns.bucket_counts.back(), 0U);
  EXPECT_EQ(registry.misuse_count(), 0U);
}

TEST(TelemetryFeed, EveryCatalogMetricIsInTheSnapshotWithItsTypeAndLabels) {
  MetricRegistry registry;
  const auto snap = registry.snapshot();
  const auto catalog = metric_catalog();
  ASSERT_EQ(snap.size(), catalog.size());
  for (std::size_t i = 0; i < catalog.size(); ++i) {
    const FamilySnapshot& f = snap[i];
    ASSERT_NE(f.spec, nullptr);
    EXPECT_EQ(f.spec->name, catalog[i].name);
    EXPECT_EQ(f.spec->type, catalog[i].type);
    EXPECT_EQ(f.id, static_cast<MetricId>(i));
    ASSERT_EQ(f.spec->labels.size(), catalog[i].labels.size());
    EXPECT_EQ(f.series.size(), series_count(catalog[i]));
    // Each label value appears in some series.
    for (std::size_t l = 0; l < catalog[i].labels.size(); ++l) {
      std::vector<bool> seen(catalog[i].labels[l].values.size());
      for (const SeriesSnapshot& s : f.series) seen.at(s.label_index[l]) = true;
      for (std::size_t v = 0; v < seen.size(); ++v) {
        EXPECT_TRUE(seen[v]) << catalog[i].name << " " << catalog[i].labels[l].values[v];
      }
    }
  }
}

}  // namespace
}  // namespace meridian::telemetry
