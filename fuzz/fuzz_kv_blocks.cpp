// Block-manager operation sequences: bytes decode into allocate (with and
// without prefix hashes, in any tier), attach_prefix, demote, release of every
// kind and touch, on a small pool with fuzzed options. attach_prefix is refused
// (InvalidArgument, nothing changed) exactly for request id 0, a repeated hash
// or a request that already holds blocks. After every operation
// the manager's full consistency check holds, a failed allocation changed
// nothing, and the occupancy adds up; once every request is released, no
// block is live.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "fuzz_check.h"
#include "meridian/error.h"
#include "meridian/kv_block_manager.h"
#include <fuzzer/FuzzedDataProvider.h>

namespace meridian::fuzz {
namespace {

constexpr RequestId kMaxId = 8;
constexpr std::size_t kMaxOps = 2048;

bool same_usage(const KvBlockUsage& a, const KvBlockUsage& b) {
  return a.free_blocks == b.free_blocks && a.allocatable_blocks == b.allocatable_blocks &&
         std::memcmp(a.live_blocks, b.live_blocks, sizeof a.live_blocks) == 0 &&
         std::memcmp(a.cached_blocks, b.cached_blocks, sizeof a.cached_blocks) == 0;
}

std::vector<std::uint64_t> hashes(FuzzedDataProvider& in, std::uint32_t count) {
  // A chain from a small set of roots, so prefixes recur and collide.
  const auto root = in.ConsumeIntegralInRange<std::uint64_t>(0, 5);
  std::vector<std::uint64_t> h(count);
  for (std::uint32_t i = 0; i < count; ++i) h[i] = root * 1000 + i;
  return h;
}

void check_usage(const KvBlockManager& m, const KvBlockManagerOptions& o) {
  const std::string problem = m.check_invariants();
  check(problem.empty(), "check_invariants(): " + problem);
  const KvBlockUsage u = m.usage();
  std::uint64_t in_lists = u.free_blocks;
  for (std::size_t t = 0; t < kBlockTierCount; ++t) {
    in_lists += std::uint64_t{u.live_blocks[t]} + u.cached_blocks[t];
  }
  check(in_lists == o.num_blocks, "every block is free, live or cached");
  check(u.allocatable_blocks <= o.num_blocks, "allocatable blocks within the pool");
  check(u.used_bytes() <= std::uint64_t{o.num_blocks} * o.block_size_bytes, "used bytes within the capacity");
}

void allocate(FuzzedDataProvider& in, KvBlockManager& m, RequestId r) {
  const auto tier = static_cast<BlockTier>(in.ConsumeIntegralInRange<int>(0, 2));
  const auto count = in.ConsumeIntegralInRange<std::uint32_t>(0, 20);
  const std::vector<std::uint64_t> h = in.ConsumeBool() ? hashes(in, count) : std::vector<std::uint64_t>{};
  const KvBlockUsage before = m.usage();
  const std::uint64_t allocated_before = m.counters().allocated_blocks;
  const std::size_t owned_before = m.blocks_of(r).size();
  const AllocResult result = m.allocate(r, tier, count, h);
  if (!result.ok()) {
    check(tier == BlockTier::kThinkComplete ? result.status == AllocStatus::kInvalidTier
                                            : result.status == AllocStatus::kOutOfBlocks,
          "allocation fails only for the ThinkComplete tier or a short pool");
    check(result.blocks.empty() && result.reclaimed.empty(), "a failed allocation returns nothing");
    check(same_usage(before, m.usage()), "a failed allocation changes no occupancy");
    check(m.blocks_of(r).size() == owned_before, "a failed allocation changes no block list");
    check(m.counters().allocated_blocks == allocated_before, "a failed allocation allocates nothing");
    return;
  }
  check(result.blocks.size() == count, "a successful allocation returns every block");
  // Fabric offload may take the request's own live ThinkComplete blocks.
  const auto own_offloaded = static_cast<std::size_t>(std::count_if(
      result.reclaimed.begin(), result.reclaimed.end(),
      [r](const ReclaimedBlock& b) { return b.owner == r && b.action == ReclaimAction::kOffload; }));
  check(m.blocks_of(r).size() == owned_before + count - own_offloaded,
        "the blocks are appended to the request's list");
  for (BlockId b : result.blocks) {
    check(!m.is_free(b) && m.tier_of(b) == tier, fmt::format("block {} is live in the requested tier", b));
  }
}

void run(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  KvBlockManagerOptions o;
  o.num_blocks = in.ConsumeIntegralInRange<std::uint32_t>(1, 64);
  o.block_size_bytes = in.ConsumeIntegralInRange<std::uint64_t>(1, 1U << 20);
  o.think_phase_memory_fraction = in.ConsumeIntegralInRange<int>(1, 99) / 100.0;
  o.aggressive_think_eviction = in.ConsumeBool();
  o.fabric_offload = in.ConsumeBool();
  KvBlockManager m(o);
  for (std::size_t op = 0; op < kMaxOps && in.remaining_bytes() > 0; ++op) {
    const auto r = in.ConsumeIntegralInRange<RequestId>(1, kMaxId);
    switch (in.ConsumeIntegralInRange<int>(0, 5)) {
      case 0: allocate(in, m, r); break;
      case 1: {
        std::vector<std::uint64_t> h = hashes(in, in.ConsumeIntegralInRange<std::uint32_t>(0, 20));
        if (!h.empty() && in.ConsumeBool())
          h.push_back(h[in.ConsumeIntegralInRange<std::size_t>(0, h.size() - 1)]);
        const RequestId id = in.ConsumeBool() ? r : 0;  // 0: the reserved "no owner" id
        std::vector<std::uint64_t> sorted = h;
        std::sort(sorted.begin(), sorted.end());
        const bool repeats = std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end();
        const bool refused = id == 0 || repeats || !m.block_locations(id).empty();
        const KvBlockUsage before = m.usage();
        const std::uint32_t expected = m.match_prefix(h);
        bool threw = false;
        try {
          check(m.attach_prefix(id, h) == expected, "attach_prefix() reuses what match_prefix() promised");
        } catch (const InvalidArgument&) {
          threw = true;
          check(same_usage(before, m.usage()), "a refused attach_prefix() changes nothing");
        }
        check(threw == refused,
              "attach_prefix() is refused exactly for id 0, a repeated hash or a request that holds blocks");
        break;
      }
      case 2: {
        const std::size_t owned = m.blocks_of(r).size();
        const std::vector<BlockId> dropped = m.demote_think_blocks(r);
        check(o.aggressive_think_eviction || dropped.empty(),
              "blocks are dropped only under aggressive eviction");
        check(m.blocks_of(r).size() + dropped.size() == owned, "demotion keeps or drops each block");
        break;
      }
      case 3: {
        const auto kind = static_cast<ReleaseKind>(in.ConsumeIntegralInRange<int>(0, 4));
        m.release(r, kind, in.ConsumeBool());
        check(!m.holds_blocks(r), "a released request holds no blocks");
        break;
      }
      case 4: m.touch(r); break;
      default: {
        const auto b = in.ConsumeIntegralInRange<BlockId>(0, o.num_blocks - 1);
        static_cast<void>(m.tier_of(b));
        static_cast<void>(m.is_free(b));
        break;
      }
    }
    check_usage(m, o);
  }
  for (RequestId r = 1; r <= kMaxId; ++r) m.release(r, ReleaseKind::kAbort);
  check_usage(m, o);
  const KvBlockUsage u = m.usage();
  for (std::size_t t = 0; t < kBlockTierCount; ++t) {
    check(u.live_blocks[t] == 0, fmt::format("{} live blocks left in tier {} after every request ended",
                                             u.live_blocks[t], to_string(static_cast<BlockTier>(t))));
  }
}

}  // namespace
}  // namespace meridian::fuzz

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry point
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return meridian::fuzz::run_input([&] { meridian::fuzz::run(data, size); });
}
