// Entropy signals and the budget-forcing decision for one reasoning request.
//
// Two signals (docs/architecture.md#entropy-probe has the formulas):
//  * EAT (arXiv:2509.26522): the entropy of the next-token distribution after
//    the end-of-think marker is appended, sampled every
//    eat_probe_interval_tokens think tokens. ema = a*x + (1-a)*ema, then
//    var = a*(x - ema)^2 + (1-a)*var (with the updated ema), both seeded from
//    the first sample (ema = x, var = 0). Converged when var <
//    eat_ema_variance_threshold, once eat_min_samples samples are in.
//  * RPDI (arXiv:2603.14251): a sampled think token whose entropy exceeds
//    transition_entropy_threshold is a transition. local = transitions / n
//    over the last rpdi_window_tokens sampled tokens, global = transitions /
//    all sampled tokens (never divided by unsampled tokens). Overthinking
//    when local / global > rpdi_threshold, once rpdi_min_samples are in.
// Forcing: hard_cap at max_think_tokens (even with entropy.enabled = false);
// converged / overthinking only from min_think_tokens on; nothing while a
// tool call is open (the decision is held, and reported as held).
//
// Where the EAT value comes from is explicit: EatSource::kProbePass is the
// real thing (a forward pass with </think> appended); kInStepProxy is the
// entropy of the ordinary decode step's distribution, for engines that cannot
// run the probe pass (ADR-0011). One request uses one source.
//
// Thread-safety: an EntropyProbe (and its trackers) belongs to one request
// and is used from one thread at a time. ProbeSettings is a plain value.
// Allocation: construction allocates the RPDI window; observe() never does.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "meridian/config.h"
#include "meridian/phase.h"
#include "meridian/row_stats.h"

namespace meridian {

enum class EatSource : std::uint8_t {
  kProbePass = 0,    ///< entropy after an appended </think> (the paper's EAT)
  kInStepProxy = 1,  ///< entropy of the regular decode step (documented proxy)
};
[[nodiscard]] std::string_view to_string(EatSource source) noexcept;

struct EatSample {
  double value = 0;  ///< nats
  EatSource source = EatSource::kProbePass;

  /// The EAT sample of a probe pass: `probe_row` holds the statistics of the
  /// logits after </think> was appended to the request's tokens.
  static EatSample from_probe_pass(const RowStats& probe_row) noexcept;
  /// The in-step proxy: `step_row` holds the statistics of the request's
  /// ordinary decode logits at this step.
  static EatSample in_step_proxy(const RowStats& step_row) noexcept;
};

/// EMA and EMA variance of EAT samples, the paper's update.
class EatTracker {
 public:
  explicit EatTracker(double alpha) noexcept : alpha_(alpha) {}
  void add(double x) noexcept;
  [[nodiscard]] double ema() const noexcept { return ema_; }
  [[nodiscard]] double variance() const noexcept { return variance_; }
  [[nodiscard]] double last() const noexcept { return last_; }
  [[nodiscard]] std::uint64_t samples() const noexcept { return samples_; }

 private:
  double alpha_;
  double ema_ = 0;
  double variance_ = 0;
  double last_ = 0;
  std::uint64_t samples_ = 0;
};

/// Transition rates over sampled think tokens.
class RpdiTracker {
 public:
  RpdiTracker(double transition_entropy_threshold, std::uint32_t window_tokens);
  void add(double token_entropy) noexcept;
  [[nodiscard]] std::uint64_t samples() const noexcept { return samples_; }
  [[nodiscard]] std::uint64_t transitions() const noexcept { return transitions_; }
  [[nodiscard]] double local_rate() const noexcept;
  [[nodiscard]] double global_rate() const noexcept;
  /// local / global; 0 while there has been no transition.
  [[nodiscard]] double ratio() const noexcept;

 private:
  double threshold_;
  std::uint32_t window_;
  std::vector<std::uint64_t> ring_;  // one bit per sampled token of the window
  std::uint32_t position_ = 0;
  std::uint32_t filled_ = 0;
  std::uint32_t window_transitions_ = 0;
  std::uint64_t samples_ = 0;
  std::uint64_t transitions_ = 0;
};

/// Everything the probe needs from [entropy] and [scheduler].
struct ProbeSettings {
  bool enabled = true;
  double ema_alpha = 0.05;
  double eat_ema_variance_threshold = 0.001;
  std::uint32_t eat_min_samples = 16;
  std::uint32_t eat_probe_interval_tokens = 32;
  double transition_entropy_threshold = 2.5;
  std::uint32_t rpdi_window_tokens = 128;
  std::uint32_t rpdi_min_samples = 512;
  double rpdi_threshold = 3.0;
  std::uint64_t min_think_tokens = 512;
  std::uint64_t max_think_tokens = 32768;

  /// Throws ConfigError (dotted paths) if [entropy] or [scheduler] is invalid.
  static ProbeSettings from(const MeridianConfig& config);
};

/// What one think token did to the request's signals.
struct ThinkTokenObservation {
  std::uint64_t think_tokens = 0;  ///< think tokens so far, this one included
  bool tool_call_open = false;     ///< a <tool_call> block is open
  /// Entropy (nats) of this token's next-token distribution, if measured.
  std::optional<double> token_entropy = std::nullopt;
  /// An EAT sample taken at this token (normally when eat_due() said so).
  std::optional<EatSample> eat = std::nullopt;
};

/// The seeds' EntropySignal record, plus the forcing decision.
struct EntropySignal {
  std::uint64_t think_tokens = 0;
  std::optional<double> token_entropy;
  std::optional<double> eat;  ///< this token's EAT sample, if any
  double eat_ema = 0;
  double eat_ema_variance = 0;
  std::uint64_t eat_samples = 0;
  double rpdi_local = 0;
  double rpdi_global = 0;
  double rpdi_ratio = 0;
  std::uint64_t rpdi_samples = 0;
  /// The end of thinking should be forced now, for this reason.
  std::optional<ForceReason> force;
  /// A force was due but a tool call is open; it is held until it closes.
  std::optional<ForceReason> held_by_tool_call;
};

/// Per-request totals, for telemetry.
struct ProbeCounters {
  std::uint64_t eat_samples = 0;
  std::uint64_t token_samples = 0;
  std::uint64_t invalid_samples = 0;  ///< NaN/inf values dropped (a NaN logits row)
};

class EntropyProbe {
 public:
  /// Throws InvalidArgument if ema_alpha is outside (0, 1] or a threshold is not finite.
  explicit EntropyProbe(const ProbeSettings& settings);

  /// Whether an EAT sample is due at this think-token count (every
  /// eat_probe_interval_tokens; never when the probe is disabled).
  [[nodiscard]] bool eat_due(std::uint64_t think_tokens) const noexcept;

  /// Folds in one think token. Throws meridian::Error if the EAT source
  /// differs from this request's earlier samples, or think_tokens goes back.
  EntropySignal observe(const ThinkTokenObservation& token);

  [[nodiscard]] const EatTracker& eat() const noexcept { return eat_; }
  [[nodiscard]] const RpdiTracker& rpdi() const noexcept { return rpdi_; }
  [[nodiscard]] const ProbeCounters& counters() const noexcept { return counters_; }
  [[nodiscard]] std::optional<EatSource> eat_source() const noexcept { return source_; }
  [[nodiscard]] const ProbeSettings& settings() const noexcept { return settings_; }

 private:
  [[nodiscard]] std::optional<ForceReason> due_reason(std::uint64_t think_tokens) const noexcept;

  ProbeSettings settings_;
  EatTracker eat_;
  RpdiTracker rpdi_;
  ProbeCounters counters_;
  std::optional<EatSource> source_;
  std::uint64_t last_think_tokens_ = 0;
};

}  // namespace meridian
