// The metric catalog table (include/meridian/metric_catalog.h). Label value
// orders match the C++ enums they index: ForceReason, BlockTier, ReclaimMode.
#include "meridian/metric_catalog.h"

#include <array>

#include "meridian/types.h"

namespace meridian::telemetry {
namespace {

using std::string_view;

// Label value sets.
constexpr std::array<string_view, 2> kKinds = {"enter_think", "exit_think"};
constexpr std::array<string_view, 3> kReasons = {"converged", "overthinking", "hard_cap"};
constexpr std::array<string_view, 3> kHow = {"eos", "ended", "reaped"};
constexpr std::array<string_view, 4> kQueues = {"output", "think", "waiting", "swapped"};
constexpr std::array<string_view, 3> kBatchPhases = {"output", "think", "prefill"};
constexpr std::array<string_view, 2> kVictimPhases = {"output", "think"};
constexpr std::array<string_view, 3> kModes = {"recompute", "swap", "offload"};
constexpr std::array<string_view, 3> kTiers = {"think_complete", "think_active", "output_critical"};
constexpr std::array<string_view, 2> kOutcomes = {"met", "missed"};
// slo_miss_name() order (the SloMiss bits, lowest first).
constexpr std::array<string_view, kSloMissBounds> kSloBounds = {"incomplete", "ttft", "ttfv", "think_tpot",
                                                                "output_tpot"};
constexpr std::array<string_view, 2> kComponents = {"scheduler", "logits_processor"};
constexpr std::array<string_view, 3> kFabrics = {"nixl", "mooncake", "nixl-synth"};
// OffloadFallbackReason order (meridian/kv_offload_counters.h).
constexpr std::array<string_view, 5> kFallbackReasons = {"busy", "down", "queue_full", "failed", "timeout"};
constexpr std::array<string_view, 2> kDirections = {"push", "pull"};

constexpr std::array<LabelSpec, 1> kKindLabel = {{{"kind", kKinds}}};
constexpr std::array<LabelSpec, 1> kReasonLabel = {{{"reason", kReasons}}};
constexpr std::array<LabelSpec, 1> kHowLabel = {{{"how", kHow}}};
constexpr std::array<LabelSpec, 1> kQueueLabel = {{{"queue", kQueues}}};
constexpr std::array<LabelSpec, 1> kBatchPhaseLabel = {{{"phase", kBatchPhases}}};
constexpr std::array<LabelSpec, 2> kPreemptionLabels = {{{"phase", kVictimPhases}, {"mode", kModes}}};
constexpr std::array<LabelSpec, 1> kTierLabel = {{{"tier", kTiers}}};
constexpr std::array<LabelSpec, 1> kOutcomeLabel = {{{"outcome", kOutcomes}}};
constexpr std::array<LabelSpec, 1> kSloBoundLabel = {{{"bound", kSloBounds}}};
constexpr std::array<LabelSpec, 1> kComponentLabel = {{{"component", kComponents}}};
constexpr std::array<LabelSpec, 1> kFabricLabel = {{{"fabric", kFabrics}}};
constexpr std::array<LabelSpec, 2> kFabricReasonLabels = {
    {{"fabric", kFabrics}, {"reason", kFallbackReasons}}};
constexpr std::array<LabelSpec, 2> kFabricDirectionLabels = {
    {{"fabric", kFabrics}, {"direction", kDirections}}};

// Histogram buckets (upper bounds).
constexpr std::array<double, 10> kThinkTokenBuckets = {64,   128,  256,  512,   1024,
                                                       2048, 4096, 8192, 16384, 32768};
constexpr std::array<double, 11> kBatchBuckets = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
constexpr std::array<double, 11> kSchedulerCpuBuckets = {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
                                                         1e-3, 2.5e-3, 5e-3, 1e-2, 1e-1};
// The same range in nanoseconds (1 us to 100 ms) for the original catalog's duration_ns name.
constexpr std::array<double, 14> kSchedulerCpuNsBuckets = {1e3,   2.5e3, 5e3, 1e4,   2.5e4, 5e4, 1e5,
                                                           2.5e5, 5e5,   1e6, 2.5e6, 5e6,   1e7, 1e8};
constexpr std::array<double, 13> kStepBuckets = {0.005, 0.01,  0.015, 0.02, 0.025, 0.03, 0.04,
                                                 0.05,  0.075, 0.1,   0.25, 0.5,   1};
constexpr std::array<double, 14> kLatencyBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                    2.5,  5,     10,   25,  60,   120, 300};
constexpr std::array<double, 11> kTtotBuckets = {0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10};
constexpr std::array<double, 15> kItlBuckets = {0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03,
                                                0.04,  0.05,   0.075, 0.1,  0.25,  0.5,  1};

constexpr MetricType kCounter = MetricType::kCounter;
constexpr MetricType kGauge = MetricType::kGauge;
constexpr MetricType kHistogram = MetricType::kHistogram;

// Order = MetricId.
constexpr std::array<MetricSpec, kMetricCount> kCatalog = {{
    // ---- PhaseRouter
    {"meridian_phase_router_tracked_requests",
     kGauge,
     "requests",
     {},
     {},
     "Requests the phase router holds state for.",
     "PhaseRouter::tracked()",
     "Growing while traffic is flat: requests are not ended or reaped (runbook: tracked requests keep "
     "growing)."},
    {"meridian_phase_transitions_total",
     kCounter,
     "events",
     kKindLabel,
     {},
     "Think blocks opened (enter_think) and closed (exit_think).",
     "PhaseRouter::counters()",
     "No enter_think with reasoning traffic: phase detection is off (runbook: every request looks "
     "single-phase)."},
    {"meridian_budget_force_triggered_total",
     kCounter,
     "events",
     {},
     {},
     "Forced ends of thinking announced (the first time per think block), all reasons: the sum of "
     "budget_force_reason_total.",
     "PhaseRouter::counters().forces_issued",
     "Flat while think queues grow: the entropy probe never converges (check eat_ema_variance_threshold)."},
    {"meridian_budget_force_reason_total",
     kCounter,
     "events",
     kReasonLabel,
     {},
     "Forced ends of thinking announced, by reason (the first time per think block).",
     "PhaseRouter::counters().forces_issued",
     "hard_cap above half of all forces over 1 h: the entropy probe rarely fires; tune [entropy] "
     "(ADR-0016)."},
    {"meridian_budget_force_reissued_total",
     kCounter,
     "events",
     {},
     {},
     "Forced ends that had not landed within the grace and were announced again.",
     "PhaseRouter::counters().forces_reissued",
     "Above half of the forces: the forced </think> is not reaching the model (runbook: forced ends do not "
     "land)."},
    {"meridian_budget_forced_exits_total",
     kCounter,
     "events",
     {},
     {},
     "Think blocks closed while a forced end was pending.",
     "PhaseRouter::counters().forced_exits",
     "Compare with budget_force_triggered_total: the forces that landed."},
    {"meridian_think_tokens_per_request",
     kHistogram,
     "tokens",
     {},
     kThinkTokenBuckets,
     "Think tokens of each closed think block (natural or forced end).",
     "PhaseRouter exit_think events",
     "P99 at max_think_tokens: the hard cap dominates; lower max_think_tokens or tighten [entropy] "
     "thresholds."},
    {"meridian_requests_completed_total",
     kCounter,
     "requests",
     kHowLabel,
     {},
     "Requests the router stopped tracking: EOS seen, ended by the engine, or reaped idle.",
     "PhaseRouter::counters()",
     "reaped growing: the engine does not end requests (check the adapter)."},
    {"meridian_router_unknown_request_tokens_total",
     kCounter,
     "tokens",
     {},
     {},
     "Tokens for requests the router does not (or no longer) track.",
     "PhaseRouter::counters().unknown_request_tokens",
     "Sustained: the reap interval is shorter than the gaps between a request's tokens."},
    {"meridian_think_disable_ignored_total",
     kCounter,
     "requests",
     {},
     {},
     "Requests asking for no thinking on a model that cannot switch it off.",
     "PhaseRouter::counters().think_disable_ignored",
     "Informational: the model's preset has no think switch."},
    // ---- DualQueueScheduler
    {"meridian_queue_depth",
     kGauge,
     "requests",
     kQueueLabel,
     {},
     "Requests in each queue at the start of the last step.",
     "StepPlan::stats",
     "think P95 above 4x its 1 h baseline with no forcing: think starvation risk (runbook: think requests "
     "wait too long)."},
    {"meridian_scheduler_batch_size", kHistogram, "requests", kBatchPhaseLabel, kBatchBuckets,
     "Requests in each step's batch, by phase.", "StepPlan::stats",
     "Small output batches under load: answers drain faster than think completions refill them."},
    {"meridian_schedule_batch_duration_seconds",
     kHistogram,
     "seconds",
     {},
     kSchedulerCpuBuckets,
     "Scheduler CPU time per step (plan and completion).",
     "DualQueueScheduler schedule() + complete_step()",
     "P99 above 1 ms under steady load is unexpected: file an issue with a CPU profile."},
    // The original catalog's name and unit (meridian.schedule_batch.duration_ns), fed from the same
    // observations as the _seconds histogram above, which follows Prometheus's base-unit convention:
    // dashboards written for either keep working.
    {"meridian_schedule_batch_duration_ns",
     kHistogram,
     "nanoseconds",
     {},
     kSchedulerCpuNsBuckets,
     "Scheduler CPU time per step in nanoseconds (the original catalog's name; same observations as "
     "meridian_schedule_batch_duration_seconds).",
     "DualQueueScheduler schedule() + complete_step()",
     "P99 above 1e6 (1 ms) under steady load is unexpected: file an issue with a CPU profile."},
    {"meridian_scheduler_predicted_step_seconds",
     kHistogram,
     "seconds",
     {},
     kStepBuckets,
     "Cost-model prediction of each planned step.",
     "StepPlan::stats.predicted_step_ms",
     "Mostly above output_tpot_budget_ms: the output budget cannot be met at this load."},
    {"meridian_scheduler_steps_total",
     kCounter,
     "steps",
     {},
     {},
     "Steps planned.",
     "DualQueueScheduler::counters().steps",
     "The denominator of the per-step ratios."},
    {"meridian_scheduler_scheduled_tokens_total",
     kCounter,
     "tokens",
     {},
     {},
     "Tokens scheduled (prefill and decode).",
     "DualQueueScheduler::counters().scheduled_tokens",
     "Throughput: rate() of it."},
    {"meridian_scheduler_due_think_total",
     kCounter,
     "requests",
     {},
     {},
     "Think decodes scheduled because the think TPOT guarantee fell due.",
     "DualQueueScheduler::counters().due_think_decodes",
     "A large share of think decodes: the output load leaves reasoning only its guarantee."},
    {"meridian_scheduler_output_slo_overruns_total",
     kCounter,
     "steps",
     {},
     {},
     "Steps predicted past output_tpot_budget_ms and past the slack the tightest answer banked.",
     "DualQueueScheduler::counters().output_slo_overruns",
     "Above 20% of steps: answers exceed the output budget (runbook: answer ITL above the output budget)."},
    {"meridian_scheduler_stalls_total",
     kCounter,
     "requests",
     {},
     {},
     "Runnable requests left out of a step for lack of KV blocks.",
     "DualQueueScheduler::counters().stalls",
     "Rising with used bytes near capacity: KV is the bottleneck."},
    {"meridian_preemptions_total",
     kCounter,
     "requests",
     kPreemptionLabels,
     {},
     "Preempted requests by phase and reclaim mode.",
     "DualQueueScheduler::counters()",
     "phase=output is user-visible; any think preemption while KV is free is a bug (runbook: TTFT of "
     "reasoning requests)."},
    {"meridian_scheduler_admission_preemptions_total",
     kCounter,
     "requests",
     {},
     {},
     "Think requests paused (preempted, recompute) so a new prompt near its TTFT budget could start.",
     "DualQueueScheduler::counters().admission_preemptions",
     "Rising steadily: KV is full and new prompts take it from reasoning that has slack (ADR-0027); "
     "watch meridian_slo_bound_misses_total{bound=\"think_tpot\"}."},
    {"meridian_scheduler_victim_wait_seconds",
     kGauge,
     "seconds",
     {},
     {},
     "How long a preempted request waits to run again (preemption to its first token after), smoothed over "
     "the victims that resumed (the latest victim resumes first, as in vLLM).",
     "DualQueueScheduler::victim_wait_ms()",
     "Minutes: KV stays full, the oldest victims wait longest and miss their think TPOT (ADR-0035); "
     "KV is undersized for the load."},
    {"meridian_scheduler_ttft_deferred_total",
     kCounter,
     "requests",
     {},
     {},
     "New prompts that could no longer meet the TTFT budget and were prefilled after those that still could.",
     "DualQueueScheduler::counters().ttft_deferred",
     "Rising: prompts arrive faster than prefill can serve them within ttft_slo_ms; the longest wait "
     "(ADR-0028). "
     "Compare with meridian_slo_bound_misses_total{bound=\"ttft\"}."},
    {"meridian_scheduler_aborted_total",
     kCounter,
     "requests",
     {},
     {},
     "Requests that could never fit the KV pool, ended.",
     "DualQueueScheduler::counters().aborted",
     "Any increase: requests larger than the KV pool reach the engine (runbook: requests aborted as too "
     "large)."},
    {"meridian_scheduler_livelock_releases_total",
     kCounter,
     "requests",
     {},
     {},
     "Partial prefills released because nothing could run.",
     "DualQueueScheduler::counters().livelock_releases",
     "Rising: the KV pool is too small for the concurrent prompts."},
    {"meridian_step_cost_rejected_total",
     kCounter,
     "steps",
     {},
     {},
     "Step times the cost model refused (non-finite or not positive).",
     "DualQueueScheduler::counters().rejected_step_times",
     "Any increase: the engine reports broken step times."},
    {"meridian_step_cost_clamped_total",
     kCounter,
     "steps",
     {},
     {},
     "Step times that differed from the prediction by more than its size and were clamped.",
     "StepCostModel::clamped()",
     "Sustained: the hardware is slower than the model's start values; it adapts."},
    // ---- KvBlockManager
    {"meridian_block_manager_used_bytes",
     kGauge,
     "bytes",
     {},
     {},
     "KV bytes held by requests (live blocks, all tiers); cached blocks kept for prefix hits are reclaimable "
     "and not counted.",
     "KvBlockManager::usage()",
     "Above 90% of capacity for 10 min: the early warning before output-critical evictions."},
    {"meridian_block_manager_capacity_bytes",
     kGauge,
     "bytes",
     {},
     {},
     "KV bytes the block manager manages.",
     "KvBlockManager::usage()",
     "The denominator of the used-bytes alert."},
    {"meridian_block_manager_live_blocks",
     kGauge,
     "blocks",
     kTierLabel,
     {},
     "Blocks held by at least one request, by tier.",
     "KvBlockManager::usage().live_blocks",
     "think_active near the think share: reasoning fills its soft share."},
    {"meridian_block_manager_cached_blocks",
     kGauge,
     "blocks",
     kTierLabel,
     {},
     "Blocks held by nobody, kept for prefix hits, by tier.",
     "KvBlockManager::usage().cached_blocks",
     "Informational: what the prefix cache can reuse."},
    {"meridian_block_manager_evictions_total",
     kCounter,
     "blocks",
     kTierLabel,
     {},
     "Blocks reclaimed from each tier (cached reuse, offload, preemption release, aggressive drop).",
     "KvBlockManager::counters().evictions()",
     "Any tier=output_critical increase is user-visible (runbook: output-critical evictions)."},
    {"meridian_output_critical_eviction_total",
     kCounter,
     "events",
     {},
     {},
     "Answer-phase requests that lost live KV (preempted or offloaded): user-visible stutter.",
     "KvBlockManager::counters().output_critical_eviction_events",
     "Any increase in 5 min: page; lower think_phase_memory_fraction or the load (runbook: output-critical "
     "evictions)."},
    {"meridian_prefix_cache_hit_blocks_total",
     kCounter,
     "blocks",
     {},
     {},
     "Prompt blocks found in the prefix cache.",
     "KvBlockManager::counters().prefix_hit_blocks",
     "Hit rate = hit / lookup; falling: conversations lose their cached prefix."},
    {"meridian_prefix_cache_lookup_blocks_total",
     kCounter,
     "blocks",
     {},
     {},
     "Prompt blocks looked up in the prefix cache.",
     "KvBlockManager::counters().prefix_lookup_blocks",
     "The denominator of the prefix hit rate."},
    // ---- Per request, from the engine
    {"meridian_request_ttft_seconds",
     kHistogram,
     "seconds",
     {},
     kLatencyBuckets,
     "Arrival to the first generated token (think or visible).",
     "engine (replay simulator, vLLM adapter)",
     "P95 above the TTFT SLO: admission is the bottleneck."},
    {"meridian_request_ttfv_seconds",
     kHistogram,
     "seconds",
     {},
     kLatencyBuckets,
     "Arrival to the first visible (answer) token.",
     "engine (replay simulator, vLLM adapter)",
     "What a user waits for; rising with think_tokens_per_request: reasoning runs long."},
    {"meridian_request_ttot_seconds",
     kHistogram,
     "seconds",
     {},
     kTtotBuckets,
     "End of thinking to the first visible token.",
     "engine (replay simulator, vLLM adapter)",
     "P95 above a few steps: answer-phase requests wait after </think>."},
    {"meridian_request_e2e_seconds",
     kHistogram,
     "seconds",
     {},
     kLatencyBuckets,
     "Arrival to the last token of completed requests.",
     "engine (replay simulator, vLLM adapter)",
     "Informational."},
    {"meridian_output_itl_seconds",
     kHistogram,
     "seconds",
     {},
     kItlBuckets,
     "Gaps between consecutive visible tokens of a request.",
     "engine (replay simulator, vLLM adapter)",
     "P99 above 1.35 x output_tpot_budget_ms: answer streams stutter (runbook: answer ITL above the "
     "output budget). Up to 1.35 budgets is by design: a step may spend what the answers banked "
     "(ADR-0029)."},
    {"meridian_slo_requests_total",
     kCounter,
     "requests",
     kOutcomeLabel,
     {},
     "Finished requests that met or missed their SLO (TTFT, TTFV when bound, output TPOT, think TPOT).",
     "engine (replay simulator, vLLM adapter)",
     "Attainment = met / (met + missed); below the target share: the load is above goodput."},
    {"meridian_slo_bound_misses_total",
     kCounter,
     "requests",
     kSloBoundLabel,
     {},
     "Finished requests that missed each bound of their SLO (a request missing several counts under "
     "each; incomplete: given up on; ttfv only when a TTFV bound is set).",
     "engine (replay simulator, vLLM adapter)",
     "The bound that grows with missed requests is the one that binds: TTFT or TTFV means queueing "
     "(runbook: SLO attainment below target); a TPOT bound means steps too long."},
    // ---- Engine adapters and disaggregation
    {"meridian_failsafe_fallbacks_total",
     kCounter,
     "events",
     kComponentLabel,
     {},
     "Steps or batches left to vLLM's stock behaviour after an error in Meridian's code.",
     "meridian.vllm.Scheduler, ForceThinkEnd",
     "Any increase: read the logged error once per place and file an issue."},
    {"meridian_vocab_fallback_total",
     kCounter,
     "events",
     {},
     {},
     "Probe batches whose rows had mixed vocabulary sizes and were computed per request (original catalog).",
     "meridian.vllm logits processor",
     "Stays 0 with vLLM: one engine serves one vocabulary, so every probe batch has one row width. Kept "
     "for dashboards built on the original catalog; a rise would mean mixed-model batching."},
    {"meridian_disagg_blocks_offloaded_total",
     kCounter,
     "blocks",
     kFabricLabel,
     {},
     "KV blocks offloaded to the disaggregation fabric.",
     "KvBlockManager::counters().offloaded_live, KvOffloader counters",
     "Flat while [disagg] is enabled: offload at ExitThink is not firing."},
    {"meridian_disagg_offload_fallbacks_total",
     kCounter,
     "batches",
     kFabricReasonLabels,
     {},
     "Offload batches kept local (evictable as usual) instead of going to the fabric, by reason.",
     "KvOffloader counters().fallbacks",
     "busy/queue_full rising: the fabric is the bottleneck (raise max_inflight_batches or fabric capacity); "
     "down/failed/timeout: check the fabric peer (runbook: disaggregation fabric faults)."},
    {"meridian_disagg_corrupt_payloads_total",
     kCounter,
     "payloads",
     kFabricLabel,
     {},
     "Pulled KV payloads rejected by MRDN v1 checks (checksum, format, frame count or tier); their blocks "
     "are "
     "recomputed.",
     "KvOffloader counters().corrupt_payloads",
     "Any increase: the fabric or its memory corrupts data; the log names the payload and byte offset."},
    {"meridian_disagg_blocks_ingested_total",
     kCounter,
     "blocks",
     kFabricLabel,
     {},
     "KV blocks pulled back from the fabric and restored byte for byte.",
     "KvOffloader counters().blocks_ingested",
     "Informational: far below blocks offloaded means offloaded reasoning is rarely needed again."},
    {"meridian_disagg_transfer_bytes_total",
     kCounter,
     "bytes",
     kFabricDirectionLabels,
     {},
     "MRDN v1 payload bytes pushed to and pulled from the fabric.",
     "KvOffloader counters().bytes_pushed, bytes_pulled",
     "Rate near the link's bandwidth: the fabric is saturated; expect busy fallbacks."},
    {"meridian_disagg_inflight_batches",
     kGauge,
     "batches",
     kFabricLabel,
     {},
     "Offload batches pushed and not yet committed, failed or timed out.",
     "KvOffloader counters().inflight_batches",
     "Pinned at max_inflight_batches: commits are slow; queue_full fallbacks follow."},
}};

}  // namespace

std::string_view to_string(MetricType type) noexcept {
  switch (type) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

std::span<const MetricSpec> metric_catalog() noexcept { return kCatalog; }

const MetricSpec& spec(MetricId id) noexcept { return kCatalog[static_cast<std::size_t>(id)]; }

std::optional<MetricId> find_metric(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kCatalog.size(); ++i) {
    if (kCatalog[i].name == name) return static_cast<MetricId>(i);
  }
  return std::nullopt;
}

std::size_t series_count(const MetricSpec& spec) noexcept {
  std::size_t n = 1;
  for (const LabelSpec& label : spec.labels) n *= label.values.size();
  return n;
}

std::optional<std::uint8_t> label_value_index(const MetricSpec& spec, std::size_t label,
                                              std::string_view value) noexcept {
  if (label >= spec.labels.size()) return std::nullopt;
  const auto values = spec.labels[label].values;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i] == value) return static_cast<std::uint8_t>(i);
  }
  return std::nullopt;
}

}  // namespace meridian::telemetry
