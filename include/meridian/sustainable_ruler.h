// The ruler a goodput is judged by (docs/adr/0038): a rate counts only if the
// server keeps up with it and no class of users is sacrificed.
//
// A run at one arrival rate meets the sustainable ruler when
//   1. every request that arrived completed (none aborted, turned away or
//      left unfinished: MLPerf's "every query completes");
//   2. each class (chat, reasoning) has at least the attainment target of its
//      requests within the SLO, judged apart (pooled attainment is reported
//      beside it, never judged), over the conversations that started after
//      the first quarter of the window (the warm-up: an empty server);
//   3. the requests of conversations that started in the last quarter of the
//      arrival window fare as the target demands, per class, within binomial
//      noise;
//   4. the work in the system over the last quarter of the window is no larger
//      than over its second quarter, within noise: the backlog does not grow.
//      Work is counted as conversations in progress and as the tokens they have
//      still to generate, turns not yet sent included.
// Goodput is the highest rate whose run meets it. The retired ruler (pooled
// attainment over a drained finite window, nothing else) stays selectable so
// the two can be compared; no figure of record uses it.
//
// One implementation for the simulator and the engine-in-the-loop replay: both
// hand their request timelines here.
//
// Thread-safety: pure functions over plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "meridian/replay.h"
#include "meridian/replay_timeline.h"
#include "meridian/run_verdict.h"
#include "meridian/sim_workload.h"
#include "meridian/types.h"

namespace meridian::sim {

/// Rule 4's statistic from request timelines (grouped by conversation_id; a
/// conversation with a turn not finished is in the system to the end). Only times
/// up to `window_end_s` matter, so a run can decide it the moment its arrivals stop.
[[nodiscard]] BacklogStats backlog_stats(const std::vector<RequestTimeline>& requests, double window_end_s,
                                         const SustainabilityRule& rule = {});

/// Judges one run from its request timelines (every request of the workload,
/// arrived or not), the end of its arrival window and the SLO.
[[nodiscard]] RunVerdict judge_run(const std::vector<RequestTimeline>& requests, double window_end_s,
                                   const SloParams& slo, Ruler ruler = Ruler::kSustainable,
                                   const SustainabilityRule& rule = {});

/// When `t`'s conversation started (what the warm-up and late sets go by):
/// conversation_arrival_s, else its own arrival; +inf for a request that never
/// arrived and names no conversation start.
[[nodiscard]] double conversation_start(const RequestTimeline& t) noexcept;

/// The most misses a class of `requests` may have and still meet `target_pct`
/// (rule 2): a run past it is decided, whatever the rest of it does.
[[nodiscard]] std::uint64_t allowed_misses(std::uint64_t requests, double target_pct) noexcept;

/// Decides, while a run goes on, when its verdict can no longer be "meets the
/// ruler": every rule it checks only gets worse as the run continues.
/// Not thread-safe; owned by one run (the simulator's engine, or the engine
/// replay's driver through the Python binding).
class VerdictWatch {
 public:
  VerdictWatch(const Workload& workload, const SloParams& slo, Ruler ruler,
               const SustainabilityRule& rule = {});
  /// A request missed its SLO (each request is reported at most once).
  void missed(RequestId id) noexcept;
  /// When request `id`'s conversation started (its first turn's arrival_s).
  [[nodiscard]] double conversation_start(RequestId id) const noexcept { return start_[id - 1]; }
  /// The id of request `id`'s conversation's first turn.
  [[nodiscard]] RequestId conversation_id(RequestId id) const noexcept { return root_[id - 1]; }
  /// A request was aborted or turned away: it will never complete.
  void dropped() noexcept { ++dropped_; }
  /// Past a class's (or, pooled, the run's) allowed misses, or a request dropped:
  /// the rule the run has already broken; nullopt while it may still meet the ruler.
  [[nodiscard]] std::optional<VerdictReason> decided() const noexcept;
  /// The sustainable ruler's backlog rule, once the first turns stopped arriving:
  /// true when the backlog grew (the run cannot meet the ruler). Only times up
  /// to `window_end_s` matter, so it is final then.
  [[nodiscard]] bool backlog_grew(const std::vector<RequestTimeline>& requests, double window_end_s) const;
  [[nodiscard]] Ruler ruler() const noexcept { return ruler_; }

 private:
  Ruler ruler_;
  std::vector<double> start_;        // per request: its conversation's first arrival
  std::vector<RequestId> root_;      // per request: its conversation's first turn
  std::vector<std::uint8_t> class_;  // per request: 0 chat, 1 reasoning, 2 warm-up (not judged)
  std::uint64_t allowed_[2] = {};    // chat, reasoning
  std::uint64_t allowed_pooled_ = 0;
  std::uint64_t misses_[2] = {};
  std::uint64_t pooled_misses_ = 0;
  std::uint64_t dropped_ = 0;
};

}  // namespace meridian::sim
