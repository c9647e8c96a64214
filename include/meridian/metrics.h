// Live values of the metric catalog (meridian/metric_catalog.h), and the
// feeds that fill them from the real components.
//
// MetricRegistry holds one cell per series of every catalog metric, made at
// construction; recording is a relaxed atomic add or store on a cell, with no
// lock and no allocation, so it may sit on hot paths. Exporters read it with
// snapshot(): the C++ exporter (meridian/telemetry.h, prometheus-cpp), the
// Python exporter in the vLLM plugin (prometheus_client) and OTLP. It has no
// dependency beyond the standard library.
//
// Series are addressed by label-value indices in the catalog's label order
// (e.g. preemptions: {phase index, mode index}); the indices match the C++
// enums (ForceReason, BlockTier, ReclaimMode) where the catalog says so.
//
// Thread-safety: every member function of MetricRegistry may be called from
// any thread concurrently (cells are std::atomic, relaxed). A snapshot taken
// while writers run is per-cell consistent, not across cells (as in every
// Prometheus client). EngineMetrics is not thread-safe: one per engine loop.
// Ownership: EngineMetrics refers to a MetricRegistry it does not own.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "meridian/metric_catalog.h"
#include "meridian/phase.h"
#include "meridian/types.h"

namespace meridian {
class PhaseRouter;
class DualQueueScheduler;
class KvBlockManager;
struct KvOffloadCounters;
struct StepStats;
}  // namespace meridian

namespace meridian::telemetry {

/// One series' values at snapshot time.
struct SeriesSnapshot {
  std::array<std::uint8_t, kMaxLabels> label_index{};  ///< into the catalog's label values
  double value = 0;                                    ///< counter / gauge
  std::vector<std::uint64_t> bucket_counts;  ///< histogram: per bucket, NOT cumulative; last is +Inf
  double sum = 0;                            ///< histogram
  std::uint64_t count = 0;                   ///< histogram
};

struct FamilySnapshot {
  MetricId id = MetricId::kTrackedRequests;
  const MetricSpec* spec = nullptr;
  std::vector<SeriesSnapshot> series;  ///< every label combination, row-major in label order
};

class MetricRegistry {
 public:
  MetricRegistry();
  ~MetricRegistry();
  MetricRegistry(const MetricRegistry&) = delete;
  MetricRegistry& operator=(const MetricRegistry&) = delete;

  /// Counters: add `delta` (>= 0; negative and non-finite values are ignored).
  void add(MetricId id, double delta, std::initializer_list<std::uint8_t> labels = {}) noexcept;
  /// Gauges; and counters mirrored from a component's own monotonic total
  /// (the value is taken as is; a smaller value than before is ignored for a
  /// counter, so the exported counter never goes backwards).
  void set(MetricId id, double value, std::initializer_list<std::uint8_t> labels = {}) noexcept;
  /// Histograms: count one observation (non-finite values are ignored).
  void observe(MetricId id, double value, std::initializer_list<std::uint8_t> labels = {}) noexcept;

  /// Current value of a counter/gauge series, or a histogram series' count.
  [[nodiscard]] double value(MetricId id, std::initializer_list<std::uint8_t> labels = {}) const noexcept;

  /// Every family in catalog order, every series of each.
  [[nodiscard]] std::vector<FamilySnapshot> snapshot() const;

  /// Calls with wrong label counts, indices out of range or a metric of the
  /// wrong type for the call (add: counter; set: gauge or counter; observe:
  /// histogram) are ignored and counted here (a caller bug; tests assert it
  /// stays 0).
  [[nodiscard]] std::uint64_t misuse_count() const noexcept;

 private:
  struct Cells;
  std::unique_ptr<Cells> cells_;
};

/// Per-request times an engine reports when a request finishes (seconds; a
/// negative value means "did not happen": no visible token, no think block).
struct RequestTimes {
  double ttft_s = -1;
  double ttfv_s = -1;
  double ttot_s = -1;
  double e2e_s = -1;
  bool completed = false;  ///< e2e and the SLO outcome count only completed requests
  bool slo_met = false;
  std::uint8_t slo_misses = 0;  ///< SloMiss bits: the bounds missed (meridian_slo_bound_misses_total)
};

/// Feeds a MetricRegistry from the real components and an engine loop (the
/// replay simulator, the vLLM adapter through the Python bindings).
class EngineMetrics {
 public:
  explicit EngineMetrics(MetricRegistry& registry) : registry_(registry) {}

  /// Mirrors the router's counters and tracked-request gauge.
  void sync(const PhaseRouter& router);
  /// Mirrors the scheduler's counters (and its step-cost model's clamp count).
  void sync(const DualQueueScheduler& scheduler);
  /// Mirrors the block manager's usage gauges and counters; offloaded blocks
  /// go to meridian_disagg_blocks_offloaded_total{fabric} when `fabric` is
  /// one of the catalog's fabric labels (empty: not exported).
  void sync(const KvBlockManager& kv, std::string_view fabric = {});
  /// Mirrors the KV offloader's counters (meridian/kv_offload_counters.h) into
  /// the meridian_disagg_* families under `fabric` (a catalog fabric label;
  /// anything else: not exported). blocks_offloaded_total is mirrored too, not
  /// added: the block manager's offloaded_live already includes the
  /// offloader's commits, so with both feeds on the counter reads the larger
  /// (the manager's, which adds allocate()'s lazy offloads) and never twice.
  void sync_offload(const KvOffloadCounters& offload, std::string_view fabric);
  /// One planned step: queue depths, batch sizes, predicted step time, and
  /// the scheduler's CPU time for the step (observed in both
  /// schedule_batch_duration histograms: seconds and nanoseconds).
  void record_step(const StepStats& stats, double schedule_seconds);
  /// A phase event from the router (exit_think observes think tokens per request).
  void record_event(const PhaseEvent& event);
  /// A visible token `gap_s` after the request's previous visible token.
  void record_output_itl(double gap_s);
  /// A request finished (or was given up on).
  void record_request(const RequestTimes& times);

  [[nodiscard]] MetricRegistry& registry() noexcept { return registry_; }

 private:
  MetricRegistry& registry_;
};

}  // namespace meridian::telemetry
