// TTFT triage (ADR-0028); see ttft_triage.h.
#include "scheduler/ttft_triage.h"

#include <algorithm>

namespace meridian::sched_detail {

void TtftTriage::push(double cost_ms, std::size_t index) {
  kept_.emplace_back(cost_ms, index);
  std::push_heap(kept_.begin(), kept_.end());
}

std::pair<double, std::size_t> TtftTriage::pop_longest() {
  std::pop_heap(kept_.begin(), kept_.end());
  const std::pair<double, std::size_t> longest = kept_.back();
  kept_.pop_back();
  return longest;
}

}  // namespace meridian::sched_detail
