// Meridian's shared vocabulary: the ids and phase names every component speaks
// (router, scheduler, KV block manager, signals, kernels, simulator).
//
// Header-only and dependency-free (target meridian::types), so the probe
// kernels can name a token id without reaching into the router.
//
// Thread-safety: plain values, freely copyable between threads.
#pragma once

#include <cstdint>
#include <string_view>

namespace meridian {

/// Engine request id. String ids are interned by RequestIdMap.
using RequestId = std::uint64_t;
/// Vocabulary id of one token.
using TokenId = std::uint32_t;

/// Where a request is. Phases only move forward, in this order.
enum class Phase : std::uint8_t {
  kPrefill = 0,       ///< registered, no token generated yet
  kThinkDecode = 1,   ///< inside <think> ... </think>
  kOutputDecode = 2,  ///< visible answer
  kComplete = 3,      ///< EOS seen (the router forgets the request at once)
};

/// Why the end of thinking was forced.
enum class ForceReason : std::uint8_t {
  kConverged = 0,     ///< EAT: entropy after </think> has settled
  kOverthinking = 1,  ///< RPDI: local transition rate far above the global rate
  kHardCap = 2,       ///< scheduler.max_think_tokens reached
};

/// "prefill", "think_decode", "output_decode", "complete".
[[nodiscard]] constexpr std::string_view to_string(Phase phase) noexcept {
  switch (phase) {
    case Phase::kPrefill: return "prefill";
    case Phase::kThinkDecode: return "think_decode";
    case Phase::kOutputDecode: return "output_decode";
    case Phase::kComplete: return "complete";
  }
  return "unknown";
}

/// "converged", "overthinking", "hard_cap".
[[nodiscard]] constexpr std::string_view to_string(ForceReason reason) noexcept {
  switch (reason) {
    case ForceReason::kConverged: return "converged";
    case ForceReason::kOverthinking: return "overthinking";
    case ForceReason::kHardCap: return "hard_cap";
  }
  return "unknown";
}

/// The bounds of a request's SLO it can miss, as bits of one mask (a request
/// can miss several). The replay's [slo] section and the engine telemetry's
/// RequestClock apply them; meridian_slo_bound_misses_total counts each.
enum SloMiss : std::uint8_t {
  kSloMissIncomplete = 1U << 0U,  ///< never completed (rejected, aborted, unfinished)
  kSloMissTtft = 1U << 1U,        ///< first token later than the TTFT bound
  kSloMissTtfv = 1U << 2U,        ///< a reasoning request's first answer token later than the TTFV bound
  kSloMissThinkTpot = 1U << 3U,   ///< think tokens slower than the think TPOT bound
  kSloMissOutputTpot = 1U << 4U,  ///< answer tokens slower than the answer TPOT bound
};
inline constexpr std::uint8_t kSloMissBounds = 5;  ///< the bits above, lowest first

/// "incomplete", "ttft", "ttfv", "think_tpot", "output_tpot" for bit `index` (0..4).
[[nodiscard]] constexpr std::string_view slo_miss_name(std::uint8_t index) noexcept {
  switch (index) {
    case 0: return "incomplete";
    case 1: return "ttft";
    case 2: return "ttfv";
    case 3: return "think_tpot";
    case 4: return "output_tpot";
    default: return "unknown";
  }
}

}  // namespace meridian
