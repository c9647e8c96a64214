#include <absl/base/thread_annotations.h>
#include <absl/container/flat_hash_map.h>
#include <fmt/format.h>

#include "meridian/fabric.h"
#include "sync/mutex.h"

namespace meridian {

struct InProcessFabric::Impl {
  struct Entry {
    std::vector<std::byte> payload;
    std::uint32_t polls_left = 0;  ///< polls before it commits
    TransferState state = TransferState::kInFlight;
  };

  explicit Impl(InProcessFabricOptions o) : options(o) {}

  const InProcessFabricOptions options;
  mutable sync::Mutex mu;
  absl::flat_hash_map<FabricHandle, Entry> entries ABSL_GUARDED_BY(mu);
  std::uint64_t held_bytes ABSL_GUARDED_BY(mu) = 0;  ///< in flight + committed
  FabricHandle next_handle ABSL_GUARDED_BY(mu) = 1;  ///< 0 is never a handle
  bool down ABSL_GUARDED_BY(mu) = false;
};

InProcessFabric::InProcessFabric(InProcessFabricOptions options) : impl_(std::make_unique<Impl>(options)) {}
InProcessFabric::~InProcessFabric() = default;

PushResult InProcessFabric::push(std::span<const std::byte> payload) {
  Impl& f = *impl_;
  sync::Lock lock(f.mu);
  if (f.down) return {FabricStatus::kUnavailable, 0, "nixl-synth fabric is down"};
  if (f.entries.size() >= f.options.max_entries) {
    return {FabricStatus::kBusy, 0,
            fmt::format("nixl-synth fabric holds its maximum of {} payloads", f.entries.size())};
  }
  if (payload.size() > f.options.capacity_bytes - std::min(f.held_bytes, f.options.capacity_bytes)) {
    return {FabricStatus::kBusy, 0,
            fmt::format("nixl-synth fabric full: {} of {} bytes held, payload of {} bytes", f.held_bytes,
                        f.options.capacity_bytes, payload.size())};
  }
  const FabricHandle handle = f.next_handle++;
  Impl::Entry entry;
  entry.payload.assign(payload.begin(), payload.end());
  entry.polls_left = f.options.commit_after_polls;
  entry.state = entry.polls_left == 0 ? TransferState::kCommitted : TransferState::kInFlight;
  f.held_bytes += payload.size();
  f.entries.emplace(handle, std::move(entry));
  return {FabricStatus::kOk, handle, {}};
}

TransferState InProcessFabric::poll(FabricHandle handle) {
  Impl& f = *impl_;
  sync::Lock lock(f.mu);
  const auto it = f.entries.find(handle);
  if (it == f.entries.end()) return TransferState::kUnknown;
  Impl::Entry& e = it->second;
  if (e.state == TransferState::kInFlight && --e.polls_left == 0) e.state = TransferState::kCommitted;
  return e.state;
}

PullResult InProcessFabric::pull(FabricHandle handle, std::vector<std::byte>& out) {
  Impl& f = *impl_;
  sync::Lock lock(f.mu);
  if (f.down) return {FabricStatus::kUnavailable, "nixl-synth fabric is down"};
  const auto it = f.entries.find(handle);
  if (it == f.entries.end()) {
    return {FabricStatus::kNotFound, fmt::format("no payload under handle {}", handle)};
  }
  if (it->second.state != TransferState::kCommitted) {
    return {FabricStatus::kFailed,
            fmt::format("payload {} is {}, not committed", handle, to_string(it->second.state))};
  }
  out.assign(it->second.payload.begin(), it->second.payload.end());
  return {};
}

void InProcessFabric::release(FabricHandle handle) {
  Impl& f = *impl_;
  sync::Lock lock(f.mu);
  const auto it = f.entries.find(handle);
  if (it == f.entries.end()) return;
  f.held_bytes -= it->second.payload.size();
  f.entries.erase(it);
}

std::string InProcessFabric::label() const { return "nixl-synth"; }

FabricHealth InProcessFabric::health() {
  Impl& f = *impl_;
  sync::Lock lock(f.mu);
  FabricHealth h;
  h.up = !f.down;
  for (const auto& [handle, e] : f.entries) {
    if (e.state == TransferState::kInFlight) {
      ++h.in_flight;
    } else if (e.state == TransferState::kCommitted) {
      h.stored_bytes += e.payload.size();
    }
  }
  h.capacity_bytes = f.options.capacity_bytes;
  h.detail = fmt::format("in-process fabric: {} payloads{}", f.entries.size(), f.down ? ", down" : "");
  return h;
}

void InProcessFabric::set_down(bool down) {
  Impl& f = *impl_;
  sync::Lock lock(f.mu);
  f.down = down;
  if (!down) return;
  // The peer went away: nothing in flight will ever commit.
  for (auto& [handle, e] : f.entries) {
    if (e.state == TransferState::kInFlight) e.state = TransferState::kFailed;
  }
}

bool InProcessFabric::corrupt_byte(FabricHandle handle, std::size_t offset) {
  Impl& f = *impl_;
  sync::Lock lock(f.mu);
  const auto it = f.entries.find(handle);
  if (it == f.entries.end() || offset >= it->second.payload.size()) return false;
  it->second.payload[offset] ^= std::byte{1};
  return true;
}

std::size_t InProcessFabric::entries() const {
  Impl& f = *impl_;
  sync::Lock lock(f.mu);
  return f.entries.size();
}

}  // namespace meridian
