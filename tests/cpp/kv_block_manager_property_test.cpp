// RapidCheck properties of the block manager over random operation sequences:
// every block is in exactly one tier list or free, used bytes never exceed the
// capacity, the soft think share's headroom reads consistently, and a failed
// allocation changes nothing.
#include <cstring>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "meridian/kv_block_manager.h"

namespace meridian {
namespace {

struct Op {
  int kind = 0;  // 0 allocate, 1 attach, 2 demote, 3 release, 4 touch
  RequestId request = 1;
  int tier = 1;
  std::uint32_t count = 1;
  int release_kind = 0;
  std::uint64_t hash_base = 0;
  bool hashed = false;
};

std::vector<std::uint64_t> chain(std::uint64_t base, std::uint32_t n) {
  std::vector<std::uint64_t> h(n);
  for (std::uint32_t i = 0; i < n; ++i) h[i] = base * 64 + i;
  return h;
}

bool same_usage(const KvBlockUsage& a, const KvBlockUsage& b) {
  return a.free_blocks == b.free_blocks && a.allocatable_blocks == b.allocatable_blocks &&
         std::memcmp(a.live_blocks, b.live_blocks, sizeof a.live_blocks) == 0 &&
         std::memcmp(a.cached_blocks, b.cached_blocks, sizeof a.cached_blocks) == 0;
}

RC_GTEST_PROP(KvBlockManagerProperty, InvariantsHoldOverRandomOperations, ()) {
  KvBlockManagerOptions o;
  o.num_blocks = *rc::gen::inRange<std::uint32_t>(1, 48);
  o.block_size_bytes = 4096;
  o.think_phase_memory_fraction = *rc::gen::inRange(5, 95) / 100.0;
  o.aggressive_think_eviction = *rc::gen::arbitrary<bool>();
  o.fabric_offload = *rc::gen::arbitrary<bool>();
  KvBlockManager m(o);
  const auto ops = *rc::gen::container<std::vector<Op>>(
      rc::gen::build<Op>(rc::gen::set(&Op::kind, rc::gen::inRange(0, 5)),
                         rc::gen::set(&Op::request, rc::gen::inRange<RequestId>(1, 7)),
                         rc::gen::set(&Op::tier, rc::gen::inRange(0, 3)),
                         rc::gen::set(&Op::count, rc::gen::inRange<std::uint32_t>(0, 12)),
                         rc::gen::set(&Op::release_kind, rc::gen::inRange(0, 5)),
                         rc::gen::set(&Op::hash_base, rc::gen::inRange<std::uint64_t>(0, 4)),
                         rc::gen::set(&Op::hashed, rc::gen::arbitrary<bool>())));
  for (const Op& op : ops) {
    switch (op.kind) {
      case 0: {
        const KvBlockUsage before = m.usage();
        const KvBlockCounters counters_before = m.counters();
        const auto owned_before = m.blocks_of(op.request).size();
        const auto h =
            op.hashed ? chain(op.hash_base * 8 + op.request, op.count) : std::vector<std::uint64_t>{};
        const AllocResult r = m.allocate(op.request, static_cast<BlockTier>(op.tier), op.count, h);
        if (!r.ok()) {
          RC_ASSERT(r.blocks.empty());
          RC_ASSERT(r.reclaimed.empty());
          RC_ASSERT(same_usage(before, m.usage()));
          RC_ASSERT(m.blocks_of(op.request).size() == owned_before);
          RC_ASSERT(m.counters().allocated_blocks == counters_before.allocated_blocks);
        } else {
          RC_ASSERT(r.blocks.size() == op.count);
          for (BlockId b : r.blocks) RC_ASSERT(m.tier_of(b) == static_cast<BlockTier>(op.tier));
        }
        break;
      }
      case 1: {
        const auto h = chain(op.hash_base * 8 + (op.request % 3 + 1), op.count);
        const std::uint32_t expected = m.match_prefix(h);
        RC_ASSERT(m.attach_prefix(op.request, h) == expected);
        break;
      }
      case 2: m.demote_think_blocks(op.request); break;
      case 3: m.release(op.request, static_cast<ReleaseKind>(op.release_kind), op.hashed); break;
      default: m.touch(op.request); break;
    }
    const std::string problem = m.check_invariants();
    RC_ASSERT(problem == "");
    const KvBlockUsage u = m.usage();
    RC_ASSERT(u.used_bytes() <= std::uint64_t{o.num_blocks} * o.block_size_bytes);
    // The share is soft (ADR-0015): think KV may pass it; the headroom then reads 0.
    RC_ASSERT(u.think_headroom() ==
              (u.live_blocks[1] >= u.think_block_limit ? 0U : u.think_block_limit - u.live_blocks[1]));
    std::uint32_t in_tiers = u.free_blocks;
    for (std::size_t t = 0; t < kBlockTierCount; ++t) in_tiers += u.live_blocks[t] + u.cached_blocks[t];
    RC_ASSERT(in_tiers == o.num_blocks);
  }
}

}  // namespace
}  // namespace meridian
