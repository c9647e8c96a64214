// The physical upper bound on goodput (docs/adr/0038, docs/replay.md#the-physical-bound):
// the highest arrival rate whose work the simulated GPU could serve at all, at
// step times the SLO allows, if the schedule were perfect. A relaxation of
// every schedule, derived from the roofline cost model alone:
//
//   - no queueing and perfect packing: every running request is in every step,
//     every step is equally long (S), and nothing is computed twice (no
//     recompute, no swap, no probe pass; a follow-up turn reads its transcript
//     from the prefix cache, held between turns for free);
//   - the GPU's time per second at rate L conversations/s and step time S:
//       U(L, S) = overhead/S + max(weight_read/S, L * tokens * t_token)
//               + max(L * kv_read * t_kv, L * pairs * t_pair)
//     (a sum of per-step maxima is at least the maximum of the sums);
//   - the KV it holds: every decode step holds its context for S, so
//       L * S * kv_token_steps <= KV capacity (tokens);
//   - S is at most the longest step the SLO lets a token wait
//     (max of the answer and think TPOT bounds).
// The bound is the highest L for which some S satisfies both. A policy whose
// goodput exceeds it is a bug in the ruler or in the bound (a test says so).
//
// Thread-safety: pure functions over plain values.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "meridian/replay.h"
#include "meridian/sim_cost_model.h"
#include "meridian/sim_workload.h"

namespace meridian::sim {

/// The work of one conversation, averaged over a workload's conversations, as a perfect schedule does it.
struct ConversationWork {
  double conversations = 0;   ///< first turns averaged over
  double prefill_tokens = 0;  ///< prompt tokens computed (a follow-up's transcript is cached)
  double decode_tokens = 0;   ///< tokens decoded (every generated token but the first of each request)
  double kv_tokens_read = 0;  ///< context tokens attention reads (prefill and decode)
  double attended_pairs = 0;  ///< query-key pairs attention computes
  /// Context held in KV summed over decode steps (KV occupancy = rate * step time * this).
  double kv_token_steps = 0;
  [[nodiscard]] double tokens() const noexcept { return prefill_tokens + decode_tokens; }
};

/// The work of `workload`'s conversations. `think_tokens`, when not empty,
/// holds the think tokens each request actually emitted (index i: request
/// i + 1), so a policy that forces `</think>` is charged its own work;
/// empty: every request thinks its natural length.
[[nodiscard]] ConversationWork conversation_work(const Workload& workload,
                                                 const std::vector<std::uint32_t>& think_tokens = {});

struct CapacityBound {
  double rate = 0;            ///< conversations/s
  double step_ms = 0;         ///< the step time it runs at
  double max_step_ms = 0;     ///< the longest step the SLO allows
  double gpu_busy_share = 0;  ///< U at that rate and step time (1 when the GPU binds)
  double kv_used_share = 0;   ///< KV occupancy / capacity there (1 when KV binds)
  std::string_view binding;   ///< "gpu" or "kv"
};

/// The bound for `work` on the cost model's GPU under `slo`.
/// Throws ConfigError on bad cost-model parameters.
[[nodiscard]] CapacityBound capacity_bound(const CostModelParams& cost, const SloParams& slo,
                                           const ConversationWork& work);

}  // namespace meridian::sim
