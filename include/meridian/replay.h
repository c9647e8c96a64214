// The replay simulator (SPEC §3.11): a deterministic discrete-event
// simulation of a continuous-batching engine. Simulated time comes from the
// roofline step-cost model; requests come from a workload; the real
// PhaseRouter follows every token, the real KvBlockManager holds the KV, and
// the scheduling policy is either Meridian (the real DualQueueScheduler, KV
// tiers, phase-aware preemption, entropy forcing through the real
// EntropyProbe) or a model of a vLLM baseline on the identical workload.
//
// Thread-safety: run_replay() is reentrant (no shared state); distinct runs
// may go on in parallel threads. Results are plain values.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meridian/config.h"
#include "meridian/run_verdict.h"
#include "meridian/sim_cost_model.h"
#include "meridian/sim_workload.h"
#include "meridian/types.h"

namespace meridian::telemetry {
class EngineMetrics;
}  // namespace meridian::telemetry

namespace meridian::sim {

enum class PolicyKind : std::uint8_t {
  kVllmFcfs = 0,           ///< vLLM default: running list in arrival order, tail preemption by recompute
  kVllmPriority = 1,       ///< vLLM --scheduling-policy priority: (priority, arrival) order and victims
  kStaticBudget = 2,       ///< vllm-fcfs plus vLLM's thinking_token_budget (forces </think> at N)
  kMeridianNoForcing = 3,  ///< Meridian scheduling and KV tiers, hard cap only
  kMeridian = 4,           ///< Meridian: dual queue, tiers, preemption, entropy forcing
  kVllmFcfsTuned = 5,      ///< vllm-fcfs with the ITL-tuned max_num_batched_tokens (2048)
  /// The best vLLM: vllm-fcfs or vllm-priority at the scheduler setting with
  /// the highest goodput (find_goodput() picks it over vllm_best_settings();
  /// StudyOptions::vllm_best carries it). A study-level policy: run_replay()
  /// refuses it, and it is not in kAllPolicies.
  kVllmBest = 6,
  /// PASCAL (HPCA 2026, arXiv 2602.11530), the phase-aware peer, in one
  /// instance on vLLM's scheduler: reasoning first, round-robin per queue,
  /// answering preempted first, an answer-token pacer at the answer TPOT SLO
  /// (docs/replay.md#pascal).
  kPascal = 7,
  /// Ruler tests, not schedulers (docs/replay.md#adversaries): vllm-fcfs that
  /// holds the longest-thinking [engine] adversary_share of reasoning requests
  /// (by their natural think length, an oracle) until the first turns stop
  /// arriving, then serves them; and one that aborts them on arrival. Each only
  /// games a ruler; on the sustainable ruler neither may beat vllm-fcfs.
  kAdversaryHold = 8,
  kAdversaryAbort = 9,
};
/// Every policy, in report order: the vLLM baselines first, the peer, then Meridian.
inline constexpr std::array<PolicyKind, 7> kAllPolicies = {
    PolicyKind::kVllmFcfs,     PolicyKind::kVllmFcfsTuned, PolicyKind::kVllmPriority,
    PolicyKind::kStaticBudget, PolicyKind::kPascal,        PolicyKind::kMeridianNoForcing,
    PolicyKind::kMeridian};
[[nodiscard]] std::string_view to_string(PolicyKind policy) noexcept;
/// "meridian", "meridian-no-forcing", "vllm-fcfs", "vllm-fcfs-tuned", "vllm-priority", "static-budget",
/// "vllm-best", "pascal", "adversary-hold", "adversary-abort".
[[nodiscard]] std::optional<PolicyKind> parse_policy(std::string_view name) noexcept;
/// Whether the policy is one of the ruler's adversaries.
[[nodiscard]] constexpr bool is_adversary(PolicyKind p) noexcept {
  return p == PolicyKind::kAdversaryHold || p == PolicyKind::kAdversaryAbort;
}
/// Whether the policy is Meridian's (tiered KV, phase-aware scheduling).
[[nodiscard]] constexpr bool is_meridian(PolicyKind p) noexcept {
  return p == PolicyKind::kMeridian || p == PolicyKind::kMeridianNoForcing;
}

/// Requests the simulated engine holds beyond [engine] max_num_seqs (waiting
/// for their prefill or a re-prefill). An arrival that finds the engine
/// holding max_num_seqs + this many requests is rejected, as a server answers
/// 503 under overload: it is reported under "rejected", misses its SLO, and
/// its follow-up turns are never sent. It bounds a run's memory and time at
/// any arrival rate; no run in docs/replay.md comes near it.
inline constexpr std::uint32_t kMaxWaitingRequests = 16384;

/// [engine]: the simulated engine's limits (vLLM's defaults for an H100 API server).
struct EngineParams {
  std::uint32_t max_num_batched_tokens = 8192;
  std::uint32_t max_num_seqs = 1024;
  /// vllm-fcfs-tuned: what operators who care about ITL run (vLLM's tuning
  /// guide: smaller budgets mean fewer prefill tokens stretching a decode step).
  std::uint32_t tuned_max_num_batched_tokens = 2048;
  std::uint32_t thinking_token_budget = 2048;  ///< static-budget's vLLM thinking_token_budget
  /// vLLM's long_prefill_token_threshold for the vllm-* policies: a prefill
  /// chunk is cut to this many tokens (0: off, vLLM's default).
  std::uint32_t long_prefill_token_threshold = 0;
  /// pascal's answer pacer paces at this share of [slo] output_tpot_ms (0: no
  /// pacer). 0.5 gave PASCAL its highest goodput of {1, 0.8, 0.5, 0}
  /// (docs/replay.md#pascal): at 1 its tokens land on the SLO's edge.
  double pascal_pace_fraction = 0.5;
  /// vLLM's scheduler_reserve_full_isl (on by default in 0.32): a waiting
  /// request is admitted only if KV for its whole sequence fits, not just
  /// its first chunk (vllm-* policies).
  bool scheduler_reserve_full_isl = true;
  /// A finished or preempted request's KV blocks are given back tail first, as
  /// vLLM frees them, so a cached prefix's head is reclaimed last (every
  /// policy). False: head first, the simulator's order before the engine
  /// replay's fidelity study (kept to measure that correction).
  bool kv_free_tail_first = true;
  /// Two steps in flight, as vLLM's EngineCore.step_with_batch_queue (the
  /// GPU default): a step is planned while the previous one runs, so it sees
  /// arrivals only up to that step's start and schedules a request that
  /// finished in the previous step once more (its blocks are freed a step
  /// later). The Meridian adapter holds no decode then (docs/replay.md), so
  /// the meridian policies schedule as vllm-fcfs. Off: lockstep (vLLM's
  /// --no-async-scheduling), the replay's numbers of record.
  bool async_scheduling = false;
  /// adversary-hold and adversary-abort: the share of reasoning requests, the
  /// longest thinkers, that they hold or abort. 0.08 stays inside a 90 %
  /// per-class target, so only the sustainability rules can stop them.
  double adversary_share = 0.08;
  double series_interval_s = 1.0;  ///< time-series sampling period
  double max_sim_time_s = 86400;   ///< safety stop: requests still open are reported as unfinished
};

/// [slo]: what a request needs to count as served well (DistServe's SLO
/// attainment, extended by phase). A request meets its SLO when every bound
/// that applies to it holds: TTFT always; TTFV (when set) for a reasoning
/// request; output TPOT when it has >= 2 visible tokens; think TPOT when it
/// thought >= 2 tokens. A request that does not complete does not meet it.
struct SloParams {
  double ttft_ms = 1000;  ///< arrival -> first generated token (think or visible)
  /// Arrival -> first answer (visible) token of a reasoning request; 0: no
  /// bound (the default). A reasoning request that completes with no answer
  /// token misses a set bound.
  double ttfv_ms = 0;
  double output_tpot_ms = 20;  ///< mean gap between a request's visible tokens (the seeds' output budget)
  double think_tpot_ms = 80;   ///< think duration / think tokens
  double attainment_pct = 90;  ///< goodput: highest rate with at least this share meeting the SLO
};

/// Everything a replay TOML file holds.
struct ReplayParams {
  EngineParams engine;
  CostModelParams cost_model;
  WorkloadParams workload;
  SignalModelParams signal_model;
  SloParams slo;
  DisaggSimParams disagg;  ///< [disagg]: off by default (docs/replay.md, disaggregated mode)
};

/// Defaults overlaid by a replay TOML document. The [workload] defaults are
/// those of the workload kind the document names (`workload.kind`), or of
/// `kind_override` when given (the CLI's --workload). Throws ConfigError naming
/// every bad field by dotted path (e.g. "cost_model.hbm_bandwidth_gbps").
[[nodiscard]] ReplayParams parse_replay_params(std::string_view toml_text,
                                               std::string_view source_name = "<string>",
                                               std::string_view kind_override = {});
[[nodiscard]] ReplayParams load_replay_params(const std::filesystem::path& file,
                                              std::string_view kind_override = {});
/// Range checks of all sections; throws ConfigError.
void validate(const ReplayParams& params);
/// Every field as a TOML document that parse_replay_params() reads back
/// ([disagg] only when it differs from its defaults, so that reports made
/// without the disaggregated mode read as they did before it existed).
[[nodiscard]] std::string to_toml(const ReplayParams& params);

struct ReplayOptions {
  PolicyKind policy = PolicyKind::kMeridian;
  MeridianConfig config = MeridianConfig::defaults();  ///< [scheduler], [entropy], [kv_memory]
  std::string model = "qwen3";                         ///< model whose boundary token ids are used
  ReplayParams params;
  std::uint64_t seed = 42;
  /// Called now and then with the fraction of requests finished (0..1).
  std::function<void(double)> progress;
  /// The ruler the run is judged by (ReplayResult::verdict).
  Ruler ruler = Ruler::kSustainable;
  /// Stop the run as soon as its verdict is decided "does not meet `ruler`"
  /// (the goodput search sets it): a class past its allowed SLO misses, a
  /// request aborted or turned away, or (sustainable ruler) a backlog that
  /// grew by the time the first turns stop arriving. The requests left open
  /// count as missing their SLO. Never stops a run that meets the ruler.
  bool stop_when_decided = false;
  /// Live telemetry of the run (meridian/metrics.h), not owned: after every
  /// step the router, scheduler (Meridian policies) and block manager are
  /// mirrored and the step, phase events, answer ITL and finished requests
  /// recorded. Null (the default) costs nothing and changes no result.
  telemetry::EngineMetrics* metrics = nullptr;
  /// Called after every step with the simulated time (s), e.g. to pace the
  /// run to wall-clock time while its metrics are watched.
  std::function<void(double)> on_time;
};

/// What happened to one request (index i holds request id i + 1).
struct RequestOutcome {
  bool arrived = false;
  bool completed = false;
  bool reasoning = false;
  float ttft_ms = -1;              ///< -1: no token generated
  float ttfv_ms = -1;              ///< -1: no visible token
  float output_tpot_ms = -1;       ///< -1: fewer than 2 visible tokens
  float think_tpot_ms = -1;        ///< -1: not a reasoning request, or fewer than 2 think tokens
  std::uint32_t think_tokens = 0;  ///< emitted
  bool slo_met = false;
  std::uint8_t slo_misses = 0;  ///< SloMiss bits: every bound missed (0 when met)
};

/// The bounds of `slo` that `r` misses (SloMiss bits; SloParams states the rule).
[[nodiscard]] std::uint8_t slo_misses(const RequestOutcome& r, const SloParams& slo) noexcept;
/// Whether `r` meets `slo`: it misses no bound.
[[nodiscard]] inline bool meets_slo(const RequestOutcome& r, const SloParams& slo) noexcept {
  return slo_misses(r, slo) == 0;
}

/// One sample of the time series.
struct SeriesPoint {
  double t_s = 0;
  std::uint32_t output_queue = 0;  ///< running answer-phase requests
  std::uint32_t think_queue = 0;   ///< running think-phase requests
  std::uint32_t waiting = 0;       ///< waiting for (re)prefill
  std::uint32_t swapped = 0;
  double kv_used_fraction = 0;
  double output_itl_p99_ms = 0;  ///< over the tokens of this interval
  double output_itl_max_ms = 0;
  std::uint32_t tokens = 0;  ///< tokens generated in the interval
};

struct ReplayResult {
  PolicyKind policy = PolicyKind::kMeridian;
  /// Named metrics in report order (docs/benchmarks.md#metrics defines each).
  std::vector<std::pair<std::string, double>> metrics;
  std::vector<SeriesPoint> series;
  /// Raw per-request / per-token samples (ms), for CDFs.
  std::vector<float> ttft_ms, ttot_ms, ttfv_ms, output_itl_ms, think_tpot_ms, e2e_ms;
  std::vector<RequestOutcome> outcomes;  ///< one per workload request
  bool stopped_early = false;            ///< stop_when_decided ended the run
  /// The run judged by ReplayOptions::ruler (sustainable_ruler.h).
  RunVerdict verdict;
  /// Think tokens each request emitted (index i: request i + 1): the work it
  /// did, for the physical bound (capacity_bound.h).
  std::vector<std::uint32_t> think_tokens;

  /// The metric's value; throws NotFound naming it if absent.
  [[nodiscard]] double metric(std::string_view name) const;
};

/// Runs one policy over the workload. Throws ConfigError on bad parameters.
[[nodiscard]] ReplayResult run_replay(const Workload& workload, const ReplayOptions& options);

/// How a metric compares between runs.
enum class Better : std::uint8_t { kLower, kHigher, kNeither };
struct MetricInfo {
  std::string_view name;
  Better better;
  std::string_view label;  ///< for the Markdown table
};
/// The metrics every run reports, in order (the keys of report.json "metrics").
[[nodiscard]] const std::vector<MetricInfo>& metric_catalog();

/// WIN (>= 20% better), win (>= 2%), FLAT (within 2%), loss, LOSS (>= 20% worse).
[[nodiscard]] std::string_view delta_flag(double delta_pct, Better better) noexcept;
/// (candidate - baseline) / |baseline| in percent; 0 when both are 0, +/-inf when only baseline is 0.
[[nodiscard]] double delta_pct(double candidate, double baseline) noexcept;

/// Context printed into every report.
struct ReportContext {
  std::uint64_t seed = 42;           ///< the first seed
  std::vector<std::uint64_t> seeds;  ///< every seed of a multi-seed study (empty: just `seed`)
  std::string workload;              ///< name and source
  std::size_t requests = 0;
  std::string command;  ///< the command line that produced it
  ReplayParams params;
  std::string vllm_best;  ///< the setting vllm-best ran at (VllmSetting::label()), if it ran
};

/// report.json of one policy: {"policy", "metrics": {...}, "series": [...], "samples": {...}}.
[[nodiscard]] std::string policy_report_json(const ReplayResult& result, const ReportContext& context);
}  // namespace meridian::sim
