// The replay's per-run metrics from request timelines measured elsewhere: the
// engine-in-the-loop replay (`meridian engine-replay`, SPEC §3.12) runs vLLM's
// own scheduler on the simulator's clock and hands each request's times here,
// so both replays report the same metrics under the same definitions
// (docs/benchmarks.md#metrics) and the same SLO rule (meets_slo()).
//
// Thread-safety: pure functions over plain values.
#pragma once

#include <cstdint>
#include <vector>

#include "meridian/replay.h"

namespace meridian::sim {

/// One request's times on the simulated clock, in seconds (-1: did not happen).
struct RequestTimeline {
  bool reasoning = false;
  bool arrived = false;
  bool completed = false;  ///< every answer token, EOS included, was emitted
  double arrival_s = -1;
  /// When its conversation's first turn arrived (the ruler's warm-up and late
  /// sets go by it); -1: this request's own arrival.
  double conversation_arrival_s = -1;
  /// Its conversation: the id of the conversation's first turn (0: a conversation of its own).
  /// The ruler's backlog counts conversations, with the turns not yet sent as work to come.
  std::uint64_t conversation_id = 0;
  double first_token_s = -1;    ///< first generated token (think or visible)
  double first_visible_s = -1;  ///< first answer token
  double think_end_s = -1;      ///< the step that emitted </think>
  double last_token_s = -1;
  double finish_s = -1;
  std::uint32_t think_tokens = 0;          ///< think tokens emitted (</think> not counted)
  std::uint32_t answer_tokens = 0;         ///< visible tokens emitted, EOS included
  std::uint32_t natural_think_tokens = 0;  ///< the workload's think length
  /// The workload's answer length, EOS included (0: answer_tokens, what was emitted).
  std::uint32_t natural_answer_tokens = 0;
};

/// What the engine counted over the run (the metrics that are not per request).
struct RunTotals {
  std::uint64_t steps = 0;
  std::uint64_t prefill_tokens = 0;    ///< prompt tokens computed, recompute included
  std::uint64_t simulated_tokens = 0;  ///< every token computed
  std::uint64_t preemptions = 0;       ///< by recompute (vLLM's only mode)
  std::uint64_t preempted_answer_phase = 0;
  std::uint64_t prefix_lookup_blocks = 0;  ///< full prompt blocks looked up at first scheduling
  std::uint64_t prefix_hit_blocks = 0;
  std::uint64_t rejected = 0;
  std::uint64_t unfinished = 0;  ///< arrived, not finished when the run stopped
  double busy_s = 0;             ///< simulated time spent in steps
  double makespan_s = 0;         ///< last finish
  double arrival_window_end_s = 0;
  std::uint64_t arrival_window_tokens = 0;
  double wall_s = 0;
  bool stopped_early = false;
};

/// The outcome of one timeline under `slo` (RequestOutcome's fields, meets_slo()).
[[nodiscard]] RequestOutcome timeline_outcome(const RequestTimeline& t, const SloParams& slo);

/// Every metric of metric_catalog() that a timeline can give, in catalog order,
/// as run_replay() names them; the Meridian-only counters (forcing, KV tiers,
/// swaps, probe passes) are 0. `output_itl_ms` and `think_itl_ms` are the gaps
/// between consecutive visible (think) tokens of every request. The result's
/// verdict is the run judged by `ruler` (sustainable_ruler.h), its think_tokens
/// what each request emitted.
[[nodiscard]] ReplayResult summarize_timelines(const std::vector<RequestTimeline>& requests,
                                               std::vector<float> output_itl_ms,
                                               std::vector<float> think_itl_ms, const RunTotals& totals,
                                               const SloParams& slo, Ruler ruler = Ruler::kSustainable);

}  // namespace meridian::sim
