// The roofline of sim_cost_model.h.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "meridian/error.h"
#include "meridian/sim_cost_model.h"

namespace meridian::sim {
namespace {

constexpr double kGiga = 1e9;
constexpr double kTera = 1e12;
constexpr double kMsPerS = 1e3;

void require(std::vector<ConfigIssue>& issues, bool ok, std::string_view field, std::string_view rule,
             double got) {
  if (ok) return;
  const std::string path = fmt::format("cost_model.{}", field);
  issues.push_back({path, fmt::format("{} must be {}; got {}", path, rule, got), "", 0, 0});
}

}  // namespace

RooflineCostModel::RooflineCostModel(const CostModelParams& params) : p_(params) {
  std::vector<ConfigIssue> issues;
  auto positive = [&](std::string_view field, double v) {
    require(issues, v > 0 && std::isfinite(v), field, "> 0", v);
  };
  auto fraction = [&](std::string_view field, double v) {
    require(issues, v > 0 && v <= 1, field, "in (0, 1]", v);
  };
  positive("active_params", p_.active_params);
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
  require(issues, p_.overhead_ms >= 0 && std::isfinite(p_.overhead_ms), "overhead_ms", ">= 0",
          p_.overhead_ms);
  positive("pcie_bandwidth_gbps", p_.pcie_bandwidth_gbps);
  positive("gpu_memory_gb", p_.gpu_memory_gb);
  fraction("gpu_memory_utilization", p_.gpu_memory_utilization);
  require(issues, p_.activation_reserve_gb >= 0, "activation_reserve_gb", ">= 0", p_.activation_reserve_gb);
  if (issues.empty()) {
    kv_bytes_ = p_.gpu_memory_gb * kGiga * p_.gpu_memory_utilization - p_.weight_bytes -
                p_.activation_reserve_gb * kGiga;
    require(issues, kv_bytes_ > 0, "gpu_memory_gb",
            "large enough for the weights and activations (gpu_memory_gb * gpu_memory_utilization - "
            "weight_bytes / 1e9 - activation_reserve_gb > 0)",
            p_.gpu_memory_gb);
  }
  if (!issues.empty()) throw ConfigError(std::move(issues));
  bytes_per_ms_ = p_.hbm_bandwidth_gbps * kGiga * p_.bandwidth_efficiency / kMsPerS;
  flops_per_ms_ = p_.peak_tflops * kTera * p_.compute_efficiency / kMsPerS;
  pcie_bytes_per_ms_ = p_.pcie_bandwidth_gbps * kGiga / kMsPerS;
  // QK^T and PV: one multiply-add (2 FLOPs) each per head dimension, per query head, per layer.
  attention_flops_per_pair_ = 4.0 * p_.layers * p_.q_heads * p_.head_dim;
}

double RooflineCostModel::memory_ms(const StepShape& step) const noexcept {
  const double bytes = p_.weight_bytes + static_cast<double>(p_.kv_bytes_per_token()) *
                                             static_cast<double>(step.kv_tokens_read);
  return bytes / bytes_per_ms_;
}

double RooflineCostModel::compute_ms(const StepShape& step) const noexcept {
  const double flops = 2.0 * p_.active_params * static_cast<double>(step.tokens) +
                       attention_flops_per_pair_ * step.attended_pairs;
  return flops / flops_per_ms_;
}

double RooflineCostModel::swap_ms(std::uint64_t tokens) const noexcept {
  return static_cast<double>(p_.kv_bytes_per_token()) * static_cast<double>(tokens) / pcie_bytes_per_ms_;
}

double RooflineCostModel::step_ms(const StepShape& step) const noexcept {
  return p_.overhead_ms + std::max(memory_ms(step), compute_ms(step)) + swap_ms(step.swap_tokens);
}

double RooflineCostModel::kv_capacity_bytes() const noexcept { return kv_bytes_; }

std::uint32_t RooflineCostModel::kv_capacity_blocks(std::uint32_t block_tokens) const noexcept {
  const double block_bytes = static_cast<double>(p_.kv_bytes_per_token()) * std::max(block_tokens, 1U);
  return static_cast<std::uint32_t>(std::floor(kv_bytes_ / block_bytes));
}

}  // namespace meridian::sim
