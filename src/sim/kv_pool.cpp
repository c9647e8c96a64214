// KvPool: block allocation with content hashes, and prompt prefix lookups.
#include <algorithm>

#include "sim/policy.h"

namespace meridian::sim::detail {

bool KvPool::allocate(RequestId id, BlockTier tier, std::uint32_t count) {
  if (count == 0) return true;
  const std::uint32_t first = held(id);
  scratch_.resize(count);
  for (std::uint32_t i = 0; i < count; ++i) scratch_[i] = hash_(id, first + i);
  return kv_.allocate(id, tier, count, scratch_).ok();
}

KvPool::PrefixMatch KvPool::match_prefix(RequestId id, std::uint32_t tokens) {
  PrefixMatch out;
  if (tokens <= 1 || held(id) > 0) return out;
  const std::uint32_t full = (tokens - 1) / block_tokens_;
  scratch_.resize(full);
  for (std::uint32_t i = 0; i < full; ++i) scratch_[i] = hash_(id, i);
  out.blocks = full == 0 ? 0 : kv_.match_prefix(scratch_, &out.evictable);
  out.tokens = out.blocks * block_tokens_;
  return out;
}

std::uint32_t KvPool::attach_prefix(RequestId id, std::uint32_t tokens, bool first_admission) {
  if (tokens <= 1 || held(id) > 0) return 0;
  const std::uint32_t full = (tokens - 1) / block_tokens_;
  scratch_.resize(full);
  for (std::uint32_t i = 0; i < full; ++i) scratch_[i] = hash_(id, i);
  const std::uint32_t hit = full == 0 ? 0 : kv_.attach_prefix(id, scratch_);
  if (first_admission) {
    lookup_blocks_ += full;
    hit_blocks_ += hit;
  }
  return hit * block_tokens_;
}

}  // namespace meridian::sim::detail
