// Internal: set-up helpers of the replay engine (engine.cpp): the router's
// limits per policy, the model's boundary token ids, and the checks a
// workload request must pass before the engine's arithmetic relies on it, and
// the requests the ruler's adversaries target.
//
// Thread-safety: free functions without state. Ownership: plain values.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "meridian/phase_router.h"
#include "meridian/replay.h"

namespace meridian::sim::detail {

/// The router's limits for `policy` (vLLM: no think cap; static-budget: its budget).
[[nodiscard]] RouterLimits router_limits(PolicyKind policy, const ReplayOptions& o);
/// The first id of `ids`; ConfigError naming "model.<model>.<field>" when empty.
[[nodiscard]] TokenId first_id(const std::vector<std::uint32_t>& ids, std::string_view field,
                               std::string_view model);
/// InvalidArgument unless `r` has id `expected_id`, follows an earlier request,
/// has sizes >= 1 and a time that converts to nanoseconds.
void check_request(const RequestSpec& r, RequestId expected_id);
/// The requests an adversary policy targets (index i: request i + 1): the
/// `share` of reasoning requests with the longest natural think lengths
/// (ties by id, the earlier first), at least one when share > 0.
[[nodiscard]] std::vector<char> adversary_targets(const Workload& workload, double share);

}  // namespace meridian::sim::detail
