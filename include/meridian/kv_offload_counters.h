// Counters of the KV offloader (meridian/kv_offload.h), in a header of their
// own so the telemetry feed in meridian_core (EngineMetrics::sync_offload)
// reads them without depending on meridian_disagg.
//
// Thread-safety: a plain value; the offloader updates its copy on the engine
// loop and hands out const references. Ownership: value type.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "meridian/kv_block_manager.h"

namespace meridian {

/// Why an offload batch stayed local (its blocks remain ThinkComplete/live and
/// evictable as usual). Indices match the catalog's `reason` label values.
enum class OffloadFallbackReason : std::uint8_t {
  kBusy = 0,       ///< the fabric answered kBusy (its queue or memory is full)
  kDown = 1,       ///< the fabric or its peer is unavailable
  kQueueFull = 2,  ///< max_inflight_batches already in flight
  kFailed = 3,     ///< push or transfer failed
  kTimeout = 4,    ///< not committed within transfer_timeout
};
inline constexpr std::size_t kOffloadFallbackReasonCount = 5;

/// The catalog's `reason` label value.
[[nodiscard]] constexpr std::string_view to_string(OffloadFallbackReason reason) noexcept {
  switch (reason) {
    case OffloadFallbackReason::kBusy: return "busy";
    case OffloadFallbackReason::kDown: return "down";
    case OffloadFallbackReason::kQueueFull: return "queue_full";
    case OffloadFallbackReason::kFailed: return "failed";
    case OffloadFallbackReason::kTimeout: return "timeout";
  }
  return "unknown";
}

struct KvOffloadCounters {
  std::uint64_t batches_pushed = 0;     ///< payloads the fabric accepted
  std::uint64_t batches_committed = 0;  ///< payloads committed and marked remote
  std::uint64_t batches_cancelled = 0;  ///< request released while its batch was in flight
  std::array<std::uint64_t, kBlockTierCount> blocks_offloaded{};  ///< committed blocks by tier
  std::uint64_t blocks_ingested = 0;                              ///< blocks restored byte for byte
  std::uint64_t bytes_pushed = 0;                                 ///< payload bytes accepted by the fabric
  std::uint64_t bytes_pulled = 0;                                 ///< payload bytes pulled back
  std::array<std::uint64_t, kOffloadFallbackReasonCount> fallbacks{};  ///< batches, by reason
  std::uint64_t fallback_blocks = 0;                                   ///< blocks of those batches
  std::uint64_t corrupt_payloads = 0;  ///< pulled payloads rejected (checksum, format, shape)
  std::uint64_t pull_failures = 0;     ///< pulls the fabric could not serve
  std::uint64_t recompute_blocks = 0;  ///< remote blocks lost: the caller recomputes them
  std::uint64_t inflight_batches = 0;  ///< gauge: pushed, not yet settled

  [[nodiscard]] std::uint64_t blocks_offloaded_total() const noexcept {
    return blocks_offloaded[0] + blocks_offloaded[1] + blocks_offloaded[2];
  }
  [[nodiscard]] std::uint64_t fallback(OffloadFallbackReason reason) const noexcept {
    return fallbacks[static_cast<std::size_t>(reason)];
  }
};

}  // namespace meridian
