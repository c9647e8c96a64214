// Internal: the replay engine's disaggregated mode (docs/replay.md,
// "Disaggregated mode: when offload pays off"). One FIFO fabric link carries
// three kinds of transfer:
//   - ExitThink pushes: a request's reasoning blocks, batched across requests
//     until offload_threshold_blocks; they stay ThinkActive (held locally)
//     until the push completes, then are demoted to ThinkComplete, which the
//     block manager (fabric_offload) may then reclaim without a copy;
//   - preemption pushes (ReclaimMode::kOffload): the victim's blocks, freed
//     at once by the scheduler, so the step that reuses them waits for the push;
//   - pulls: a resumed offload victim's whole context comes back before the
//     step that decodes it starts.
// A push that finds max_inflight_batches pushes still on the link falls back:
// ExitThink blocks stay local (as without a fabric), and a preemption victim
// is recomputed when it resumes (its context costed as prefill in that step).
//
// Thread-safety: not thread-safe; owned by one engine run. Ownership: plain values.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "meridian/sim_cost_model.h"
#include "meridian/types.h"

namespace meridian::sim::detail {

class DisaggLink {
 public:
  /// `requests`: the workload's size (ids 1..requests).
  DisaggLink(const DisaggSimParams& params, std::uint64_t block_bytes, std::uint32_t block_tokens,
             std::size_t requests);

  /// ExitThink of `id`, which holds `think_blocks` ThinkActive blocks: queued,
  /// and pushed with the others once offload_threshold_blocks are queued. A
  /// batch that falls back stays ThinkActive (local) until its requests end.
  void exit_think(RequestId id, std::uint32_t think_blocks, std::int64_t now_ns);
  /// Pushes that completed by `now_ns`: `demote` is called for each request
  /// whose reasoning blocks are now remote.
  void complete_until(std::int64_t now_ns, const std::function<void(RequestId)>& demote);
  /// When the next push completes, if one is on the link.
  [[nodiscard]] std::optional<std::int64_t> next_completion() const;

  /// A running victim preempted by offload with `blocks` blocks: the time its
  /// blocks are out (the step waits for it), or nullopt when it fell back to
  /// recompute (nothing sent).
  std::optional<std::int64_t> preempt(RequestId id, std::uint32_t blocks, std::int64_t now_ns);

  enum class Resume : std::uint8_t {
    kNotOffloaded = 0,  ///< not an offload victim: a swap-in as without the mode
    kPull = 1,          ///< its KV comes back over the link; `ready_ns` says when
    kRecompute = 2,     ///< it fell back: the context is recomputed in the step
  };
  /// A swap-in of `id` with `context_tokens` of KV, scheduled at `now_ns`.
  Resume resume(RequestId id, std::uint32_t context_tokens, std::int64_t now_ns, std::int64_t& ready_ns);

  /// The request ended (finished or aborted): its queued blocks are dropped.
  void forget(RequestId id);

  /// The step waited `ns` for the link (a preemption push or a pull).
  void add_wait(std::int64_t ns) { wait_ns_ += ns; }

  /// The mode's report keys, in order (disagg_*).
  [[nodiscard]] std::vector<std::pair<std::string_view, double>> metrics(double makespan_s) const;

  [[nodiscard]] const FabricLinkModel& model() const noexcept { return model_; }

 private:
  enum class State : std::uint8_t { kNone, kQueued, kPushed, kOffloaded, kRecompute };
  struct Batch {
    std::int64_t done_ns = 0;
    std::vector<RequestId> requests;  ///< ExitThink pushes: whose blocks to demote
  };

  /// Puts `blocks` on the link at `now_ns`; returns when they arrive.
  std::int64_t transfer(std::uint64_t blocks, std::int64_t now_ns);
  [[nodiscard]] std::size_t in_flight(std::int64_t now_ns) const;

  FabricLinkModel model_;
  std::uint32_t block_tokens_;
  std::vector<State> state_;                                 // by request id
  std::vector<std::pair<RequestId, std::uint32_t>> queued_;  // ExitThink blocks awaiting a batch
  std::uint64_t queued_blocks_ = 0;
  std::deque<Batch> pushes_;  // FIFO link: in completion order
  std::int64_t link_free_ns_ = 0;
  std::int64_t busy_ns_ = 0;
  std::int64_t wait_ns_ = 0;
  std::uint64_t offloaded_blocks_ = 0;
  std::uint64_t exit_think_batches_ = 0;
  std::uint64_t preemption_offloads_ = 0;
  std::uint64_t fallbacks_ = 0;
  std::uint64_t fallback_blocks_ = 0;
  std::uint64_t pulls_ = 0;
  std::uint64_t pull_blocks_ = 0;
  std::uint64_t transfer_bytes_ = 0;
};

}  // namespace meridian::sim::detail
