// The simulator's KV block hashes: which blocks a later request may find in the prefix cache.
//
// Blocks that hold conversation transcript (the prompt, and the answer of a request without
// reasoning) hash by (conversation, position), so the next turn finds them; every other block
// is unique to its request. The key packs (shared or not, owner, block index) into 64 bits
// without overlap and mix64() is a bijection, so blocks of different owners never share a
// hash. The owner is the request id or its conversation's dense ordinal, never an id a trace
// chose: hashing those directly, a crafted `conversation` matched another request's blocks and
// faked a prefix hit.
//
// Internal header. Thread-safety: const methods are safe to call concurrently. Holds a
// reference to the workload, which must outlive it.
#pragma once

#include <cstdint>
#include <vector>

#include <absl/container/flat_hash_map.h>
#include <fmt/format.h>

#include "meridian/error.h"
#include "meridian/sim_workload.h"

namespace meridian::sim {

class BlockHashes {
 public:
  BlockHashes(const Workload& workload, std::uint32_t block_tokens)
      : w_(workload), block_tokens_(block_tokens) {
    ordinal_.reserve(w_.requests.size());
    absl::flat_hash_map<std::uint64_t, std::uint64_t> ordinal_of;
    for (const RequestSpec& r : w_.requests) {
      ordinal_.push_back(r.conversation == 0
                             ? 0
                             : ordinal_of.try_emplace(r.conversation, ordinal_of.size() + 1).first->second);
    }
  }

  /// The hash of block `index` of request `id` (1-based, as in the workload).
  [[nodiscard]] std::uint64_t operator()(RequestId id, std::uint32_t index) const {
    const RequestSpec& r = w_.requests[id - 1];
    std::uint64_t owner = id;
    std::uint64_t shared = 0;
    if (r.conversation > 0) {
      const std::uint64_t transcript =
          std::uint64_t{r.prompt_tokens} + (r.reasoning() ? 0U : r.answer_tokens);
      if ((std::uint64_t{index} + 1) * block_tokens_ <= transcript) {
        owner = ordinal_[id - 1];
        shared = kShared;
      }
    }
    if (owner >> kOwnerBits != 0 || index >> kIndexBits != 0) {
      throw InvalidArgument(
          fmt::format("replay: block {} of request {} is outside the block hashes' key space", index, id));
    }
    return mix64(shared | (owner << kIndexBits) | index);
  }

 private:
  static constexpr unsigned kIndexBits = 26;  // a request that fits holds < 2^26 KV tokens
  static constexpr unsigned kOwnerBits = 37;  // requests and conversations: at most 5 M
  static constexpr std::uint64_t kShared = std::uint64_t{1} << 63U;

  const Workload& w_;
  std::uint32_t block_tokens_;
  std::vector<std::uint64_t> ordinal_;  // per request: its conversation's ordinal, 1.. (0: none)
};

}  // namespace meridian::sim
