// The fabric link of the replay's disaggregated mode (sim_cost_model.h) and
// the checks of [disagg].
#include <cmath>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "meridian/error.h"
#include "meridian/sim_cost_model.h"
#include "sim/param_check.h"

namespace meridian::sim {
namespace {

constexpr double kGiga = 1e9;
constexpr double kMsPerS = 1e3;
constexpr double kUsPerMs = 1e3;
// Upper bounds keep every transfer a sane nanosecond count (as [cost_model]'s do).
constexpr double kMaxBandwidthGbps = 1e6;
constexpr double kMaxLatencyUs = 1e7;  // 10 s
constexpr double kMaxThresholdBlocks = 1048576;
constexpr double kMaxInflightBatches = 4096;

constexpr std::string_view kSection = "disagg";  // the dotted path of every issue
// The slowest link a run may model: one KV block within an hour (as one step
// within an hour, [cost_model]). Each bandwidth is in range on its own, but a
// tiny one made a block take years, whose nanoseconds overflowed: the link
// then read as infinitely fast (issue 27).
constexpr double kMaxBlockTransferMs = 3.6e6;

}  // namespace

DisaggSimParams disagg_preset(std::string_view fabric) {
  DisaggSimParams p;
  p.fabric = std::string(fabric);
  // ../shared/design/fabrics-on-cpu.md, loopback TCP: NIXL 1.3-3 GB/s, 16 KiB
  // writes 80-230 us; Mooncake 1.4-3.2 GB/s, 16 KiB writes 60-83 us.
  if (fabric == "nixl") {
    p.bandwidth_gbps = 2.0;
    p.latency_us = 150;
  } else if (fabric == "mooncake") {
    p.bandwidth_gbps = 2.3;
    p.latency_us = 70;
  }
  return p;
}

void validate(const DisaggSimParams& p) {
  std::vector<ConfigIssue> issues;
  if (p.fabric != "none" && p.fabric != "nixl" && p.fabric != "mooncake") {
    issues.push_back({"disagg.fabric",
                      fmt::format("disagg.fabric must be \"none\", \"nixl\" or \"mooncake\"; got \"{}\"",
                                  p.fabric.substr(0, 64)),
                      "", 0, 0});
  }
  detail::require(issues, p.bandwidth_gbps > 0 && p.bandwidth_gbps <= kMaxBandwidthGbps, kSection,
                  "bandwidth_gbps", fmt::format("in (0, {:g}]", kMaxBandwidthGbps), p.bandwidth_gbps);
  detail::require(issues, p.latency_us >= 0 && p.latency_us <= kMaxLatencyUs, kSection, "latency_us",
                  fmt::format("in [0, {:g}]", kMaxLatencyUs), p.latency_us);
  detail::require(issues, p.hash_gbps > 0 && p.hash_gbps <= kMaxBandwidthGbps, kSection, "hash_gbps",
                  fmt::format("in (0, {:g}]", kMaxBandwidthGbps), p.hash_gbps);
  detail::require(issues,
                  p.offload_threshold_blocks >= 1 && p.offload_threshold_blocks <= kMaxThresholdBlocks,
                  kSection, "offload_threshold_blocks", fmt::format("in [1, {:g}]", kMaxThresholdBlocks),
                  p.offload_threshold_blocks);
  detail::require(issues, p.max_inflight_batches >= 1 && p.max_inflight_batches <= kMaxInflightBatches,
                  kSection, "max_inflight_batches", fmt::format("in [1, {:g}]", kMaxInflightBatches),
                  p.max_inflight_batches);
  if (!issues.empty()) throw ConfigError(std::move(issues));
}

FabricLinkModel::FabricLinkModel(DisaggSimParams params, std::uint64_t block_bytes)
    : p_(std::move(params)), block_bytes_(block_bytes) {
  validate(p_);
  if (block_bytes_ == 0) {
    throw ConfigError({{"disagg", "disagg: a KV block of 0 bytes cannot be transferred", "", 0, 0}});
  }
  wire_bytes_per_ms_ = p_.bandwidth_gbps * kGiga / kMsPerS;
  hash_bytes_per_ms_ = p_.hash_gbps * kGiga / kMsPerS;
  const double wire_ms = static_cast<double>(wire_bytes(1)) / wire_bytes_per_ms_;
  const double hash_ms = static_cast<double>(block_bytes_) / hash_bytes_per_ms_;
  std::vector<ConfigIssue> issues;
  auto too_slow = [&](std::string_view field, double value, double ms, std::uint64_t bytes) {
    if (!(ms <= kMaxBlockTransferMs)) {
      issues.push_back(
          {fmt::format("{}.{}", kSection, field),
           fmt::format("{}.{} = {:g} GB/s takes {:g} ms for one KV block ({} bytes); the simulator "
                       "models at most {:g} ms (1 h) a block: raise it",
                       kSection, field, value, ms, bytes, kMaxBlockTransferMs),
           "", 0, 0});
    }
  };
  too_slow("bandwidth_gbps", p_.bandwidth_gbps, wire_ms, wire_bytes(1));
  too_slow("hash_gbps", p_.hash_gbps, hash_ms, block_bytes_);
  if (!issues.empty()) throw ConfigError(std::move(issues));
}

std::uint64_t FabricLinkModel::wire_bytes(std::uint64_t blocks) const noexcept {
  return blocks * (block_bytes_ + kMrdnHeaderBytes);
}

double FabricLinkModel::occupancy_ms(std::uint64_t blocks) const noexcept {
  return static_cast<double>(wire_bytes(blocks)) / wire_bytes_per_ms_ +
         static_cast<double>(blocks * block_bytes_) / hash_bytes_per_ms_;
}

double FabricLinkModel::transfer_ms(std::uint64_t blocks) const noexcept {
  return occupancy_ms(blocks) + p_.latency_us / kUsPerMs;
}

}  // namespace meridian::sim
