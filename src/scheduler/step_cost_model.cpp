#include "meridian/step_cost_model.h"

#include <cmath>

#include <fmt/format.h>

#include "meridian/error.h"

namespace meridian {
namespace {

// Prior variances of the three coefficients (ms^2, (ms/token)^2, (us/token)^2):
// wide enough that a few dozen steps override a wrong static guess, narrow
// enough that one outlier does not.
constexpr std::array<double, 3> kPriorVariance{25.0, 1e-3, 1e-2};
// Bound on P's diagonal: with forgetting and inputs that do not vary, P grows
// without limit ("wind-up") and one step then swings the estimate.
constexpr std::array<double, 3> kMaxVariance{1e4, 1.0, 10.0};

}  // namespace

StepCostModel::StepCostModel(StepCostCoefficients initial, bool online, double forgetting_factor)
    : online_(online), lambda_(forgetting_factor) {
  for (double c : {initial.base_ms, initial.per_token_ms, initial.per_kv_token_us}) {
    if (!std::isfinite(c) || c < 0.0) {
      throw InvalidArgument(fmt::format("step cost coefficients must be finite and >= 0; got {}", c));
    }
  }
  if (!(forgetting_factor > 0.0 && forgetting_factor <= 1.0)) {
    throw InvalidArgument(
        fmt::format("scheduler.step_cost_forgetting_factor must be in (0, 1]; got {}", forgetting_factor));
  }
  theta_ = {initial.base_ms, initial.per_token_ms, initial.per_kv_token_us};
  for (std::size_t i = 0; i < 3; ++i) p_[i][i] = kPriorVariance[i];
}

StepCostModel StepCostModel::from_config(const SchedulerConfig& config) {
  validate_or_throw(config);
  return StepCostModel(
      {config.step_cost_base_ms, config.step_cost_per_token_ms, config.step_cost_per_kv_token_us},
      config.step_cost_online, config.step_cost_forgetting_factor);
}

bool StepCostModel::observe(std::uint64_t tokens, std::uint64_t kv_tokens, double observed_ms) noexcept {
  if (!std::isfinite(observed_ms) || observed_ms <= 0.0) {
    ++rejected_;
    return false;
  }
  ++observations_;
  if (!online_) return true;
  const std::array<double, 3> x{1.0, static_cast<double>(tokens), static_cast<double>(kv_tokens) * 1e-3};
  // Standard RLS update: k = P x / (lambda + x' P x); theta += k e; P = (P - k x' P) / lambda.
  std::array<double, 3> px{};
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t j = 0; j < 3; ++j) px[i] += p_[i][j] * x[j];
  }
  double denom = lambda_;
  for (std::size_t i = 0; i < 3; ++i) denom += x[i] * px[i];
  // Clamped so one outlier moves the estimate a bounded amount (the bound
  // scales with the prediction, so a real slowdown is still learned).
  const double bound = residual_bound_ms(predict_ms(tokens, kv_tokens));
  double err = observed_ms - (theta_[0] + theta_[1] * x[1] + theta_[2] * x[2]);
  if (std::abs(err) > bound) {
    err = std::copysign(bound, err);
    ++clamped_;
  }
  std::array<double, 3> k{};
  for (std::size_t i = 0; i < 3; ++i) k[i] = px[i] / denom;
  for (std::size_t i = 0; i < 3; ++i) theta_[i] += k[i] * err;
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t j = 0; j < 3; ++j) p_[i][j] = (p_[i][j] - k[i] * px[j]) / lambda_;
  }
  // Rounding makes the update drift from symmetric; an asymmetric P soon stops
  // being positive definite and the estimate diverges (seen in the replay:
  // predictions of 10^6 ms after a few thousand decode steps). Keep it symmetric.
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t j = i + 1; j < 3; ++j) p_[i][j] = p_[j][i] = 0.5 * (p_[i][j] + p_[j][i]);
  }
  project_non_negative();
  for (std::size_t i = 0; i < 3; ++i) {
    if (p_[i][i] > kMaxVariance[i]) {
      const double scale = kMaxVariance[i] / p_[i][i];
      for (std::size_t j = 0; j < 3; ++j) {
        p_[i][j] *= std::sqrt(scale);
        p_[j][i] *= std::sqrt(scale);
      }
    }
  }
  return true;
}

// predict_ms() reads a negative coefficient as 0, and the scheduler relies on
// a prediction monotone in both features; but with little excitation (steps
// that barely vary) RLS lets a coefficient drift below 0, and once it did the
// prediction left the data (seconds predicted for 200 ms steps). So the
// estimate is kept in theta >= 0 by projecting in the metric of P (the
// least-squares-consistent projection: better-known directions move less).
void StepCostModel::project_non_negative() noexcept {
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t i = 0; i < 3; ++i) {
      if (theta_[i] >= 0.0) continue;
      if (p_[i][i] > 0.0) {
        const double step = theta_[i] / p_[i][i];
        for (std::size_t j = 0; j < 3; ++j) theta_[j] -= p_[j][i] * step;
      }
      theta_[i] = 0.0;
    }
  }
  for (double& t : theta_) t = non_negative(t);
}

StepCostCoefficients StepCostModel::coefficients() const noexcept {
  return {non_negative(theta_[0]), non_negative(theta_[1]), non_negative(theta_[2])};
}

}  // namespace meridian
