#include "meridian/request_clock.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <absl/container/flat_hash_map.h>

#include "meridian/config.h"
#include "meridian/error.h"
#include "meridian/metrics.h"

namespace meridian::telemetry {
namespace {

// One request's timestamps (seconds, wall clock; -1: not yet).
struct Times {
  double arrival = 0;
  double first_token = -1;
  double think_end = -1;
  double first_visible = -1;
  double last_visible = -1;
  std::uint64_t visible = 0;
  bool thinking = false;
};

void check_bound(double value, const char* field) {
  if (!std::isfinite(value) || value <= 0) {
    throw InvalidArgument(std::string("RequestClock: slo.") + field + " must be finite and > 0, got " +
                          std::to_string(value));
  }
}

}  // namespace

struct RequestClock::Impl {
  Impl(EngineMetrics& f, Slo s, std::span<const TokenId> starts)
      : feed(f), slo(s), think_starts(starts.begin(), starts.end()) {}
  EngineMetrics& feed;
  Slo slo;
  std::vector<TokenId> think_starts;  // a handful: a linear scan beats a hash
  absl::flat_hash_map<RequestId, Times> times;

  Times* find(RequestId id) noexcept {
    auto it = times.find(id);
    return it == times.end() ? nullptr : &it->second;
  }
};

RequestClock::RequestClock(EngineMetrics& feed, Slo slo, std::span<const TokenId> think_start_ids) {
  check_bound(slo.ttft_s, "ttft_s");
  check_bound(slo.output_tpot_s, "output_tpot_s");
  check_bound(slo.think_tpot_s, "think_tpot_s");
  if (slo.ttfv_s != 0) check_bound(slo.ttfv_s, "ttfv_s");
  impl_ = std::make_unique<Impl>(feed, slo, think_start_ids);
}

RequestClock::~RequestClock() = default;

RequestClock::Slo RequestClock::slo_of(const SchedulerConfig& scheduler) noexcept {
  constexpr double kMsToS = 1e-3;
  Slo slo;
  slo.ttft_s = scheduler.ttft_slo_ms * kMsToS;
  slo.output_tpot_s = scheduler.output_tpot_budget_ms * kMsToS;
  slo.think_tpot_s = scheduler.think_tpot_budget_ms * kMsToS;
  slo.ttfv_s = scheduler.ttfv_slo_ms > 0
                   ? std::max(scheduler.ttfv_slo_ms * kMsToS, std::numeric_limits<double>::min())
                   : 0.0;
  return slo;
}

void RequestClock::add(RequestId id, double arrival_s, bool thinking) {
  Times t;
  t.arrival = arrival_s;
  t.thinking = thinking;
  impl_->times.insert_or_assign(id, t);
}

void RequestClock::set_thinking(RequestId id, bool thinking) noexcept {
  if (Times* t = impl_->find(id)) t->thinking = thinking;
}

void RequestClock::think_ended(RequestId id, double now_s) noexcept {
  if (Times* t = impl_->find(id)) t->think_end = now_s;
}

void RequestClock::sampled(RequestId id, TokenId first, double now_s) noexcept {
  Times* t = impl_->find(id);
  if (t == nullptr) return;
  if (t->first_token < 0) t->first_token = now_s;
  if (t->thinking) return;
  const auto& starts = impl_->think_starts;
  if (std::find(starts.begin(), starts.end(), first) != starts.end()) return;
  if (t->first_visible < 0) {
    t->first_visible = now_s;
  } else {
    impl_->feed.record_output_itl(now_s - t->last_visible);
  }
  t->last_visible = now_s;
  ++t->visible;
}

void RequestClock::finish(RequestId id, bool completed, std::int64_t think_tokens, double now_s) {
  if (think_tokens < 0) {
    throw InvalidArgument("RequestClock.finish: think_tokens must be >= 0, got " +
                          std::to_string(think_tokens));
  }
  auto node = impl_->times.extract(id);
  if (node.empty()) return;
  const Times& t = node.mapped();
  const Slo& slo = impl_->slo;
  RequestTimes out;
  out.ttft_s = t.first_token >= 0 ? t.first_token - t.arrival : -1.0;
  out.ttfv_s = t.first_visible >= 0 ? t.first_visible - t.arrival : -1.0;
  out.ttot_s = t.first_visible >= 0 && t.think_end >= 0 ? t.first_visible - t.think_end : -1.0;
  out.e2e_s = completed ? now_s - t.arrival : -1.0;
  out.completed = completed;
  // The bounds of SloParams (replay.h), each checked where it applies.
  std::uint8_t missed = 0;
  if (!completed) missed |= kSloMissIncomplete;
  if (out.ttft_s < 0 ? completed : out.ttft_s > slo.ttft_s) missed |= kSloMissTtft;
  const bool reasoning = think_tokens > 0 || t.think_end >= 0;
  if (slo.ttfv_s > 0 && reasoning && (out.ttfv_s < 0 ? completed : out.ttfv_s > slo.ttfv_s)) {
    missed |= kSloMissTtfv;
  }
  if (t.think_end >= 0 && think_tokens > 1 && t.first_token >= 0 &&
      (t.think_end - t.first_token) / static_cast<double>(think_tokens - 1) > slo.think_tpot_s) {
    missed |= kSloMissThinkTpot;
  }
  if (t.visible > 1 &&
      (t.last_visible - t.first_visible) / static_cast<double>(t.visible - 1) > slo.output_tpot_s) {
    missed |= kSloMissOutputTpot;
  }
  out.slo_misses = missed;
  out.slo_met = missed == 0;
  impl_->feed.record_request(out);
}

std::size_t RequestClock::size() const noexcept { return impl_->times.size(); }

}  // namespace meridian::telemetry
