// MetricRegistry cells and the EngineMetrics feeds (meridian/metrics.h).
//
// Every series of every catalog metric gets its cells at construction, in
// flat arrays: one std::atomic<double> per counter/gauge series; per
// histogram series one std::atomic<uint64_t> per bucket (+Inf last), an
// atomic<double> sum and an atomic<uint64_t> count. Recording is a relaxed
// atomic operation on one cell: no lock, no allocation.
#include "meridian/metrics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <memory>
#include <span>

#include "meridian/kv_block_manager.h"
#include "meridian/kv_offload_counters.h"
#include "meridian/phase_router.h"
#include "meridian/scheduler.h"

namespace meridian::telemetry {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

// Where one family's cells start in the flat arrays, and what the hot path
// needs of its catalog row (copied here so recording reads one cache line of
// the registry instead of the catalog table in another translation unit).
struct FamilyLayout {
  std::size_t first_series = 0;  // into scalars (counter/gauge) or histogram series
  std::size_t first_bucket = 0;  // histograms: into bucket cells
  std::size_t buckets = 0;       // histograms: buckets per series, +Inf included
  std::size_t series = 0;
  MetricType type = MetricType::kCounter;
  std::uint8_t label_count = 0;
  std::array<std::uint8_t, kMaxLabels> label_values{};  // values per label
  std::span<const double> bounds;                       // histograms: upper bounds
};

// Row-major series index of `labels`, or nullopt when they do not fit.
std::optional<std::size_t> series_index(const FamilyLayout& l,
                                        std::initializer_list<std::uint8_t> labels) noexcept {
  if (labels.size() != l.label_count) return std::nullopt;
  std::size_t index = 0;
  std::size_t label = 0;
  for (const std::uint8_t value : labels) {
    const std::size_t values = l.label_values[label];
    if (value >= values) return std::nullopt;
    index = index * values + value;
    ++label;
  }
  return index;
}

}  // namespace

struct MetricRegistry::Cells {
  std::array<FamilyLayout, kMetricCount> layout{};
  std::unique_ptr<std::atomic<double>[]> scalars;
  std::unique_ptr<std::atomic<std::uint64_t>[]> buckets;
  std::unique_ptr<std::atomic<double>[]> sums;
  std::unique_ptr<std::atomic<std::uint64_t>[]> counts;
  std::atomic<std::uint64_t> misuse{0};

  Cells() {
    std::size_t scalar_count = 0;
    std::size_t histogram_count = 0;
    std::size_t bucket_count = 0;
    for (std::size_t i = 0; i < kMetricCount; ++i) {
      const MetricSpec& s = metric_catalog()[i];
      FamilyLayout& l = layout[i];
      l.series = series_count(s);
      l.type = s.type;
      l.label_count = static_cast<std::uint8_t>(s.labels.size());
      for (std::size_t label = 0; label < s.labels.size(); ++label) {
        l.label_values[label] = static_cast<std::uint8_t>(s.labels[label].values.size());
      }
      l.bounds = s.buckets;
      if (s.type == MetricType::kHistogram) {
        l.first_series = histogram_count;
        l.first_bucket = bucket_count;
        l.buckets = s.buckets.size() + 1;
        histogram_count += l.series;
        bucket_count += l.series * l.buckets;
      } else {
        l.first_series = scalar_count;
        scalar_count += l.series;
      }
    }
    // Value-initialised: every cell starts at zero.
    scalars = std::make_unique<std::atomic<double>[]>(scalar_count);
    buckets = std::make_unique<std::atomic<std::uint64_t>[]>(bucket_count);
    sums = std::make_unique<std::atomic<double>[]>(histogram_count);
    counts = std::make_unique<std::atomic<std::uint64_t>[]>(histogram_count);
  }

  // The series' global index when `id` has `type` and `labels` fit; counts misuse otherwise.
  std::optional<std::size_t> locate(MetricId id, MetricType type,
                                    std::initializer_list<std::uint8_t> labels) noexcept {
    const auto i = static_cast<std::size_t>(id);
    if (i >= kMetricCount || layout[i].type != type) {
      misuse.fetch_add(1, kRelaxed);
      return std::nullopt;
    }
    const auto series = series_index(layout[i], labels);
    if (!series) {
      misuse.fetch_add(1, kRelaxed);
      return std::nullopt;
    }
    return layout[i].first_series + *series;
  }
};

MetricRegistry::MetricRegistry() : cells_(std::make_unique<Cells>()) {}
MetricRegistry::~MetricRegistry() = default;

void MetricRegistry::add(MetricId id, double delta, std::initializer_list<std::uint8_t> labels) noexcept {
  const auto cell = cells_->locate(id, MetricType::kCounter, labels);
  if (!cell || !std::isfinite(delta) || delta < 0) return;
  cells_->scalars[*cell].fetch_add(delta, kRelaxed);
}

void MetricRegistry::set(MetricId id, double value, std::initializer_list<std::uint8_t> labels) noexcept {
  const auto i = static_cast<std::size_t>(id);
  const bool counter = i < kMetricCount && cells_->layout[i].type == MetricType::kCounter;
  const auto cell = cells_->locate(id, counter ? MetricType::kCounter : MetricType::kGauge, labels);
  // NaN means nothing to either; an infinite total would pin a counter forever.
  if (!cell || std::isnan(value) || (counter && !std::isfinite(value))) return;
  std::atomic<double>& target = cells_->scalars[*cell];
  if (!counter) {
    target.store(value, kRelaxed);
    return;
  }
  // A counter mirrors a monotonic total: keep the largest value seen, so
  // the exported series never goes backwards (rate() would see a reset).
  double current = target.load(kRelaxed);
  while (value > current && !target.compare_exchange_weak(current, value, kRelaxed)) {
  }
}

void MetricRegistry::observe(MetricId id, double value, std::initializer_list<std::uint8_t> labels) noexcept {
  const auto series = cells_->locate(id, MetricType::kHistogram, labels);
  if (!series || !std::isfinite(value)) return;
  const auto i = static_cast<std::size_t>(id);
  const FamilyLayout& l = cells_->layout[i];
  const auto bounds = l.bounds;
  // First bucket whose upper bound holds the value (le is inclusive); +Inf otherwise.
  const auto bucket =
      static_cast<std::size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin());
  const std::size_t base = l.first_bucket + (*series - l.first_series) * l.buckets;
  cells_->buckets[base + bucket].fetch_add(1, kRelaxed);
  cells_->sums[*series].fetch_add(value, kRelaxed);
  cells_->counts[*series].fetch_add(1, kRelaxed);
}

double MetricRegistry::value(MetricId id, std::initializer_list<std::uint8_t> labels) const noexcept {
  const auto i = static_cast<std::size_t>(id);
  if (i >= kMetricCount) {
    cells_->misuse.fetch_add(1, kRelaxed);
    return 0;
  }
  const MetricSpec& s = metric_catalog()[i];
  const auto series = cells_->locate(id, s.type, labels);
  if (!series) return 0;
  if (s.type == MetricType::kHistogram) return static_cast<double>(cells_->counts[*series].load(kRelaxed));
  return cells_->scalars[*series].load(kRelaxed);
}

std::vector<FamilySnapshot> MetricRegistry::snapshot() const {
  std::vector<FamilySnapshot> families;
  families.reserve(kMetricCount);
  for (std::size_t i = 0; i < kMetricCount; ++i) {
    const MetricSpec& s = metric_catalog()[i];
    const FamilyLayout& l = cells_->layout[i];
    FamilySnapshot& family = families.emplace_back();
    family.id = static_cast<MetricId>(i);
    family.spec = &s;
    family.series.resize(l.series);
    for (std::size_t k = 0; k < l.series; ++k) {
      SeriesSnapshot& out = family.series[k];
      // Row-major: the last label varies fastest.
      std::size_t rest = k;
      for (std::size_t label = s.labels.size(); label-- > 0;) {
        const std::size_t values = s.labels[label].values.size();
        out.label_index[label] = static_cast<std::uint8_t>(rest % values);
        rest /= values;
      }
      const std::size_t cell = l.first_series + k;
      if (s.type != MetricType::kHistogram) {
        out.value = cells_->scalars[cell].load(kRelaxed);
        continue;
      }
      out.bucket_counts.resize(l.buckets);
      const std::size_t base = l.first_bucket + k * l.buckets;
      for (std::size_t b = 0; b < l.buckets; ++b) {
        out.bucket_counts[b] = cells_->buckets[base + b].load(kRelaxed);
      }
      out.sum = cells_->sums[cell].load(kRelaxed);
      out.count = cells_->counts[cell].load(kRelaxed);
      out.value = static_cast<double>(out.count);
    }
  }
  return families;
}

std::uint64_t MetricRegistry::misuse_count() const noexcept { return cells_->misuse.load(kRelaxed); }

// ---- EngineMetrics

namespace {
constexpr std::uint8_t kOutputIndex = 0;
constexpr std::uint8_t kThinkIndex = 1;
constexpr std::uint8_t kPrefillIndex = 2;
constexpr std::uint8_t kWaitingIndex = 2;
constexpr std::uint8_t kSwappedIndex = 3;
constexpr std::uint8_t kMetIndex = 0;
constexpr std::uint8_t kMissedIndex = 1;

template <typename T>
double as_double(T value) {
  return static_cast<double>(value);
}
}  // namespace

void EngineMetrics::sync(const PhaseRouter& router) {
  const RouterCounters c = router.counters();
  MetricRegistry& r = registry_;
  r.set(MetricId::kTrackedRequests, as_double(router.tracked()));
  r.set(MetricId::kPhaseTransitions, as_double(c.enter_think), {0});
  r.set(MetricId::kPhaseTransitions, as_double(c.exit_think), {1});
  std::uint64_t forces = 0;
  for (std::size_t reason = 0; reason < c.forces_issued.size(); ++reason) {
    r.set(MetricId::kBudgetForceReason, as_double(c.forces_issued[reason]),
          {static_cast<std::uint8_t>(reason)});
    forces += c.forces_issued[reason];
  }
  r.set(MetricId::kBudgetForceTriggered, as_double(forces));
  r.set(MetricId::kBudgetForceReissued, as_double(c.forces_reissued));
  r.set(MetricId::kBudgetForcedExits, as_double(c.forced_exits));
  r.set(MetricId::kRequestsCompleted, as_double(c.completed), {0});
  r.set(MetricId::kRequestsCompleted, as_double(c.ended), {1});
  r.set(MetricId::kRequestsCompleted, as_double(c.reaped), {2});
  r.set(MetricId::kRouterUnknownRequestTokens, as_double(c.unknown_request_tokens));
  r.set(MetricId::kThinkDisableIgnored, as_double(c.think_disable_ignored));
}

void EngineMetrics::sync(const DualQueueScheduler& scheduler) {
  const SchedulerCounters& c = scheduler.counters();
  MetricRegistry& r = registry_;
  r.set(MetricId::kSchedulerSteps, as_double(c.steps));
  r.set(MetricId::kSchedulerScheduledTokens, as_double(c.scheduled_tokens));
  r.set(MetricId::kSchedulerDueThink, as_double(c.due_think_decodes));
  r.set(MetricId::kSchedulerOutputSloOverruns, as_double(c.output_slo_overruns));
  r.set(MetricId::kSchedulerStalls, as_double(c.stalls));
  r.set(MetricId::kSchedulerAdmissionPreemptions, as_double(c.admission_preemptions));
  r.set(MetricId::kSchedulerVictimWait, scheduler.victim_wait_ms() / 1000.0);
  r.set(MetricId::kSchedulerTtftDeferred, as_double(c.ttft_deferred));
  r.set(MetricId::kSchedulerAborted, as_double(c.aborted));
  r.set(MetricId::kSchedulerLivelockReleases, as_double(c.livelock_releases));
  r.set(MetricId::kStepCostRejected, as_double(c.rejected_step_times));
  r.set(MetricId::kStepCostClamped, as_double(scheduler.cost_model().clamped()));
  for (std::uint8_t phase = 0; phase < 2; ++phase) {
    for (std::uint8_t mode = 0; mode < 3; ++mode) {
      r.set(MetricId::kPreemptions, as_double(c.preemptions_by_phase[phase][mode]), {phase, mode});
    }
  }
}

void EngineMetrics::sync(const KvBlockManager& kv, std::string_view fabric) {
  const KvBlockUsage u = kv.usage();
  const KvBlockCounters& c = kv.counters();
  MetricRegistry& r = registry_;
  // Live blocks only: cached blocks are reclaimable on demand (as in vLLM's
  // kv_cache_usage), so counting them would keep the gauge at capacity.
  std::uint64_t live_blocks = 0;
  for (const std::uint32_t n : u.live_blocks) live_blocks += n;
  r.set(MetricId::kBlockManagerUsedBytes, as_double(live_blocks * u.block_size_bytes));
  r.set(MetricId::kBlockManagerCapacityBytes, as_double(std::uint64_t{u.total_blocks} * u.block_size_bytes));
  std::uint64_t offloaded = 0;
  for (std::uint8_t tier = 0; tier < kBlockTierCount; ++tier) {
    r.set(MetricId::kBlockManagerLiveBlocks, as_double(u.live_blocks[tier]), {tier});
    r.set(MetricId::kBlockManagerCachedBlocks, as_double(u.cached_blocks[tier]), {tier});
    r.set(MetricId::kBlockManagerEvictions, as_double(c.evictions(static_cast<BlockTier>(tier))), {tier});
    offloaded += c.offloaded_live[tier];
  }
  r.set(MetricId::kOutputCriticalEviction, as_double(c.output_critical_eviction_events));
  r.set(MetricId::kPrefixCacheHitBlocks, as_double(c.prefix_hit_blocks));
  r.set(MetricId::kPrefixCacheLookupBlocks, as_double(c.prefix_lookup_blocks));
  if (const auto fabric_index = label_value_index(spec(MetricId::kDisaggBlocksOffloaded), 0, fabric)) {
    r.set(MetricId::kDisaggBlocksOffloaded, as_double(offloaded), {*fabric_index});
  }
}

void EngineMetrics::sync_offload(const KvOffloadCounters& offload, std::string_view fabric) {
  const auto f = label_value_index(spec(MetricId::kDisaggBlocksOffloaded), 0, fabric);
  if (!f) return;
  MetricRegistry& r = registry_;
  r.set(MetricId::kDisaggBlocksOffloaded, as_double(offload.blocks_offloaded_total()), {*f});
  for (std::size_t reason = 0; reason < kOffloadFallbackReasonCount; ++reason) {
    r.set(MetricId::kDisaggOffloadFallbacks, as_double(offload.fallbacks[reason]),
          {*f, static_cast<std::uint8_t>(reason)});
  }
  r.set(MetricId::kDisaggCorruptPayloads, as_double(offload.corrupt_payloads), {*f});
  r.set(MetricId::kDisaggBlocksIngested, as_double(offload.blocks_ingested), {*f});
  r.set(MetricId::kDisaggTransferBytes, as_double(offload.bytes_pushed), {*f, 0});
  r.set(MetricId::kDisaggTransferBytes, as_double(offload.bytes_pulled), {*f, 1});
  r.set(MetricId::kDisaggInflightBatches, as_double(offload.inflight_batches), {*f});
}

void EngineMetrics::record_step(const StepStats& stats, double schedule_seconds) {
  MetricRegistry& r = registry_;
  r.set(MetricId::kQueueDepth, stats.output_queue_depth, {kOutputIndex});
  r.set(MetricId::kQueueDepth, stats.think_queue_depth, {kThinkIndex});
  r.set(MetricId::kQueueDepth, stats.waiting_depth, {kWaitingIndex});
  r.set(MetricId::kQueueDepth, stats.swapped_depth, {kSwappedIndex});
  // A phase absent from a step is not observed: thousands of zeros would
  // drag the batch-size quantiles to 0 and hide the batches that ran.
  if (stats.output_batch > 0) r.observe(MetricId::kSchedulerBatchSize, stats.output_batch, {kOutputIndex});
  if (stats.think_batch > 0) r.observe(MetricId::kSchedulerBatchSize, stats.think_batch, {kThinkIndex});
  if (stats.prefill_requests > 0) {
    r.observe(MetricId::kSchedulerBatchSize, stats.prefill_requests, {kPrefillIndex});
  }
  if (stats.predicted_step_ms > 0) {
    r.observe(MetricId::kSchedulerPredictedStep, stats.predicted_step_ms / 1000.0);
  }
  if (schedule_seconds >= 0) {
    r.observe(MetricId::kScheduleBatchDuration, schedule_seconds);
    r.observe(MetricId::kScheduleBatchDurationNs, schedule_seconds * 1e9);
  }
}

void EngineMetrics::record_event(const PhaseEvent& event) {
  if (event.kind == PhaseEventKind::kExitThink) {
    registry_.observe(MetricId::kThinkTokensPerRequest, as_double(event.think_tokens));
  }
}

void EngineMetrics::record_output_itl(double gap_s) {
  if (gap_s >= 0) registry_.observe(MetricId::kOutputItl, gap_s);
}

void EngineMetrics::record_request(const RequestTimes& times) {
  MetricRegistry& r = registry_;
  if (times.ttft_s >= 0) r.observe(MetricId::kRequestTtft, times.ttft_s);
  if (times.ttfv_s >= 0) r.observe(MetricId::kRequestTtfv, times.ttfv_s);
  if (times.ttot_s >= 0) r.observe(MetricId::kRequestTtot, times.ttot_s);
  if (times.completed && times.e2e_s >= 0) r.observe(MetricId::kRequestE2e, times.e2e_s);
  // A request given up on did not meet its SLO.
  r.add(MetricId::kSloRequests, 1, {times.completed && times.slo_met ? kMetIndex : kMissedIndex});
  for (std::uint8_t bit = 0; bit < kSloMissBounds; ++bit) {
    if (((times.slo_misses >> bit) & 1U) != 0) r.add(MetricId::kSloBoundMisses, 1, {bit});
  }
}

}  // namespace meridian::telemetry
