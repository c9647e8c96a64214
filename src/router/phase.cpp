#include "meridian/phase.h"

#include "meridian/phase_router.h"

namespace meridian {

std::string_view to_string(PhaseEventKind kind) noexcept {
  switch (kind) {
    case PhaseEventKind::kEnterThink: return "enter_think";
    case PhaseEventKind::kExitThink: return "exit_think";
    case PhaseEventKind::kForceBudget: return "force_budget";
    case PhaseEventKind::kComplete: return "complete";
  }
  return "unknown";
}

std::string_view to_string(ForceResult result) noexcept {
  switch (result) {
    case ForceResult::kIssued: return "issued";
    case ForceResult::kAlreadyPending: return "already_pending";
    case ForceResult::kTooEarly: return "too_early";
    case ForceResult::kDeferredToolCall: return "deferred_tool_call";
    case ForceResult::kNotThinking: return "not_thinking";
    case ForceResult::kUnknownRequest: return "unknown_request";
  }
  return "unknown";
}

}  // namespace meridian
