// The phase router's events. The ids and phases themselves (RequestId,
// TokenId, Phase, ForceReason) are the shared vocabulary in meridian/types.h.
//
// Thread-safety: plain values, freely copyable between threads.
#pragma once

#include <cstdint>
#include <string_view>

#include "meridian/types.h"

namespace meridian {

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

[[nodiscard]] std::string_view to_string(PhaseEventKind kind) noexcept;

}  // namespace meridian
