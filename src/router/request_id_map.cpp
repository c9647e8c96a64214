#include "meridian/request_id_map.h"

#include <array>
#include <atomic>
#include <string>

#include <absl/container/flat_hash_map.h>
#include <absl/hash/hash.h>
#include <absl/strings/string_view.h>

#include "sync/mutex.h"

namespace meridian {
namespace {

constexpr std::size_t kShards = 16;

// Debian's abseil has its own string_view type (not std::string_view).
absl::string_view key_of(std::string_view s) { return {s.data(), s.size()}; }

struct alignas(64) Shard {
  mutable sync::Mutex mu;
  absl::flat_hash_map<std::string, RequestId> ids ABSL_GUARDED_BY(mu);  // heterogeneous lookup by string_view
};

}  // namespace

struct RequestIdMap::Impl {
  Shard& shard_for(std::string_view key) {
    return shards[absl::Hash<absl::string_view>{}(key_of(key)) % kShards];
  }
  const Shard& shard_for(std::string_view key) const {
    return shards[absl::Hash<absl::string_view>{}(key_of(key)) % kShards];
  }

  std::array<Shard, kShards> shards;
  std::atomic<RequestId> next{1};  // 0 is never handed out
  std::atomic<std::size_t> size{0};
};

RequestIdMap::RequestIdMap() : impl_(std::make_unique<Impl>()) {}
RequestIdMap::~RequestIdMap() = default;

RequestId RequestIdMap::intern(std::string_view external_id) {
  Shard& shard = impl_->shard_for(external_id);
  const sync::Lock lock(shard.mu);
  if (auto it = shard.ids.find(key_of(external_id)); it != shard.ids.end()) return it->second;
  const RequestId id = impl_->next.fetch_add(1, std::memory_order_relaxed);
  shard.ids.emplace(std::string(external_id), id);
  impl_->size.fetch_add(1, std::memory_order_relaxed);
  return id;
}

std::optional<RequestId> RequestIdMap::find(std::string_view external_id) const {
  const Shard& shard = impl_->shard_for(external_id);
  const sync::Lock lock(shard.mu);
  if (auto it = shard.ids.find(key_of(external_id)); it != shard.ids.end()) return it->second;
  return std::nullopt;
}

std::optional<RequestId> RequestIdMap::release(std::string_view external_id) {
  Shard& shard = impl_->shard_for(external_id);
  const sync::Lock lock(shard.mu);
  auto it = shard.ids.find(key_of(external_id));
  if (it == shard.ids.end()) return std::nullopt;
  const RequestId id = it->second;
  shard.ids.erase(it);
  impl_->size.fetch_sub(1, std::memory_order_relaxed);
  return id;
}

std::size_t RequestIdMap::size() const noexcept { return impl_->size.load(std::memory_order_relaxed); }

}  // namespace meridian
