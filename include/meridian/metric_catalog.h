// The metric catalog (SPEC §3.9): every metric Meridian exports, with its
// Prometheus name, type, unit, labels (and their closed value sets), histogram
// buckets, help text, source and operator action. This table is the source of
// truth: the C++ exporter (prometheus-cpp), the Python exporter inside vLLM
// (prometheus_client), the OTLP export, docs/operations.md (checked by
// scripts/docs_check.py), the Grafana dashboard and the alert rules all
// follow it.
//
// Names are Prometheus-legal: `meridian_` prefix, counters end in `_total`,
// base units (seconds, bytes) in the name, and no name contains "vllm" (vLLM
// unregisters such collectors at start-up). Renaming a metric is a breaking
// change (CHANGELOG).
//
// Every metric of the original project's catalog is exported under the name
// its naming rule gives (`meridian.x.y` -> `meridian_x_y`, counters `_total`)
// with its labels (tests/data/seed_metric_catalog.txt, checked by
// tests/python/test_seed_metric_names.py). One of them breaks the base-unit
// convention: meridian_schedule_batch_duration_ns (nanoseconds) is exported
// beside meridian_schedule_batch_duration_seconds, both from the same
// observations.
//
// Thread-safety: immutable static data; every function is safe from any thread.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace meridian::telemetry {

enum class MetricType : std::uint8_t { kCounter = 0, kGauge = 1, kHistogram = 2 };

[[nodiscard]] std::string_view to_string(MetricType type) noexcept;  ///< "counter", "gauge", "histogram"

/// A label and every value it takes (closed sets keep cardinality fixed).
struct LabelSpec {
  std::string_view name;
  std::span<const std::string_view> values;
};

struct MetricSpec {
  std::string_view name;  ///< exposition name (counters include `_total`)
  MetricType type = MetricType::kCounter;
  std::string_view unit;              ///< "seconds", "bytes", "requests", "tokens", "blocks", "events", ...
  std::span<const LabelSpec> labels;  ///< at most kMaxLabels, in exposition order
  std::span<const double> buckets;    ///< histograms: ascending upper bounds (+Inf implied)
  std::string_view help;              ///< one line: the HELP text
  std::string_view source;            ///< component that produces it
  std::string_view action;            ///< what an operator does when it moves (docs)
};

inline constexpr std::size_t kMaxLabels = 2;

/// Every metric, in catalog order. MetricId indexes this span.
enum class MetricId : std::uint16_t {
  // PhaseRouter
  kTrackedRequests = 0,
  kPhaseTransitions,
  kBudgetForceTriggered,  ///< no labels: the sum over reasons
  kBudgetForceReason,     ///< {reason}: indices = ForceReason
  kBudgetForceReissued,
  kBudgetForcedExits,
  kThinkTokensPerRequest,
  kRequestsCompleted,
  kRouterUnknownRequestTokens,
  kThinkDisableIgnored,
  // DualQueueScheduler
  kQueueDepth,
  kSchedulerBatchSize,
  kScheduleBatchDuration,    ///< seconds (Prometheus base unit)
  kScheduleBatchDurationNs,  ///< the same observations in nanoseconds (the original catalog's name)
  kSchedulerPredictedStep,
  kSchedulerSteps,
  kSchedulerScheduledTokens,
  kSchedulerDueThink,
  kSchedulerOutputSloOverruns,
  kSchedulerStalls,
  kPreemptions,
  kSchedulerAdmissionPreemptions,
  kSchedulerVictimWait,
  kSchedulerTtftDeferred,
  kSchedulerAborted,
  kSchedulerLivelockReleases,
  kStepCostRejected,
  kStepCostClamped,
  // KvBlockManager
  kBlockManagerUsedBytes,
  kBlockManagerCapacityBytes,
  kBlockManagerLiveBlocks,
  kBlockManagerCachedBlocks,
  kBlockManagerEvictions,
  kOutputCriticalEviction,
  kPrefixCacheHitBlocks,
  kPrefixCacheLookupBlocks,
  // Per request, from the engine (replay simulator or the vLLM adapter)
  kRequestTtft,
  kRequestTtfv,
  kRequestTtot,
  kRequestE2e,
  kOutputItl,
  kSloRequests,
  kSloBoundMisses,
  // Engine adapters (vLLM plugin) and disaggregation
  kFailsafeFallbacks,
  kVocabFallback,
  kDisaggBlocksOffloaded,
  kDisaggOffloadFallbacks,  ///< {fabric, reason}: reason indices = OffloadFallbackReason
  kDisaggCorruptPayloads,
  kDisaggBlocksIngested,
  kDisaggTransferBytes,  ///< {fabric, direction}: push = 0, pull = 1
  kDisaggInflightBatches,
  kCount
};

inline constexpr std::size_t kMetricCount = static_cast<std::size_t>(MetricId::kCount);

[[nodiscard]] std::span<const MetricSpec> metric_catalog() noexcept;
[[nodiscard]] const MetricSpec& spec(MetricId id) noexcept;
[[nodiscard]] std::optional<MetricId> find_metric(std::string_view name) noexcept;
/// Number of label-value combinations (1 for a metric without labels).
[[nodiscard]] std::size_t series_count(const MetricSpec& spec) noexcept;
/// Index of `value` in label `label` of `spec`, if it is one of its values.
[[nodiscard]] std::optional<std::uint8_t> label_value_index(const MetricSpec& spec, std::size_t label,
                                                            std::string_view value) noexcept;

}  // namespace meridian::telemetry
