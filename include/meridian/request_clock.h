// Per-request wall-clock times an engine adapter keeps from arrival to
// release (the vLLM scheduler adapter, meridian.vllm): TTFT, TTFV, TTOT, the
// answer-token ITL and E2E, and the request's SLO verdict, recorded into an
// EngineMetrics feed. Kept in C++ so an engine step costs one native pass
// over its sampled tokens, not a Python loop (docs/benchmarks.md, adapter
// overhead).
//
// Definitions (as the replay's): TTFT = arrival to the first generated token;
// TTFV = arrival to the first visible token, one sampled while the request
// was answering (not thinking) and not a think start; TTOT = the end of the
// think block to the first visible token; E2E = arrival to release, for
// completed requests. SLO met: completed, TTFT <= slo.ttft_s, mean answer
// TPOT (first to last visible token) <= slo.output_tpot_s and mean think TPOT
// (first token to the end of thinking) <= slo.think_tpot_s.
//
// Thread-safety: none; one per engine loop (like EngineMetrics).
// Ownership: refers to an EngineMetrics it does not own, which must outlive it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "meridian/types.h"

namespace meridian {
struct SchedulerConfig;
}  // namespace meridian

namespace meridian::telemetry {

class EngineMetrics;

class RequestClock {
 public:
  /// The bounds of the SLO verdict, in seconds; each must be finite and > 0
  /// (meridian::InvalidArgument naming the field otherwise), except ttfv_s,
  /// which may be 0: no bound on a reasoning request's first answer token.
  struct Slo {
    double ttft_s = 1.0;
    double output_tpot_s = 0.02;
    double think_tpot_s = 0.08;
    double ttfv_s = 0;
  };
  /// The verdict's bounds an operator configured: [scheduler] ttft_slo_ms, output_tpot_budget_ms,
  /// think_tpot_budget_ms and ttfv_slo_ms, in seconds. The one derivation every adapter uses; a
  /// positive ttfv_slo_ms stays a bound however small.
  [[nodiscard]] static Slo slo_of(const SchedulerConfig& scheduler) noexcept;

  /// `think_start_ids`: tokens that open a think block; a sampled think start
  /// is never a visible token.
  RequestClock(EngineMetrics& feed, Slo slo, std::span<const TokenId> think_start_ids);
  ~RequestClock();
  RequestClock(const RequestClock&) = delete;
  RequestClock& operator=(const RequestClock&) = delete;

  /// A request arrived at `arrival_s` (wall clock, seconds); `thinking`: its
  /// prompt opened a think block. Adding a known id restarts its times.
  void add(RequestId id, double arrival_s, bool thinking);
  /// Its phase changed (the router's events): only answer tokens are visible.
  void set_thinking(RequestId id, bool thinking) noexcept;
  /// Its think block ended at `now_s` (TTOT and think TPOT count from here).
  void think_ended(RequestId id, double now_s) noexcept;
  /// One step sampled tokens for `id` at `now_s`, the first of them `first`
  /// (ITL is per step: a step's tokens arrive together). Unknown ids are ignored.
  void sampled(RequestId id, TokenId first, double now_s) noexcept;
  /// The request is released at `now_s`: records its times and verdict and
  /// forgets it. `think_tokens`: the tokens of its think block (0: none); a
  /// negative count is meridian::InvalidArgument (it would turn a think TPOT
  /// miss into a pass). Unknown ids are ignored.
  void finish(RequestId id, bool completed, std::int64_t think_tokens, double now_s);

  /// Requests it tracks.
  [[nodiscard]] std::size_t size() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meridian::telemetry
