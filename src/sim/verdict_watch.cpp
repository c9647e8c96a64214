// VerdictWatch (sustainable_ruler.h): a run's verdict decided while it runs.
#include <algorithm>
#include <cmath>

#include "meridian/sustainable_ruler.h"

namespace meridian::sim {

VerdictWatch::VerdictWatch(const Workload& workload, const SloParams& slo, Ruler ruler,
                           const SustainabilityRule& rule)
    : ruler_(ruler) {
  const std::size_t n = workload.requests.size();
  start_.assign(n, 0);
  root_.assign(n, 0);
  class_.assign(n, 0);
  double window_end = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const RequestSpec& r = workload.requests[i];
    // Follow-ups name an earlier request (the engine checks it before a run starts).
    const bool first = r.after == 0 || r.after > i;
    start_[i] = first ? r.arrival_s : start_[r.after - 1];
    root_[i] = first ? i + 1 : root_[r.after - 1];
    if (r.after == 0) window_end = std::max(window_end, r.arrival_s);
  }
  std::uint64_t judged[2] = {};
  for (std::size_t i = 0; i < n; ++i) {
    const bool warmup = start_[i] < rule.warmup_share * window_end;
    class_[i] = warmup ? 2 : (workload.requests[i].reasoning() ? 1 : 0);
    if (!warmup) ++judged[class_[i]];
  }
  allowed_[0] = allowed_misses(judged[0], slo.attainment_pct);
  allowed_[1] = allowed_misses(judged[1], slo.attainment_pct);
  allowed_pooled_ = allowed_misses(n, slo.attainment_pct);
}

void VerdictWatch::missed(RequestId id) noexcept {
  ++pooled_misses_;
  if (id == 0 || id > class_.size() || class_[id - 1] > 1) return;
  ++misses_[class_[id - 1]];
}

std::optional<VerdictReason> VerdictWatch::decided() const noexcept {
  if (ruler_ == Ruler::kPooledWindow) {
    if (pooled_misses_ > allowed_pooled_) return VerdictReason::kPooledBelow;
    return std::nullopt;
  }
  if (dropped_ > 0) return VerdictReason::kIncomplete;
  if (misses_[0] > allowed_[0]) return VerdictReason::kChatBelow;
  if (misses_[1] > allowed_[1]) return VerdictReason::kReasoningBelow;
  return std::nullopt;
}

bool VerdictWatch::backlog_grew(const std::vector<RequestTimeline>& requests, double window_end_s) const {
  return ruler_ == Ruler::kSustainable && backlog_stats(requests, window_end_s).growing();
}

}  // namespace meridian::sim
