// The roofline of sim_cost_model.h.
#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "meridian/error.h"
#include "meridian/sim_cost_model.h"
#include "sim/param_check.h"

namespace meridian::sim {
namespace {

constexpr double kGiga = 1e9;
constexpr double kGibi = 1073741824.0;
constexpr double kTera = 1e12;
constexpr double kMsPerS = 1e3;

constexpr std::string_view kSection = "cost_model";  // the dotted path of every issue

}  // namespace

RooflineCostModel::RooflineCostModel(const CostModelParams& params) : p_(params) {
  std::vector<ConfigIssue> issues;
  auto positive = [&](std::string_view field, double v) {
    detail::require(issues, v > 0 && std::isfinite(v), kSection, field, "> 0", v);
  };
  auto fraction = [&](std::string_view field, double v) {
    detail::require(issues, v > 0 && v <= 1, kSection, field, "in (0, 1]", v);
  };
  positive("active_params", p_.active_params);
  detail::require(issues, p_.embedding_params >= 0 && p_.embedding_params < p_.active_params, kSection,
                  "embedding_params", "in [0, cost_model.active_params)", p_.embedding_params);
  positive("weight_bytes", p_.weight_bytes);
  positive("layers", p_.layers);
  positive("q_heads", p_.q_heads);
  positive("kv_heads", p_.kv_heads);
  positive("head_dim", p_.head_dim);
  positive("kv_dtype_bytes", p_.kv_dtype_bytes);
  positive("hbm_bandwidth_gbps", p_.hbm_bandwidth_gbps);
  fraction("bandwidth_efficiency", p_.bandwidth_efficiency);
  positive("peak_tflops", p_.peak_tflops);
  fraction("compute_efficiency", p_.compute_efficiency);
  detail::require(issues, p_.overhead_ms >= 0 && std::isfinite(p_.overhead_ms), kSection, "overhead_ms",
                  ">= 0", p_.overhead_ms);
  positive("pcie_bandwidth_gbps", p_.pcie_bandwidth_gbps);
  positive("gpu_memory_gib", p_.gpu_memory_gib);
  fraction("gpu_memory_utilization", p_.gpu_memory_utilization);
  detail::require(issues, p_.activation_reserve_gib >= 0 && std::isfinite(p_.activation_reserve_gib),
                  kSection, "activation_reserve_gib", ">= 0", p_.activation_reserve_gib);
  if (issues.empty()) {
    kv_bytes_ = p_.gpu_memory_gib * kGibi * p_.gpu_memory_utilization - p_.weight_bytes -
                p_.activation_reserve_gib * kGibi;
    detail::require(
        issues, kv_bytes_ > 0, kSection, "gpu_memory_gib",
        "large enough for the weights and activations (gpu_memory_gib * 2^30 * gpu_memory_utilization - "
        "weight_bytes - activation_reserve_gib * 2^30 > 0)",
        p_.gpu_memory_gib);
  }
  if (!issues.empty()) throw ConfigError(std::move(issues));
  bytes_per_ms_ = p_.hbm_bandwidth_gbps * kGiga * p_.bandwidth_efficiency / kMsPerS;
  flops_per_ms_ = p_.peak_tflops * kTera * p_.compute_efficiency / kMsPerS;
  pcie_bytes_per_ms_ = p_.pcie_bandwidth_gbps * kGiga / kMsPerS;
  linear_params_ = p_.active_params - p_.embedding_params;
  linear_weight_bytes_ = p_.weight_bytes * linear_params_ / p_.active_params;
  // QK^T and PV: one multiply-add (2 FLOPs) each per head dimension, per query head, per layer.
  attention_flops_per_pair_ = 4.0 * p_.layers * p_.q_heads * p_.head_dim;
}

double RooflineCostModel::linear_weight_bytes() const noexcept { return linear_weight_bytes_; }

double RooflineCostModel::linear_ms(const StepShape& step) const noexcept {
  const double read_ms = linear_weight_bytes_ / bytes_per_ms_;
  const double compute_ms = 2.0 * linear_params_ * static_cast<double>(step.tokens) / flops_per_ms_;
  return std::max(read_ms, compute_ms);
}

double RooflineCostModel::attention_ms(const StepShape& step) const noexcept {
  const double read_ms =
      static_cast<double>(p_.kv_bytes_per_token()) * static_cast<double>(step.kv_tokens_read) / bytes_per_ms_;
  const double compute_ms = attention_flops_per_pair_ * step.attended_pairs / flops_per_ms_;
  return std::max(read_ms, compute_ms);
}

double RooflineCostModel::swap_ms(std::uint64_t tokens) const noexcept {
  return static_cast<double>(p_.kv_bytes_per_token()) * static_cast<double>(tokens) / pcie_bytes_per_ms_;
}

double RooflineCostModel::step_ms(const StepShape& step) const noexcept {
  return p_.overhead_ms + linear_ms(step) + attention_ms(step) + swap_ms(step.swap_tokens);
}

double RooflineCostModel::kv_capacity_bytes() const noexcept { return kv_bytes_; }

std::uint32_t RooflineCostModel::kv_capacity_blocks(std::uint32_t block_tokens) const noexcept {
  const double block_bytes = static_cast<double>(p_.kv_bytes_per_token()) * std::max(block_tokens, 1U);
  return static_cast<std::uint32_t>(std::floor(kv_bytes_ / block_bytes));
}

}  // namespace meridian::sim
