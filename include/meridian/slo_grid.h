// The SLO grid study (docs/replay.md#the-slo-grid): every policy's goodput
// under many SLO sets, so a scheduling win is shown at the SLOs operators
// run, not only at the default set.
//
// Thread-safety: the functions are reentrant; results are plain values.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "meridian/replay_study.h"

namespace meridian::sim {

/// One SLO set of the grid, with a short label ("ttft 0.5s / answer 15ms / think 40ms").
struct SloSet {
  std::string label;
  SloParams slo;
};

/// TTFT {500, 2000} ms x answer TPOT {15, 40} ms x think TPOT {40, 120} ms,
/// then `base` (the default set) and `base` with ttfv_ms = 60,000, each with
/// base's attainment target; then MLPerf Inference's DeepSeek-R1 sets by name,
/// at their 99th percentile: "mlperf deepseek-r1 server" (TTFT 2 s, TPOT 80 ms)
/// and "mlperf deepseek-r1 interactive" (TTFT 1.5 s, TPOT 15 ms), TPOT bounding
/// answer and reasoning tokens alike. 12 sets, in that order.
[[nodiscard]] std::vector<SloSet> slo_grid_sets(const SloParams& base);

struct SloGridResult {
  std::vector<SloSet> sets;
  std::vector<GoodputResult> goodput;  ///< one per set
  double wall_s = 0;
};

/// find_goodput() for every set (vllm-best searched anew per set: its best
/// setting can depend on the SLO). `on_set` is called before each set.
/// Throws ConfigError on bad parameters.
[[nodiscard]] SloGridResult run_slo_grid(const std::vector<PolicyKind>& policies, const StudyOptions& options,
                                         const std::vector<SloSet>& sets,
                                         const std::function<void(std::size_t set)>& on_set = {},
                                         const GoodputOptions& search = {});

/// The verdicts the issue asks of the grid, per set: meridian-no-forcing at
/// least 1.0x every baseline that ran (vllm-fcfs, vllm-best, pascal; "win"
/// when the paired interval is above 1.0), meridian at least 1.3x vllm-best.
struct SloGridTarget {
  std::string set;
  std::string candidate;
  std::string baseline;
  double goal = 1.0;
  SeedStat ratio;
  /// The baseline's goodput is 0 on every seed (no rate meets the
  /// attainment target): the ratio is undefined, neither met nor missed.
  bool baseline_zero = false;
  double candidate_goodput = 0;  ///< its mean, shown when baseline_zero
  [[nodiscard]] bool met() const noexcept { return !baseline_zero && ratio.mean >= goal; }
  [[nodiscard]] bool win() const noexcept { return !baseline_zero && ratio.ci_low > goal; }
};
[[nodiscard]] std::vector<SloGridTarget> slo_grid_targets(const SloGridResult& grid);

/// slo-grid.json: per set its SLO, each policy's goodput (mean, interval, per
/// seed), vllm-best's setting, every policy's ratio to vllm-best, and the targets.
[[nodiscard]] std::string slo_grid_json(const SloGridResult& grid, const ReportContext& context);
/// slo-grid.md: the same as tables.
[[nodiscard]] std::string slo_grid_markdown(const SloGridResult& grid, const ReportContext& context);

}  // namespace meridian::sim
