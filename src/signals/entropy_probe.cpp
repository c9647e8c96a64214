#include "meridian/entropy_probe.h"

#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "meridian/error.h"

namespace meridian {

std::string_view to_string(EatSource source) noexcept {
  return source == EatSource::kProbePass ? "probe_pass" : "in_step_proxy";
}

EatSample EatSample::from_probe_pass(const RowStats& probe_row) noexcept {
  return {static_cast<double>(probe_row.entropy), EatSource::kProbePass};
}

EatSample EatSample::in_step_proxy(const RowStats& step_row) noexcept {
  return {static_cast<double>(step_row.entropy), EatSource::kInStepProxy};
}

void EatTracker::add(double x) noexcept {
  last_ = x;
  if (samples_++ == 0) {
    ema_ = x;  // seeded from the first sample: no start-up bias toward 0
    variance_ = 0;
    return;
  }
  ema_ = alpha_ * x + (1 - alpha_) * ema_;
  const double deviation = x - ema_;
  variance_ = alpha_ * deviation * deviation + (1 - alpha_) * variance_;
}

RpdiTracker::RpdiTracker(double transition_entropy_threshold, std::uint32_t window_tokens)
    : threshold_(transition_entropy_threshold),
      window_(window_tokens == 0 ? 1 : window_tokens),
      ring_((window_ + 63) / 64, 0) {}

void RpdiTracker::add(double token_entropy) noexcept {
  const bool transition = token_entropy > threshold_;
  const std::uint64_t bit = std::uint64_t{1} << (position_ % 64);
  std::uint64_t& word = ring_[position_ / 64];
  if (filled_ == window_ && (word & bit) != 0) --window_transitions_;  // the oldest leaves the window
  if (transition) {
    word |= bit;
    ++window_transitions_;
    ++transitions_;
  } else {
    word &= ~bit;
  }
  if (filled_ < window_) ++filled_;
  position_ = position_ + 1 == window_ ? 0 : position_ + 1;
  ++samples_;
}

double RpdiTracker::local_rate() const noexcept {
  return filled_ == 0 ? 0.0 : static_cast<double>(window_transitions_) / filled_;
}

double RpdiTracker::global_rate() const noexcept {
  return samples_ == 0 ? 0.0 : static_cast<double>(transitions_) / static_cast<double>(samples_);
}

double RpdiTracker::ratio() const noexcept {
  const double global = global_rate();
  return global == 0.0 ? 0.0 : local_rate() / global;
}

ProbeSettings ProbeSettings::from(const MeridianConfig& config) {
  validate_or_throw(config.entropy);
  validate_or_throw(config.scheduler);
  const EntropyConfig& e = config.entropy;
  ProbeSettings s;
  s.enabled = e.enabled;
  s.ema_alpha = e.ema_alpha;
  s.eat_ema_variance_threshold = e.eat_ema_variance_threshold;
  s.eat_min_samples = e.eat_min_samples;
  s.eat_probe_interval_tokens = e.eat_probe_interval_tokens;
  s.transition_entropy_threshold = e.transition_entropy_threshold;
  s.rpdi_window_tokens = e.rpdi_window_tokens;
  s.rpdi_min_samples = e.rpdi_min_samples;
  s.rpdi_threshold = e.rpdi_threshold;
  s.min_think_tokens = config.scheduler.min_think_tokens;
  s.max_think_tokens = config.scheduler.max_think_tokens;
  return s;
}

namespace {

// A NaN alpha or threshold would silently disable a signal; say so instead.
const ProbeSettings& checked(const ProbeSettings& s) {
  if (!(s.ema_alpha > 0.0 && s.ema_alpha <= 1.0)) {
    throw InvalidArgument(fmt::format("ProbeSettings.ema_alpha must be in (0, 1]; got {}", s.ema_alpha));
  }
  const std::pair<const char*, double> thresholds[] = {
      {"eat_ema_variance_threshold", s.eat_ema_variance_threshold},
      {"transition_entropy_threshold", s.transition_entropy_threshold},
      {"rpdi_threshold", s.rpdi_threshold},
  };
  for (const auto& [name, value] : thresholds) {
    if (!std::isfinite(value)) {
      throw InvalidArgument(fmt::format("ProbeSettings.{} must be finite; got {}", name, value));
    }
  }
  return s;
}

}  // namespace

EntropyProbe::EntropyProbe(const ProbeSettings& settings)
    : settings_(checked(settings)),
      eat_(settings.ema_alpha),
      rpdi_(settings.transition_entropy_threshold, settings.rpdi_window_tokens) {}

bool EntropyProbe::eat_due(std::uint64_t think_tokens) const noexcept {
  return settings_.enabled && think_tokens > 0 && settings_.eat_probe_interval_tokens > 0 &&
         think_tokens % settings_.eat_probe_interval_tokens == 0;
}

std::optional<ForceReason> EntropyProbe::due_reason(std::uint64_t think_tokens) const noexcept {
  if (think_tokens >= settings_.max_think_tokens) return ForceReason::kHardCap;
  if (!settings_.enabled || think_tokens < settings_.min_think_tokens) return std::nullopt;
  if (eat_.samples() >= settings_.eat_min_samples && eat_.variance() < settings_.eat_ema_variance_threshold) {
    return ForceReason::kConverged;
  }
  if (rpdi_.samples() >= settings_.rpdi_min_samples && rpdi_.ratio() > settings_.rpdi_threshold) {
    return ForceReason::kOverthinking;
  }
  return std::nullopt;
}

EntropySignal EntropyProbe::observe(const ThinkTokenObservation& token) {
  if (token.think_tokens < last_think_tokens_) {
    throw InvalidArgument(fmt::format("entropy probe: think_tokens went back from {} to {}",
                                      last_think_tokens_, token.think_tokens));
  }
  last_think_tokens_ = token.think_tokens;
  EntropySignal signal;
  signal.think_tokens = token.think_tokens;
  if (settings_.enabled) {
    if (token.token_entropy) {
      if (std::isfinite(*token.token_entropy)) {
        rpdi_.add(*token.token_entropy);
        ++counters_.token_samples;
        signal.token_entropy = token.token_entropy;
      } else {
        ++counters_.invalid_samples;
      }
    }
    if (token.eat) {
      if (source_ && *source_ != token.eat->source) {
        throw InvalidArgument(
            fmt::format("entropy probe: EAT source changed from {} to {} at think token {}; one request "
                        "uses one source",
                        to_string(*source_), to_string(token.eat->source), token.think_tokens));
      }
      if (std::isfinite(token.eat->value)) {
        source_ = token.eat->source;
        eat_.add(token.eat->value);
        ++counters_.eat_samples;
        signal.eat = token.eat->value;
      } else {
        ++counters_.invalid_samples;
      }
    }
  }
  signal.eat_ema = eat_.ema();
  signal.eat_ema_variance = eat_.variance();
  signal.eat_samples = eat_.samples();
  signal.rpdi_local = rpdi_.local_rate();
  signal.rpdi_global = rpdi_.global_rate();
  signal.rpdi_ratio = rpdi_.ratio();
  signal.rpdi_samples = rpdi_.samples();
  const std::optional<ForceReason> reason = due_reason(token.think_tokens);
  if (reason) {
    if (token.tool_call_open) {
      signal.held_by_tool_call = reason;
    } else {
      signal.force = reason;
    }
  }
  return signal;
}

}  // namespace meridian
