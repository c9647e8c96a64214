// Intrusive doubly-linked lists over block indices: every block is in exactly
// one list (free, or live/cached per tier), so membership, O(1) removal and LRU
// order come from two index arrays instead of per-node allocations.
//
// Thread-safety: none (owned by KvBlockManager::Impl).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

namespace meridian::kv_detail {

inline constexpr std::uint32_t kNil = std::numeric_limits<std::uint32_t>::max();

/// List ids: live tiers 0..2, cached tiers 3..5, free 6.
inline constexpr std::uint8_t kCachedBase = 3;
inline constexpr std::uint8_t kFreeList = 6;
inline constexpr std::size_t kListCount = 7;

class BlockLists {
 public:
  explicit BlockLists(std::uint32_t num_blocks)
      : prev_(num_blocks, kNil), next_(num_blocks, kNil), list_of_(num_blocks, kFreeList) {
    // Every block starts on the free list, lowest id first.
    for (std::uint32_t b = 0; b < num_blocks; ++b) link_back(kFreeList, b);
  }

  [[nodiscard]] std::uint8_t list_of(std::uint32_t block) const { return list_of_[block]; }
  [[nodiscard]] std::uint32_t size(std::uint8_t list) const { return heads_[list].size; }
  [[nodiscard]] std::uint32_t front(std::uint8_t list) const { return heads_[list].head; }
  [[nodiscard]] std::uint32_t next(std::uint32_t block) const { return next_[block]; }

  /// Moves `block` to the back (most recently used end) of `list`.
  void move_to_back(std::uint8_t list, std::uint32_t block) {
    unlink(block);
    link_back(list, block);
  }

 private:
  struct Head {
    std::uint32_t head = kNil;
    std::uint32_t tail = kNil;
    std::uint32_t size = 0;
  };

  void unlink(std::uint32_t block) {
    Head& h = heads_[list_of_[block]];
    const std::uint32_t p = prev_[block];
    const std::uint32_t n = next_[block];
    (p == kNil ? h.head : next_[p]) = n;
    (n == kNil ? h.tail : prev_[n]) = p;
    --h.size;
  }

  void link_back(std::uint8_t list, std::uint32_t block) {
    Head& h = heads_[list];
    prev_[block] = h.tail;
    next_[block] = kNil;
    (h.tail == kNil ? h.head : next_[h.tail]) = block;
    h.tail = block;
    ++h.size;
    list_of_[block] = list;
  }

  std::vector<std::uint32_t> prev_;
  std::vector<std::uint32_t> next_;
  std::vector<std::uint8_t> list_of_;
  std::array<Head, kListCount> heads_{};
};

}  // namespace meridian::kv_detail
