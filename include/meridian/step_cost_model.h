// Step-cost model: predicts how long one engine step takes from what it
// contains, so the scheduler can keep steps within the output TPOT budget.
//
//   step_ms = base_ms + per_token_ms * tokens + per_kv_token_us / 1000 * kv_tokens
//
// `tokens` are all tokens computed in the step (decode and prefill), `kv_tokens`
// the context tokens attention reads. Coefficients start from config and, when
// online, are refined by recursive least squares over observed step times.
//
// Robust learning: one bad timing (a stalled host, a clock jump, a caller's
// unit mistake) must not poison the model. Non-finite and non-positive times
// are rejected (counted, model unchanged); every other observation's
// residual is clamped to +-max(prediction, 1 ms), so one outlier at most
// doubles the prediction for a step like it and ordinary steps pull it back
// within a few steps. A real, lasting slowdown is still learned, by at most
// a doubling per step. The coefficients are kept >= 0 (projected in P's
// metric), so predictions stay monotone in both features.
//
// Thread-safety: not thread-safe; owned by the scheduler (one thread).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "meridian/config.h"

namespace meridian {

struct StepCostCoefficients {
  double base_ms = 6.0;
  double per_token_ms = 0.03;
  double per_kv_token_us = 0.044;

  friend bool operator==(const StepCostCoefficients&, const StepCostCoefficients&) = default;
};

class StepCostModel {
 public:
  /// forgetting_factor in (0, 1]; throws InvalidArgument otherwise or on
  /// negative / non-finite coefficients.
  StepCostModel(StepCostCoefficients initial, bool online, double forgetting_factor);
  /// Throws ConfigError (dotted paths) if `config` is invalid.
  static StepCostModel from_config(const SchedulerConfig& config);

  /// Smallest residual bound (ms): a prediction near 0 can still learn.
  static constexpr double kMinResidualBoundMs = 1.0;
  /// How far (ms) an observation may count above or below `predicted_ms`.
  [[nodiscard]] static double residual_bound_ms(double predicted_ms) noexcept {
    return std::max(predicted_ms, kMinResidualBoundMs);
  }

  /// Predicted duration in ms; never negative.
  [[nodiscard]] double predict_ms(std::uint64_t tokens, std::uint64_t kv_tokens) const noexcept {
    const auto t = static_cast<double>(tokens);
    const double kv = static_cast<double>(kv_tokens) * 1e-3;
    return non_negative(theta_[0]) + non_negative(theta_[1]) * t + non_negative(theta_[2]) * kv;
  }

  /// Feeds one observed step. Non-finite or non-positive times are rejected
  /// (counted, model unchanged). Returns whether the sample was used; an
  /// outlier is used with its residual clamped (counted in clamped()). A
  /// no-op that returns true when the model is static.
  bool observe(std::uint64_t tokens, std::uint64_t kv_tokens, double observed_ms) noexcept;

  [[nodiscard]] StepCostCoefficients coefficients() const noexcept;
  [[nodiscard]] bool online() const noexcept { return online_; }
  [[nodiscard]] std::uint64_t observations() const noexcept { return observations_; }
  [[nodiscard]] std::uint64_t rejected() const noexcept { return rejected_; }
  /// Observations whose residual was clamped (outliers; online only).
  [[nodiscard]] std::uint64_t clamped() const noexcept { return clamped_; }

 private:
  static double non_negative(double v) noexcept { return v > 0.0 ? v : 0.0; }
  void project_non_negative() noexcept;

  std::array<double, 3> theta_{};
  std::array<std::array<double, 3>, 3> p_{};
  bool online_ = true;
  double lambda_ = 0.98;
  std::uint64_t observations_ = 0;
  std::uint64_t rejected_ = 0;
  std::uint64_t clamped_ = 0;
};

}  // namespace meridian
