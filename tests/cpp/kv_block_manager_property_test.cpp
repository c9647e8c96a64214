// RapidCheck properties of the block manager over random operation sequences:
// every block is in exactly one tier list or free, used bytes never exceed the
// capacity, the soft think share's headroom reads consistently, and a failed
// allocation changes nothing. Remote blocks (pin, mark_remote, restore_remote,
// forget_remote) keep each request's logical block count: nothing lost,
// nothing double-freed.
#include <algorithm>
#include <cstring>
#include <map>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "meridian/kv_block_manager.h"

namespace meridian {
namespace {

struct Op {
  int kind =
      0;  // 0 allocate, 1 attach, 2 demote, 3 release, 4 touch, 5 pin, 6 commit pins, 7 restore, 8 forget
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

// `max_request` bounds the request ids, `min_length` the operation count and
// `min_blocks` the pool (long sequences on few requests and a roomy pool reach
// offload and restore more often).
void invariants_hold(RequestId max_request, std::size_t min_length, std::uint32_t min_blocks) {
  KvBlockManagerOptions o;
  o.num_blocks = *rc::gen::inRange<std::uint32_t>(min_blocks, 48);
  o.block_size_bytes = 4096;
  o.think_phase_memory_fraction = *rc::gen::inRange(5, 95) / 100.0;
  o.aggressive_think_eviction = *rc::gen::arbitrary<bool>();
  o.fabric_offload = *rc::gen::arbitrary<bool>();
  KvBlockManager m(o);
  const auto length = *rc::gen::inRange<std::size_t>(min_length, min_length + 100);
  const auto ops = *rc::gen::container<std::vector<Op>>(
      length, rc::gen::build<Op>(rc::gen::set(&Op::kind, rc::gen::inRange(0, 9)),
                                 rc::gen::set(&Op::request, rc::gen::inRange<RequestId>(1, max_request + 1)),
                                 rc::gen::set(&Op::tier, rc::gen::inRange(0, 3)),
                                 rc::gen::set(&Op::count, rc::gen::inRange<std::uint32_t>(0, 12)),
                                 rc::gen::set(&Op::release_kind, rc::gen::inRange(0, 5)),
                                 rc::gen::set(&Op::hash_base, rc::gen::inRange<std::uint64_t>(0, 4)),
                                 rc::gen::set(&Op::hashed, rc::gen::arbitrary<bool>())));
  bool restored_any = false;
  std::uint64_t next_token = 1;
  std::uint64_t next_handle = 1;
  // Pinned, not yet committed, per request: what an offload batch in flight holds.
  std::map<RequestId, std::pair<std::uint64_t, std::vector<BlockId>>> pinned;
  for (const Op& op : ops) {
    const std::size_t logical_before = m.block_locations(op.request).size();
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
        if (logical_before != 0) {
          // A prefix attaches only before a request's first block: refused, nothing changed.
          const KvBlockUsage before = m.usage();
          RC_ASSERT_THROWS_AS(m.attach_prefix(op.request, h), InvalidArgument);
          RC_ASSERT(same_usage(before, m.usage()));
          RC_ASSERT(m.block_locations(op.request).size() == logical_before);
          break;
        }
        RC_ASSERT(m.attach_prefix(op.request, h) == expected);
        break;
      }
      case 2: m.demote_think_blocks(op.request); break;
      case 3:
        m.release(op.request, static_cast<ReleaseKind>(op.release_kind), op.hashed);
        RC_ASSERT(m.block_locations(op.request).empty());
        pinned.erase(op.request);
        break;
      case 4: m.touch(op.request); break;
      case 5: {
        if (pinned.contains(op.request)) break;
        auto candidates = m.offload_candidates(
            op.request, op.release_kind == 0 ? OffloadScope::kThinkComplete : OffloadScope::kAllTiers);
        if (candidates.size() > op.count + 1) candidates.resize(op.count + 1);
        if (candidates.empty()) break;
        m.pin(op.request, candidates, next_token);
        for (BlockId b : candidates) RC_ASSERT(m.pin_token(b) == next_token);
        for (BlockId b : m.offload_candidates(op.request, OffloadScope::kAllTiers)) {
          RC_ASSERT(std::find(candidates.begin(), candidates.end(), b) == candidates.end());
        }
        pinned[op.request] = {next_token++, candidates};
        if (op.release_kind == 1) break;
        [[fallthrough]];  // commit at once: the fabric was fast
      }
      case 6: {
        const auto it = pinned.find(op.request);
        if (it == pinned.end()) break;
        const auto& [token, blocks] = it->second;
        std::vector<RemoteBlockRef> refs;
        for (std::size_t i = 0; i < blocks.size(); ++i) {
          RC_ASSERT(m.pin_token(blocks[i]) == token);
          refs.push_back({next_handle, static_cast<std::uint32_t>(i), m.tier_of(blocks[i])});
        }
        const std::uint32_t free_before = m.usage().free_blocks;
        m.mark_remote(op.request, blocks, refs);
        ++next_handle;
        for (BlockId b : blocks) RC_ASSERT(m.is_free(b));
        RC_ASSERT(m.usage().free_blocks == free_before + blocks.size());
        RC_ASSERT(m.block_locations(op.request).size() == logical_before);
        pinned.erase(it);
        break;
      }
      case 7:
      case 8: {
        const auto handles = m.remote_handles(op.request);
        if (handles.empty()) break;
        const std::uint64_t handle = handles[op.count % handles.size()];
        if (op.kind == 8 && op.hashed) break;  // forget less often than restore
        const auto entries = m.remote_entries(op.request, handle);
        if (op.kind == 8) {
          RC_ASSERT(m.forget_remote(op.request, handle) == entries.size());
          RC_ASSERT(m.block_locations(op.request).size() == logical_before - entries.size());
          break;
        }
        const auto locations = m.block_locations(op.request);
        const AllocResult r = m.restore_remote(op.request, handle);
        if (!r.ok()) {
          RC_ASSERT(r.status == AllocStatus::kOutOfBlocks);
          RC_ASSERT(m.block_locations(op.request) == locations);
          break;
        }
        RC_ASSERT(r.blocks.size() == entries.size());
        for (std::size_t i = 0; i < entries.size(); ++i) RC_ASSERT(m.tier_of(r.blocks[i]) == entries[i].tier);
        for (const ReclaimedBlock& rb : r.reclaimed) RC_ASSERT(rb.owner != op.request);
        // Every restored block sits where its remote entry was.
        const auto after = m.block_locations(op.request);
        RC_ASSERT(after.size() == logical_before);
        for (std::size_t p = 0; p < locations.size(); ++p) {
          if (locations[p].kind != BlockLocation::Kind::kRemote || locations[p].remote.handle != handle)
            continue;
          RC_ASSERT(after[p].kind == BlockLocation::Kind::kLocal);
          RC_ASSERT(after[p].block == r.blocks[locations[p].remote.frame]);
        }
        RC_ASSERT(m.remote_entries(op.request, handle).empty());
        restored_any = true;
        break;
      }
      default: break;
    }
    // A pinned block is never taken, shared or freed behind the pin's back.
    for (const auto& [request, pin] : pinned) {
      for (BlockId b : pin.second) {
        RC_ASSERT(m.pin_token(b) == pin.first);
        RC_ASSERT(!m.is_free(b));
      }
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
  RC_CLASSIFY(restored_any, "restored remote blocks");
  RC_CLASSIFY(m.remote_block_count() > 0, "ended with remote blocks");
}

RC_GTEST_PROP(KvBlockManagerProperty, InvariantsHoldOverRandomOperations, ()) { invariants_hold(6, 0, 1); }

RC_GTEST_PROP(KvBlockManagerProperty, RemoteBlocksAreConservedOverLongSequences, ()) {
  invariants_hold(3, 60, 24);
}

}  // namespace
}  // namespace meridian
