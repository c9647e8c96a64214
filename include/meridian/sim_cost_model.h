// Roofline step-cost model of the replay simulator: how long one engine step
// of a dense transformer takes on one GPU, from what the step contains. The
// linear layers and attention are separate kernels with separate bottlenecks,
// so each gets its own roofline and the two are added:
//
//   step_ms   = overhead_ms + linear_ms + attention_ms + swap_bytes / pcie_bandwidth
//   linear_ms = max(linear_weight_bytes / bw, 2 * linear_params * tokens / flops)
//   attention_ms = max(kv_bytes_per_token * kv_tokens_read / bw,
//                      4 * layers * q_heads * head_dim * attended_pairs / flops)
//
//   linear_params = active_params - embedding_params (the input embedding is a
//   row lookup: neither streamed whole nor multiplied; an untied LM head is a
//   linear layer and stays in); bw and flops are peak x efficiency.
//
// A single max over the whole step would hide a prefill chunk's FLOPs behind
// the decode batch's KV reads (piggy-backed prefill would look free).
//
// It is a roofline, not a measurement: nothing about kernel efficiency at
// small batch, communication or CPU stalls. The defaults describe Qwen3-8B (bf16) on one H100 SXM; every
// coefficient is a field of [cost_model] in the replay TOML (docs/benchmarks.md
// cites each one).
//
// Thread-safety: immutable after construction; const members may be called
// from any thread. Ownership: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace meridian::sim {

/// Coefficients of the roofline (units in the names).
struct CostModelParams {
  // Model (Qwen3-8B: config.json of Qwen/Qwen3-8B).
  double active_params = 8.19e9;  ///< all parameters (model card: 8.2 B)
  /// Input embedding table (vocab 151,936 x hidden 4,096): resident, but only
  /// looked up, so neither read whole per step nor multiplied.
  double embedding_params = 622329856;
  double weight_bytes = 16.4e9;  ///< bf16 weights resident in GPU memory
  std::uint32_t layers = 36;
  std::uint32_t q_heads = 32;
  std::uint32_t kv_heads = 8;
  std::uint32_t head_dim = 128;
  std::uint32_t kv_dtype_bytes = 2;  ///< bf16 KV cache
  // GPU (H100 SXM5 datasheet).
  double hbm_bandwidth_gbps = 3350;   ///< GB/s
  double bandwidth_efficiency = 0.8;  ///< achieved / peak for weight and KV streaming
  double peak_tflops = 989;           ///< dense bf16 tensor-core TFLOP/s
  double compute_efficiency = 0.55;   ///< achieved MFU in prefill
  double overhead_ms = 1.5;           ///< per step: scheduling, launch, sampling
  double pcie_bandwidth_gbps = 50;    ///< swap traffic, host <-> device (PCIe 5 x16 achieved)
  // Memory (vLLM's accounting: total * gpu_memory_utilization - weights - activations).
  double gpu_memory_gib = 79.19;  ///< what CUDA reports for an "80 GB" H100 (81,090 MiB)
  double gpu_memory_utilization = 0.90;
  double activation_reserve_gib = 4.0;

  /// K and V of one token across all layers (36 * 8 * 128 * 2 * 2 B = 144 KiB).
  [[nodiscard]] std::uint64_t kv_bytes_per_token() const noexcept {
    return std::uint64_t{layers} * kv_heads * head_dim * 2 * kv_dtype_bytes;
  }
};

/// What one step computes, as the cost model needs it.
struct StepShape {
  std::uint64_t tokens = 0;          ///< tokens computed (decode + prefill chunks)
  std::uint64_t kv_tokens_read = 0;  ///< context tokens whose K/V attention reads
  /// Query-key pairs attention computes (a decode: its context; a prefill
  /// chunk of c tokens after p cached: c * p + c * (c + 1) / 2).
  double attended_pairs = 0;
  std::uint64_t swap_tokens = 0;  ///< tokens of KV moved over PCIe (out and in)
};

class RooflineCostModel {
 public:
  /// Throws meridian::ConfigError naming the field ("cost_model.<field>") on a
  /// non-positive or out-of-range coefficient.
  explicit RooflineCostModel(const CostModelParams& params);

  /// Duration of one step in milliseconds. An empty step costs overhead_ms
  /// plus one weight read (the engine still runs its forward pass machinery).
  [[nodiscard]] double step_ms(const StepShape& step) const noexcept;
  /// The two rooflines that step_ms() adds, for tests and docs.
  [[nodiscard]] double linear_ms(const StepShape& step) const noexcept;
  [[nodiscard]] double attention_ms(const StepShape& step) const noexcept;
  /// Bytes of linear-layer weights streamed by every step (embedding excluded).
  [[nodiscard]] double linear_weight_bytes() const noexcept;
  [[nodiscard]] double swap_ms(std::uint64_t tokens) const noexcept;

  /// KV bytes available after weights and activations.
  [[nodiscard]] double kv_capacity_bytes() const noexcept;
  /// KV blocks of `block_tokens` tokens that fit in kv_capacity_bytes().
  [[nodiscard]] std::uint32_t kv_capacity_blocks(std::uint32_t block_tokens) const noexcept;

  [[nodiscard]] const CostModelParams& params() const noexcept { return p_; }

 private:
  CostModelParams p_;
  double bytes_per_ms_ = 0;
  double flops_per_ms_ = 0;
  double pcie_bytes_per_ms_ = 0;
  double kv_bytes_ = 0;
  double linear_params_ = 0;
  double linear_weight_bytes_ = 0;
  double attention_flops_per_pair_ = 0;
};

/// [disagg] of the replay TOML: the fabric of the simulator's disaggregated
/// mode (docs/replay.md#disaggregated-mode-when-offload-pays-off). Off unless
/// `fabric` names one; off, the simulator behaves exactly as without it.
/// `fabric` picks the defaults of the other fields (disagg_preset()), as
/// workload.kind does for [workload].
struct DisaggSimParams {
  std::string fabric = "none";  ///< "none" (off), "nixl" or "mooncake"
  double bandwidth_gbps = 2.0;  ///< link bandwidth, GB/s (NIXL loopback TCP: 1.3-3 GB/s measured)
  double latency_us = 150;      ///< per transfer, us (NIXL 16 KiB writes: 80-230 us measured)
  /// BLAKE3 over each block body, GB/s: the sender checksums, the receiver
  /// verifies, so a push and a pull each pay it once.
  double hash_gbps = 3.0;
  std::uint32_t offload_threshold_blocks = 4;  ///< ExitThink blocks batched per push
  std::uint32_t max_inflight_batches = 4;      ///< pushes on the link at once; more fall back

  [[nodiscard]] bool enabled() const noexcept { return fabric != "none"; }
  friend bool operator==(const DisaggSimParams&, const DisaggSimParams&) = default;
};

/// Every MRDN v1 frame carries this header before the block body.
inline constexpr std::uint64_t kMrdnHeaderBytes = 32;

/// The defaults of `fabric` ("nixl", "mooncake"; anything else: DisaggSimParams{}
/// with that name): the midpoints of the loopback figures measured for it.
[[nodiscard]] DisaggSimParams disagg_preset(std::string_view fabric);

/// A FIFO fabric link of the disaggregated mode: a transfer of n blocks holds
/// the link for its serialisation and hashing, then arrives latency_us later.
///
///   wire_bytes(n)   = n * (block_bytes + 32)                  (MRDN header per block)
///   occupancy_ms(n) = wire_bytes(n) / bandwidth + n * block_bytes / hash_bandwidth
///   transfer_ms(n)  = occupancy_ms(n) + latency_us / 1000
///
/// Thread-safety: immutable after construction. Ownership: plain values.
class FabricLinkModel {
 public:
  /// Throws meridian::ConfigError naming each bad field ("disagg.<field>").
  FabricLinkModel(DisaggSimParams params, std::uint64_t block_bytes);

  [[nodiscard]] std::uint64_t wire_bytes(std::uint64_t blocks) const noexcept;
  [[nodiscard]] double occupancy_ms(std::uint64_t blocks) const noexcept;
  [[nodiscard]] double transfer_ms(std::uint64_t blocks) const noexcept;
  [[nodiscard]] const DisaggSimParams& params() const noexcept { return p_; }

 private:
  DisaggSimParams p_;
  std::uint64_t block_bytes_ = 0;
  double wire_bytes_per_ms_ = 0;
  double hash_bytes_per_ms_ = 0;
};

/// Range checks of [disagg] (each issue named "disagg.<field>"); throws ConfigError.
void validate(const DisaggSimParams& params);

}  // namespace meridian::sim
