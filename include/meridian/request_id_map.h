// RequestIdMap: gives each engine request id string (vLLM uses strings) a
// 64-bit RequestId for the router and the scheduler. Ids are handed out from
// a counter, never derived from a hash, so two live strings can never share
// an id, and an id is not reused after release() (a late token for a
// finished request can't be attributed to a newer one).
//
// Thread-safety: all member functions may be called concurrently; the map is
// sharded, each shard guarded by its own mutex.
// Ownership: stores its own copies of the strings.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "meridian/phase.h"

namespace meridian {

class RequestIdMap {
 public:
  RequestIdMap();
  ~RequestIdMap();
  RequestIdMap(const RequestIdMap&) = delete;
  RequestIdMap& operator=(const RequestIdMap&) = delete;
  RequestIdMap(RequestIdMap&&) = delete;
  RequestIdMap& operator=(RequestIdMap&&) = delete;

  /// The id of `external_id`, assigning the next free one if it is new.
  RequestId intern(std::string_view external_id);
  /// The id of `external_id` if it is mapped.
  [[nodiscard]] std::optional<RequestId> find(std::string_view external_id) const;
  /// Forget `external_id`; returns its id if it was mapped.
  std::optional<RequestId> release(std::string_view external_id);
  /// Number of strings currently mapped.
  [[nodiscard]] std::size_t size() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meridian
