// Internal: helpers shared by the replay's report writers.
#pragma once

#include <cmath>
#include <string>

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

/// A number for a Markdown table: no more digits than it deserves.
inline std::string fmt_value(double v) {
  if (v == 0) return "0";
  if (std::fabs(v) >= 1000) return fmt::format("{:.0f}", v);
  if (std::fabs(v) >= 10) return fmt::format("{:.1f}", v);
  return fmt::format("{:.3g}", v);
}

}  // namespace meridian::sim::detail
