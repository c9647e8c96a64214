#include "meridian/fabric.h"

namespace meridian {

std::string_view to_string(FabricStatus status) noexcept {
  switch (status) {
    case FabricStatus::kOk: return "ok";
    case FabricStatus::kBusy: return "busy";
    case FabricStatus::kUnavailable: return "unavailable";
    case FabricStatus::kNotFound: return "not_found";
    case FabricStatus::kFailed: return "failed";
  }
  return "unknown";
}

std::string_view to_string(TransferState state) noexcept {
  switch (state) {
    case TransferState::kInFlight: return "in_flight";
    case TransferState::kCommitted: return "committed";
    case TransferState::kFailed: return "failed";
    case TransferState::kUnknown: return "unknown";
  }
  return "unknown";
}

}  // namespace meridian
