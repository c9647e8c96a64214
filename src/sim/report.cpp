// The replay's metric catalog, delta flags and per-policy report.json
// (the multi-seed reports are in study_report.cpp).
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "meridian/replay.h"
#include "sim/metrics.h"
#include "sim/report_util.h"

namespace meridian::sim {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr std::size_t kCdfPoints = 200;

ordered_json cdf(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  ordered_json points = ordered_json::array();
  if (v.empty()) return points;
  for (std::size_t i = 0; i <= kCdfPoints; ++i) {
    const double q = 100.0 * static_cast<double>(i) / kCdfPoints;
    points.push_back({detail::sorted_percentile(v, q), q / 100.0});
  }
  return points;
}

}  // namespace

std::string_view to_string(PolicyKind policy) noexcept {
  switch (policy) {
    case PolicyKind::kVllmFcfs: return "vllm-fcfs";
    case PolicyKind::kVllmFcfsTuned: return "vllm-fcfs-tuned";
    case PolicyKind::kVllmPriority: return "vllm-priority";
    case PolicyKind::kStaticBudget: return "static-budget";
    case PolicyKind::kMeridianNoForcing: return "meridian-no-forcing";
    case PolicyKind::kMeridian: return "meridian";
    case PolicyKind::kVllmBest: return "vllm-best";
    case PolicyKind::kPascal: return "pascal";
    case PolicyKind::kAdversaryHold: return "adversary-hold";
    case PolicyKind::kAdversaryAbort: return "adversary-abort";
  }
  return "?";
}

std::optional<PolicyKind> parse_policy(std::string_view name) noexcept {
  for (PolicyKind p : kAllPolicies) {
    if (to_string(p) == name) return p;
  }
  for (PolicyKind p : {PolicyKind::kVllmBest, PolicyKind::kAdversaryHold, PolicyKind::kAdversaryAbort}) {
    if (to_string(p) == name) return p;
  }
  return std::nullopt;
}

double ReplayResult::metric(std::string_view name) const {
  for (const auto& [k, v] : metrics) {
    if (k == name) return v;
  }
  throw NotFound(fmt::format("replay result has no metric \"{}\"", name));
}

const std::vector<MetricInfo>& metric_catalog() {
  static const std::vector<MetricInfo> catalog = {
      {"requests", Better::kNeither, "requests in the workload"},
      {"arrived", Better::kNeither, "requests arrived"},
      {"completed", Better::kHigher, "requests completed"},
      {"aborted", Better::kLower, "requests aborted (never fit)"},
      {"rejected", Better::kLower, "requests rejected (engine full)"},
      {"unfinished", Better::kLower, "requests unfinished at the time limit"},
      {"never_arrived", Better::kLower,
       "requests never arrived (after the time limit, or follow-ups not sent)"},
      {"stopped_early", Better::kNeither, "stopped early (SLO misses decided it)"},
      {"slo_attainment_pct", Better::kHigher, "SLO attainment %"},
      {"slo_attainment_chat_pct", Better::kHigher, "SLO attainment: chat %"},
      {"slo_attainment_reasoning_pct", Better::kHigher, "SLO attainment: reasoning %"},
      {"meets_ruler", Better::kNeither, "meets the ruler (1: the rate would count toward goodput)"},
      {"sustainable", Better::kNeither,
       "sustainable (1: all completed, late arrivals fare, no backlog growth)"},
      {"late_attainment_chat_pct", Better::kHigher, "SLO attainment: chat arriving in the last quarter %"},
      {"late_attainment_reasoning_pct", Better::kHigher,
       "SLO attainment: reasoning arriving in the last quarter %"},
      {"backlog_mid", Better::kNeither, "requests in the system, window's second quarter (mean)"},
      {"backlog_end", Better::kNeither, "requests in the system, window's last quarter (mean)"},
      {"backlog_growth_pct", Better::kLower, "backlog growth, second to last quarter %"},
      {"backlog_work_mid", Better::kNeither,
       "tokens to generate in the system, window's second quarter (mean)"},
      {"backlog_work_end", Better::kNeither,
       "tokens to generate in the system, window's last quarter (mean)"},
      {"backlog_work_growth_pct", Better::kLower, "tokens-to-generate growth, second to last quarter %"},
      {"drain_s", Better::kLower, "drain: last finish after the last first-turn arrival (s)"},
      {"slo_miss_ttft_pct", Better::kLower, "SLO missed on TTFT %"},
      {"slo_miss_ttfv_pct", Better::kLower, "SLO missed on TTFV %"},
      {"slo_miss_output_tpot_pct", Better::kLower, "SLO missed on output TPOT %"},
      {"slo_miss_think_tpot_pct", Better::kLower, "SLO missed on think TPOT %"},
      {"slo_miss_incomplete_pct", Better::kLower, "SLO missed: not completed %"},
      {"ttft_p50_ms", Better::kLower, "TTFT P50 (ms)"},
      {"ttft_p90_ms", Better::kLower, "TTFT P90 (ms)"},
      {"ttft_p95_ms", Better::kLower, "TTFT P95 (ms)"},
      {"ttft_p99_ms", Better::kLower, "TTFT P99 (ms)"},
      {"ttfv_p50_ms", Better::kLower, "TTFV P50 (ms): first visible token"},
      {"ttfv_p95_ms", Better::kLower, "TTFV P95 (ms)"},
      {"ttfv_chat_p50_ms", Better::kLower, "TTFV chat P50 (ms)"},
      {"ttfv_chat_p95_ms", Better::kLower, "TTFV chat P95 (ms)"},
      {"ttfv_reasoning_p50_ms", Better::kLower, "TTFV reasoning P50 (ms)"},
      {"ttfv_reasoning_p95_ms", Better::kLower, "TTFV reasoning P95 (ms)"},
      {"ttot_p50_ms", Better::kLower, "TTOT P50 (ms; </think> to the first answer token)"},
      {"ttot_p95_ms", Better::kLower, "TTOT P95 (ms; </think> to the first answer token)"},
      {"ttot_p99_ms", Better::kLower, "TTOT P99 (ms; </think> to the first answer token)"},
      {"output_tpot_p50_ms", Better::kLower, "output TPOT P50 (ms, per request)"},
      {"output_tpot_p90_ms", Better::kLower, "output TPOT P90 (ms, per request)"},
      {"output_tpot_p95_ms", Better::kLower, "output TPOT P95 (ms, per request)"},
      {"output_itl_p50_ms", Better::kLower, "output ITL P50 (ms)"},
      {"output_itl_p95_ms", Better::kLower, "output ITL P95 (ms)"},
      {"output_itl_p99_ms", Better::kLower, "output ITL P99 (ms)"},
      {"output_itl_max_ms", Better::kLower, "output ITL max (ms)"},
      {"think_tpot_p50_ms", Better::kLower, "think TPOT P50 (ms)"},
      {"think_tpot_p90_ms", Better::kLower, "think TPOT P90 (ms)"},
      {"think_tpot_p99_ms", Better::kLower, "think TPOT P99 (ms)"},
      {"think_itl_p99_ms", Better::kLower, "think ITL P99 (ms)"},
      {"think_itl_max_ms", Better::kLower, "think ITL max (ms)"},
      {"e2e_p50_ms", Better::kLower, "E2E P50 (ms)"},
      {"e2e_p95_ms", Better::kLower, "E2E P95 (ms)"},
      // Fewer think tokens is work removed, not a win by itself: its price is
      // forced_before_answer_pct (the Pareto report weighs the two).
      {"think_tokens_avg", Better::kNeither, "think tokens avg"},
      {"think_tokens_p95", Better::kNeither, "think tokens P95"},
      {"think_tokens_total", Better::kNeither, "think tokens total"},
      {"think_tokens_saved_pct", Better::kNeither, "think tokens saved % (vs natural length)"},
      {"output_tokens_total", Better::kNeither, "answer tokens total"},
      {"forced_pct", Better::kNeither, "forced % (reasoning requests)"},
      {"forced_converged_pct", Better::kNeither, "forced: converged %"},
      {"forced_overthinking_pct", Better::kNeither, "forced: overthinking %"},
      {"forced_hard_cap_pct", Better::kNeither, "forced: hard cap %"},
      {"forced_before_answer_pct", Better::kLower, "forced before answer % (signal-model proxy)"},
      {"evictions_think_complete", Better::kNeither, "evictions: ThinkComplete"},
      {"evictions_think_active", Better::kNeither, "evictions: ThinkActive"},
      {"evictions_output_critical", Better::kLower, "evictions: OutputCritical"},
      {"output_critical_eviction_events", Better::kLower, "output-critical eviction events"},
      {"preemptions", Better::kLower, "preemptions"},
      {"preemptions_recompute", Better::kLower, "preemptions by recompute"},
      {"preemptions_swap", Better::kLower, "preemptions by swap"},
      {"preempted_answer_phase", Better::kLower, "answer-phase preemptions"},
      {"answer_phase_evicted_blocks", Better::kLower, "answer-phase KV blocks evicted"},
      {"preemptions_per_completed", Better::kLower, "preemptions per completed request (thrash)"},
      {"prefix_hit_rate", Better::kHigher, "prompt prefix-hit rate"},
      // In a closed-loop run below saturation these measure demand, not
      // capacity (forcing lowers them by construction); capacity is goodput.
      {"throughput_tokens_per_s", Better::kNeither, "throughput (tokens/s; demand, not capacity)"},
      {"think_throughput_tokens_per_s", Better::kNeither, "think throughput (tokens/s)"},
      {"arrival_window_throughput_tokens_per_s", Better::kNeither,
       "throughput while arrivals last (tokens/s)"},
      {"probe_passes", Better::kNeither, "EAT probe passes (extra tokens)"},
      {"prefill_tokens", Better::kLower, "prefill tokens (incl. recompute)"},
      {"simulated_tokens", Better::kNeither, "simulated tokens"},
      {"steps", Better::kNeither, "engine steps"},
      {"makespan_s", Better::kNeither, "makespan (s)"},
      {"gpu_busy_pct", Better::kNeither, "GPU busy %"},
      {"sim_wall_s", Better::kNeither, "simulator wall time (s)"},
      {"sim_tokens_per_s", Better::kNeither, "simulated tokens per wall second"},
  };
  return catalog;
}

double delta_pct(double candidate, double baseline) noexcept {
  if (baseline == 0) {
    if (candidate == 0) return 0;
    return candidate > 0 ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  }
  return 100.0 * (candidate - baseline) / std::fabs(baseline);
}

std::string_view delta_flag(double d, Better better) noexcept {
  if (better == Better::kNeither) return "";
  if (std::isnan(d) || std::fabs(d) < detail::kFlatPct) return "FLAT";
  const bool improved = better == Better::kLower ? d < 0 : d > 0;
  const bool big = std::fabs(d) >= detail::kWinPct;
  if (improved) return big ? "WIN" : "win";
  return big ? "LOSS" : "loss";
}

std::string policy_report_json(const ReplayResult& result, const ReportContext& context) {
  ordered_json j;
  j["schema_version"] = 1;
  j["policy"] = to_string(result.policy);
  j["context"] = detail::context_json(context);
  ordered_json metrics;
  for (const auto& [k, v] : result.metrics) metrics[k] = detail::finite(v);
  j["metrics"] = metrics;
  ordered_json series = ordered_json::array();
  for (const SeriesPoint& p : result.series) {
    series.push_back({{"t_s", p.t_s},
                      {"output_queue", p.output_queue},
                      {"think_queue", p.think_queue},
                      {"waiting", p.waiting},
                      {"swapped", p.swapped},
                      {"kv_used_fraction", p.kv_used_fraction},
                      {"output_itl_p99_ms", p.output_itl_p99_ms},
                      {"output_itl_max_ms", p.output_itl_max_ms},
                      {"tokens", p.tokens}});
  }
  j["series"] = series;
  ordered_json cdfs;
  cdfs["ttft_ms"] = cdf(result.ttft_ms);
  cdfs["ttot_ms"] = cdf(result.ttot_ms);
  cdfs["ttfv_ms"] = cdf(result.ttfv_ms);
  cdfs["output_itl_ms"] = cdf(result.output_itl_ms);
  cdfs["think_tpot_ms"] = cdf(result.think_tpot_ms);
  cdfs["e2e_ms"] = cdf(result.e2e_ms);
  j["cdf"] = cdfs;
  return j.dump(1) + "\n";
}

}  // namespace meridian::sim
