// Engine set-up helpers of the replay (sim/engine_setup.h), kept apart so
// engine.cpp holds the loop itself.
#include "sim/engine_setup.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "meridian/error.h"

namespace meridian::sim::detail {

RouterLimits router_limits(PolicyKind policy, const ReplayOptions& o) {
  RouterLimits limits = RouterLimits::from(o.config.scheduler);
  limits.reap_idle_after = std::chrono::nanoseconds::max();  // the engine ends every request itself
  switch (policy) {
    case PolicyKind::kVllmFcfs:
    case PolicyKind::kVllmFcfsTuned:
    case PolicyKind::kVllmPriority:
    case PolicyKind::kVllmBest:
    case PolicyKind::kPascal:
    case PolicyKind::kAdversaryHold:
    case PolicyKind::kAdversaryAbort:
      limits.max_think_tokens = std::numeric_limits<std::uint64_t>::max();  // vLLM: no think cap
      break;
    case PolicyKind::kStaticBudget:
      limits.min_think_tokens = 0;
      limits.max_think_tokens = o.params.engine.thinking_token_budget;
      break;
    case PolicyKind::kMeridianNoForcing:
    case PolicyKind::kMeridian: break;
  }
  return limits;
}

TokenId first_id(const std::vector<std::uint32_t>& ids, std::string_view field, std::string_view model) {
  if (ids.empty()) {
    throw ConfigError(
        {{fmt::format("model.{}.{}", model, field),
          fmt::format("model.{}.{} is empty: the replay needs token-id boundaries", model, field), "", 0,
          0}});
  }
  return ids.front();
}

// What the engine's arithmetic relies on: ids 1..N in order, follow-ups
// after an earlier turn, sizes >= 1, times that convert to nanoseconds.
void check_request(const RequestSpec& r, RequestId expected_id) {
  if (r.id != expected_id) throw InvalidArgument(fmt::format("workload request {} is out of order", r.id));
  if (r.after >= r.id) {
    throw InvalidArgument(
        fmt::format("workload request {}: after ({}) must name an earlier request", r.id, r.after));
  }
  if (r.prompt_tokens == 0 || r.answer_tokens == 0) {
    throw InvalidArgument(
        fmt::format("workload request {}: prompt_tokens and answer_tokens must be >= 1", r.id));
  }
  const double t = r.after == 0 ? r.arrival_s : r.delay_s;
  if (!(t >= 0 && t <= kMaxEventTimeS)) {
    throw InvalidArgument(fmt::format("workload request {}: {} must be in [0, {:g}] s; got {:g}", r.id,
                                      r.after == 0 ? "arrival_s" : "delay_s", kMaxEventTimeS, t));
  }
}

std::vector<char> adversary_targets(const Workload& workload, double share) {
  std::vector<char> targets(workload.requests.size(), 0);
  std::vector<const RequestSpec*> reasoning;
  for (const RequestSpec& r : workload.requests) {
    if (r.reasoning()) reasoning.push_back(&r);
  }
  if (reasoning.empty() || share <= 0) return targets;
  const auto count = std::min<std::size_t>(
      reasoning.size(),
      std::max<std::size_t>(
          1, static_cast<std::size_t>(std::ceil(share * static_cast<double>(reasoning.size())))));
  std::partial_sort(reasoning.begin(), reasoning.begin() + static_cast<std::ptrdiff_t>(count),
                    reasoning.end(), [](const RequestSpec* a, const RequestSpec* b) {
                      return a->think_tokens != b->think_tokens ? a->think_tokens > b->think_tokens
                                                                : a->id < b->id;
                    });
  for (std::size_t i = 0; i < count; ++i) targets[reasoning[i]->id - 1] = 1;
  return targets;
}

}  // namespace meridian::sim::detail
