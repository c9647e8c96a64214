// Reports of the replay: report.json per policy, ab-report.json/md, and the
// SPEC §5 target checks.
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "meridian/replay.h"
#include "sim/metrics.h"

namespace meridian::sim {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr double kWinPct = 20;
constexpr double kFlatPct = 2;
constexpr std::size_t kCdfPoints = 200;

// Finite numbers only: JSON has no inf/NaN.
double finite(double v) { return std::isfinite(v) ? v : 0.0; }

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

ordered_json context_json(const ReportContext& c) {
  ordered_json j;
  j["seed"] = c.seed;
  j["workload"] = c.workload;
  j["requests"] = c.requests;
  j["arrival_rate"] = c.params.workload.arrival_rate;
  j["reasoning_ratio"] = c.params.workload.reasoning_ratio;
  j["duration_s"] = c.params.workload.duration_s;
  j["command"] = c.command;
  j["cost_model"] = "roofline: Qwen3-8B-class bf16 on one H100 SXM unless overridden (docs/benchmarks.md)";
  return j;
}

const ReplayResult* find(const std::vector<ReplayResult>& results, PolicyKind p) {
  for (const ReplayResult& r : results) {
    if (r.policy == p) return &r;
  }
  return nullptr;
}

std::string fmt_value(double v) {
  if (v == 0) return "0";
  if (std::fabs(v) >= 1000) return fmt::format("{:.0f}", v);
  if (std::fabs(v) >= 10) return fmt::format("{:.1f}", v);
  return fmt::format("{:.3g}", v);
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
  }
  return "?";
}

std::optional<PolicyKind> parse_policy(std::string_view name) noexcept {
  for (PolicyKind p : kAllPolicies) {
    if (to_string(p) == name) return p;
  }
  return std::nullopt;
}

const std::vector<MetricInfo>& metric_catalog() {
  static const std::vector<MetricInfo> catalog = {
      {"requests", Better::kNeither, "requests in the workload"},
      {"arrived", Better::kNeither, "requests arrived"},
      {"completed", Better::kHigher, "requests completed"},
      {"aborted", Better::kLower, "requests aborted (never fit)"},
      {"unfinished", Better::kLower, "requests unfinished at the time limit"},
      {"never_arrived", Better::kLower, "follow-up turns never sent"},
      {"stopped_early", Better::kNeither, "stopped early (SLO misses decided it)"},
      {"slo_attainment_pct", Better::kHigher, "SLO attainment %"},
      {"slo_attainment_chat_pct", Better::kHigher, "SLO attainment: chat %"},
      {"slo_attainment_reasoning_pct", Better::kHigher, "SLO attainment: reasoning %"},
      {"ttft_p50_ms", Better::kLower, "TTFT P50 (ms)"},
      {"ttft_p95_ms", Better::kLower, "TTFT P95 (ms)"},
      {"ttft_p99_ms", Better::kLower, "TTFT P99 (ms)"},
      {"ttfv_p50_ms", Better::kLower, "TTFV P50 (ms): first visible token"},
      {"ttfv_p95_ms", Better::kLower, "TTFV P95 (ms)"},
      {"ttfv_chat_p50_ms", Better::kLower, "TTFV chat P50 (ms)"},
      {"ttfv_chat_p95_ms", Better::kLower, "TTFV chat P95 (ms)"},
      {"ttfv_reasoning_p50_ms", Better::kLower, "TTFV reasoning P50 (ms)"},
      {"ttfv_reasoning_p95_ms", Better::kLower, "TTFV reasoning P95 (ms)"},
      {"ttot_p50_ms", Better::kLower, "TTOT P50 (ms; one step after </think>)"},
      {"ttot_p95_ms", Better::kLower, "TTOT P95 (ms; one step after </think>)"},
      {"ttot_p99_ms", Better::kLower, "TTOT P99 (ms; one step after </think>)"},
      {"output_tpot_p50_ms", Better::kLower, "output TPOT P50 (ms, per request)"},
      {"output_tpot_p95_ms", Better::kLower, "output TPOT P95 (ms, per request)"},
      {"output_itl_p50_ms", Better::kLower, "output ITL P50 (ms)"},
      {"output_itl_p95_ms", Better::kLower, "output ITL P95 (ms)"},
      {"output_itl_p99_ms", Better::kLower, "output ITL P99 (ms)"},
      {"output_itl_max_ms", Better::kLower, "output ITL max (ms)"},
      {"think_tpot_p50_ms", Better::kLower, "think TPOT P50 (ms)"},
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
  if (std::isnan(d) || std::fabs(d) < kFlatPct) return "FLAT";
  const bool improved = better == Better::kLower ? d < 0 : d > 0;
  const bool big = std::fabs(d) >= kWinPct;
  if (improved) return big ? "WIN" : "win";
  return big ? "LOSS" : "loss";
}

std::vector<TargetCheck> check_targets(const std::vector<ReplayResult>& results) {
  std::vector<TargetCheck> out;
  const ReplayResult* fcfs = find(results, PolicyKind::kVllmFcfs);
  const ReplayResult* mer = find(results, PolicyKind::kMeridian);
  const ReplayResult* nof = find(results, PolicyKind::kMeridianNoForcing);
  auto vs_fcfs = [&](std::string name, std::string_view metric, double goal, const ReplayResult* cand) {
    TargetCheck t{std::move(name), fmt::format("<= {:+.0f}%", goal), 0, false,
                  fcfs != nullptr && cand != nullptr};
    if (t.available) {
      t.value = delta_pct(cand->metric(metric), fcfs->metric(metric));
      t.met = t.value <= goal;
    }
    out.push_back(t);
  };
  vs_fcfs("ttot_p95_vs_vllm_fcfs", "ttot_p95_ms", -60, mer);
  vs_fcfs("output_itl_p99_vs_vllm_fcfs", "output_itl_p99_ms", -50, mer);
  {
    // Scheduling cost to reasoning: think tokens per second of the no-forcing
    // run (same think work as vllm-fcfs) against vllm-fcfs.
    TargetCheck t{"think_throughput_cost_vs_vllm_fcfs", ">= -5%", 0, false,
                  fcfs != nullptr && nof != nullptr};
    if (t.available) {
      t.value = delta_pct(nof->metric("think_throughput_tokens_per_s"),
                          fcfs->metric("think_throughput_tokens_per_s"));
      t.met = t.value >= -5;
    }
    out.push_back(t);
  }
  {
    TargetCheck t{"output_critical_eviction_events", "== 0", 0, false, mer != nullptr};
    if (t.available) {
      t.value = mer->metric("output_critical_eviction_events");
      t.met = t.value == 0;
    }
    out.push_back(t);
  }
  {
    TargetCheck t{"think_tokens_saved_by_forcing", ">= 15%", 0, false, mer != nullptr && nof != nullptr};
    if (t.available) {
      t.value = -delta_pct(mer->metric("think_tokens_total"), nof->metric("think_tokens_total"));
      t.met = t.value >= 15;
    }
    out.push_back(t);
  }
  {
    TargetCheck t{"forced_before_answer", "<= 1%", 0, false, mer != nullptr};
    if (t.available) {
      t.value = mer->metric("forced_before_answer_pct");
      t.met = t.value <= 1;
    }
    out.push_back(t);
  }
  return out;
}

std::string policy_report_json(const ReplayResult& result, const ReportContext& context) {
  ordered_json j;
  j["schema_version"] = 1;
  j["policy"] = to_string(result.policy);
  j["context"] = context_json(context);
  ordered_json metrics;
  for (const auto& [k, v] : result.metrics) metrics[k] = finite(v);
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

std::string ab_report_json(const std::vector<ReplayResult>& results, const ReportContext& context) {
  ordered_json j;
  j["schema_version"] = 1;
  j["context"] = context_json(context);
  ordered_json runs;
  for (const ReplayResult& r : results) {
    ordered_json m;
    for (const auto& [k, v] : r.metrics) m[k] = finite(v);
    runs[std::string(to_string(r.policy))] = m;
  }
  j["runs"] = runs;
  ordered_json deltas;
  for (const ReplayResult& base : results) {
    if (base.policy == PolicyKind::kMeridian) continue;
    ordered_json per;
    for (const ReplayResult& cand : results) {
      if (cand.policy == base.policy) continue;
      ordered_json m;
      for (const MetricInfo& info : metric_catalog()) {
        if (info.better == Better::kNeither) continue;
        const double d = delta_pct(cand.metric(info.name), base.metric(info.name));
        m[std::string(info.name)] = {{"delta_pct", std::isfinite(d) ? json(d) : json(nullptr)},
                                     {"flag", delta_flag(d, info.better)}};
      }
      per[std::string(to_string(cand.policy))] = m;
    }
    deltas[std::string(to_string(base.policy))] = per;
  }
  j["deltas"] = deltas;
  ordered_json targets = ordered_json::array();
  for (const TargetCheck& t : check_targets(results)) {
    targets.push_back({{"name", t.name},
                       {"goal", t.goal},
                       {"value", t.available ? json(finite(t.value)) : json(nullptr)},
                       {"met", t.met},
                       {"available", t.available}});
  }
  j["targets"] = targets;
  return j.dump(1) + "\n";
}

std::string ab_report_markdown(const std::vector<ReplayResult>& results, const ReportContext& context) {
  std::string out = "# Meridian A/B replay\n\n";
  out += fmt::format("Workload `{}`: {} requests, arrival rate {} /s, reasoning ratio {}, seed {}.  \n",
                     context.workload, context.requests, context.params.workload.arrival_rate,
                     context.params.workload.reasoning_ratio, context.seed);
  out +=
      "Simulated: a roofline model of Qwen3-8B-class bf16 on one H100 (docs/benchmarks.md); not a "
      "measurement.\n\n";
  const ReplayResult* meridian = find(results, PolicyKind::kMeridian);
  std::vector<const ReplayResult*> baselines;
  for (const ReplayResult& r : results) {
    if (meridian != nullptr && r.policy != PolicyKind::kMeridian &&
        (r.policy == PolicyKind::kVllmFcfs || r.policy == PolicyKind::kStaticBudget ||
         r.policy == PolicyKind::kVllmPriority)) {
      baselines.push_back(&r);
    }
  }
  out += "| metric |";
  for (const ReplayResult& r : results) out += fmt::format(" {} |", to_string(r.policy));
  for (const ReplayResult* b : baselines) out += fmt::format(" meridian Δ% vs {} |", to_string(b->policy));
  out += "\n|---|";
  for (std::size_t i = 0; i < results.size() + baselines.size(); ++i) out += "---:|";
  out += "\n";
  for (const MetricInfo& info : metric_catalog()) {
    out += fmt::format("| {} |", info.label);
    for (const ReplayResult& r : results) out += fmt::format(" {} |", fmt_value(r.metric(info.name)));
    for (const ReplayResult* b : baselines) {
      if (info.better == Better::kNeither) {
        out += " |";
        continue;
      }
      const double d = delta_pct(meridian->metric(info.name), b->metric(info.name));
      if (std::isfinite(d)) {
        out += fmt::format(" {:+.1f}% {} |", d, delta_flag(d, info.better));
      } else {
        out += fmt::format(" n/a {} |", delta_flag(d, info.better));
      }
    }
    out += "\n";
  }
  const auto targets = check_targets(results);
  out += "\n## SPEC §5 targets\n\n| target | goal | measured | met |\n|---|---|---:|---|\n";
  for (const TargetCheck& t : targets) {
    if (!t.available) {
      out += fmt::format("| {} | {} | (runs missing) | - |\n", t.name, t.goal);
      continue;
    }
    const bool pct = t.name != "output_critical_eviction_events";
    out += fmt::format("| {} | {} | {}{} | {} |\n", t.name, t.goal,
                       pct ? fmt::format("{:+.1f}", t.value) : fmt_value(t.value), pct ? "%" : "",
                       t.met ? "yes" : "**no**");
  }
  out += fmt::format("\nFlags: WIN/LOSS at >= {:.0f}% change, win/loss at >= {:.0f}%, FLAT below.\n", kWinPct,
                     kFlatPct);
  return out;
}

}  // namespace meridian::sim
