// Vocabulary types of the phase router: request/token ids, phases, events.
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

enum class PhaseEventKind : std::uint8_t {
  kEnterThink = 0,   ///< think block opened
  kExitThink = 1,    ///< </think> observed; think_tokens is final
  kForceBudget = 2,  ///< the caller must force </think> (reason; reissue when repeated)
  kComplete = 3,     ///< EOS observed; the request is no longer tracked
};

/// Something the caller may need to act on or count.
struct PhaseEvent {
  RequestId request_id = 0;
  PhaseEventKind kind = PhaseEventKind::kEnterThink;
  ForceReason reason = ForceReason::kHardCap;  ///< kForceBudget; kExitThink when forced
  bool reissue = false;            ///< kForceBudget: an earlier force has not landed within the grace
  bool forced = false;             ///< kExitThink: a force was pending when </think> arrived
  std::uint64_t think_tokens = 0;  ///< think tokens generated so far

  friend bool operator==(const PhaseEvent&, const PhaseEvent&) = default;
};

[[nodiscard]] std::string_view to_string(Phase phase) noexcept;
[[nodiscard]] std::string_view to_string(ForceReason reason) noexcept;
[[nodiscard]] std::string_view to_string(PhaseEventKind kind) noexcept;

}  // namespace meridian
