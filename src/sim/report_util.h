// Internal: helpers shared by the replay's report writers.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "meridian/replay.h"
#include "meridian/replay_study.h"

namespace meridian::sim::detail {

inline constexpr double kWinPct = 20;
inline constexpr double kFlatPct = 2;

/// Finite numbers only: JSON has no inf/NaN.
inline double finite(double v) { return std::isfinite(v) ? v : 0.0; }

// JSON has no inf/NaN: a value that is not finite (a relative change from 0) is null.
inline nlohmann::ordered_json number(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

/// A per-seed statistic: {"mean", "ci95": [low, high], "per_seed": [...]}, non-finite values as null.
inline nlohmann::ordered_json stat_json(const SeedStat& s) {
  nlohmann::ordered_json per = nlohmann::ordered_json::array();
  for (double v : s.per_seed) per.push_back(number(v));
  return {{"mean", number(s.mean)}, {"ci95", {number(s.ci_low), number(s.ci_high)}}, {"per_seed", per}};
}

inline nlohmann::ordered_json context_json(const ReportContext& c) {
  nlohmann::ordered_json j;
  j["seed"] = c.seed;
  j["seeds"] = c.seeds.empty() ? std::vector<std::uint64_t>{c.seed} : c.seeds;
  j["workload"] = c.workload;
  j["requests"] = c.requests;
  j["arrival_rate"] = c.params.workload.arrival_rate;
  j["arrival_process"] = c.params.workload.arrival_process;
  j["reasoning_ratio"] = c.params.workload.reasoning_ratio;
  j["duration_s"] = c.params.workload.duration_s;
  j["slo"] = {{"ttft_ms", c.params.slo.ttft_ms},
              {"ttfv_ms", c.params.slo.ttfv_ms},
              {"output_tpot_ms", c.params.slo.output_tpot_ms},
              {"think_tpot_ms", c.params.slo.think_tpot_ms},
              {"attainment_pct", c.params.slo.attainment_pct}};
  j["command"] = c.command;
  if (!c.vllm_best.empty()) j["vllm_best"] = c.vllm_best;
  j["cost_model"] = "roofline: Qwen3-8B-class bf16 on one H100 SXM unless overridden (docs/replay.md)";
  return j;
}

/// The ruler a goodput was judged by, as goodput.json and slo-grid.json state it.
inline nlohmann::ordered_json ruler_json(Ruler ruler) {
  const SustainabilityRule rule;
  nlohmann::ordered_json j;
  j["name"] = to_string(ruler);
  if (ruler == Ruler::kPooledWindow) {
    j["rule"] = "retired: pooled attainment >= target over the drained window; nothing else";
    return j;
  }
  j["rule"] = {"every request that arrived completes (none aborted, turned away or unfinished)",
               "each class (chat, reasoning) meets the attainment target on its own",
               "requests arriving in the last quarter of the window meet it per class, within binomial noise",
               "conversations in progress and the tokens they have still to generate, each over the last "
               "quarter of the window <= over its second quarter + z x its noise (sqrt of the count; sqrt of "
               "the sum of squared tokens)"};
  j["warmup_share"] = rule.warmup_share;
  j["late_share"] = rule.late_share;
  j["backlog_band_share"] = rule.backlog_band_share;
  j["backlog_noise_z"] = rule.backlog_noise_z;
  j["late_noise_z"] = rule.late_noise_z;
  return j;
}

/// One policy's goodput, bound and verdicts as goodput.json and slo-grid.json give them.
inline nlohmann::ordered_json policy_goodput_json(const PolicyGoodput& p,
                                                  const std::vector<std::uint64_t>& seeds, bool with_points) {
  nlohmann::ordered_json e;
  e["goodput_rps"] = finite(p.goodput_rps.mean);
  e["ci95"] = {finite(p.goodput_rps.ci_low), finite(p.goodput_rps.ci_high)};
  e["per_seed"] = p.goodput_rps.per_seed;
  e["at_least"] = p.at_least;
  e["upper_bound_rps"] = stat_json(p.upper_bound_rps);
  e["fraction_of_bound"] = stat_json(p.fraction_of_bound);
  nlohmann::ordered_json bounds = nlohmann::ordered_json::array();
  for (const CapacityBound& b : p.bounds) {
    bounds.push_back({{"rate", number(b.rate)},
                      {"step_ms", number(b.step_ms)},
                      {"binding", b.binding},
                      {"kv_used_share", number(b.kv_used_share)}});
  }
  e["bounds"] = bounds;
  e["above_bound"] = p.above_bound();
  // What the run at each seed's goodput looked like: per class, pooled, and its backlog.
  nlohmann::ordered_json at = nlohmann::ordered_json::array();
  for (std::size_t s = 0; s < p.points.size(); ++s) {
    nlohmann::ordered_json a = nullptr;
    if (const AttainmentPoint* pt = p.at_goodput(s)) {
      a = {{"rate", pt->rate},
           {"chat_pct", pt->chat_pct},
           {"reasoning_pct", pt->reasoning_pct},
           {"pooled_pct", pt->attainment_pct},
           {"backlog_mid", pt->backlog_mid},
           {"backlog_end", pt->backlog_end},
           {"backlog_work_mid", pt->backlog_work_mid},
           {"backlog_work_end", pt->backlog_work_end}};
    }
    at.push_back(a);
  }
  e["at_goodput"] = at;
  if (!with_points) return e;
  nlohmann::ordered_json points = nlohmann::ordered_json::array();
  for (std::size_t s = 0; s < p.points.size(); ++s) {
    for (const AttainmentPoint& a : p.points[s]) {
      points.push_back({{"seed", s < seeds.size() ? seeds[s] : 0},
                        {"rate", a.rate},
                        {"meets", a.meets},
                        {"reason", to_string(a.reason)},
                        {"sustainable", a.sustainable},
                        {"attainment_pct", a.attainment_pct},
                        {"chat_pct", a.chat_pct},
                        {"reasoning_pct", a.reasoning_pct},
                        {"backlog_mid", a.backlog_mid},
                        {"backlog_end", a.backlog_end},
                        {"backlog_work_mid", a.backlog_work_mid},
                        {"backlog_work_end", a.backlog_work_end},
                        {"stopped_early", a.stopped_early},
                        {"scan", a.scan}});
    }
  }
  e["points"] = points;
  return e;
}

/// A number for a Markdown table: no more digits than it deserves.
inline std::string fmt_value(double v) {
  if (v == 0) return "0";
  if (std::fabs(v) >= 1000) return fmt::format("{:.0f}", v);
  if (std::fabs(v) >= 10) return fmt::format("{:.1f}", v);
  return fmt::format("{:.3g}", v);
}

}  // namespace meridian::sim::detail
