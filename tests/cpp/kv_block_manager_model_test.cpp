// The block manager's public API against a reference model (issue 27): random
// sequences of allocate, attach_prefix, demote, release and touch, with
// repeated and conflicting calls (a prefix attached to a request that holds
// blocks, repeated hashes, the reserved id 0, the ThinkComplete tier, more
// blocks than exist). The model keeps each request's block count and decides,
// from the call alone, whether it must be refused; after every call the
// manager agrees with it and check_invariants() is clean.
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "meridian/error.h"
#include "meridian/kv_block_manager.h"

namespace meridian {
namespace {

struct Call {
  int kind = 0;  // 0 allocate, 1 attach_prefix, 2 demote, 3 release, 4 touch
  RequestId request = 1;
  int tier = 1;
  std::uint32_t count = 1;
  std::uint64_t root = 0;
  bool repeat = false;
};

struct Model {
  std::map<RequestId, std::size_t> held;  // blocks each request holds
  [[nodiscard]] std::size_t of(RequestId r) const {
    const auto it = held.find(r);
    return it == held.end() ? 0 : it->second;
  }
};

void agree(const KvBlockManager& m, const Model& model, RequestId max_request) {
  RC_ASSERT(m.check_invariants() == "");
  std::set<BlockId> live;
  std::size_t listed = 0;
  for (RequestId r = 0; r <= max_request; ++r) {
    const auto span = m.blocks_of(r);
    const std::vector<BlockId> blocks(span.begin(), span.end());
    RC_ASSERT(blocks.size() == model.of(r));
    // No block twice in one request's list.
    RC_ASSERT(std::set<BlockId>(blocks.begin(), blocks.end()).size() == blocks.size());
    live.insert(blocks.begin(), blocks.end());
    listed += blocks.size();
  }
  const KvBlockUsage u = m.usage();
  std::uint64_t live_total = 0;
  for (const std::uint64_t n : u.live_blocks) live_total += n;
  RC_ASSERT(live_total == live.size());  // shared blocks counted once
  RC_ASSERT(listed >= live.size());
  RC_ASSERT(u.free_blocks + live_total + u.cached_blocks[0] + u.cached_blocks[1] + u.cached_blocks[2] ==
            u.total_blocks);
}

RC_GTEST_PROP(KvBlockManagerModel, ThePublicApiAgreesWithAReferenceModel, ()) {
  constexpr RequestId kMaxRequest = 5;
  KvBlockManagerOptions o;
  o.num_blocks = *rc::gen::inRange<std::uint32_t>(1, 40);
  o.block_size_bytes = 4096;
  o.think_phase_memory_fraction = *rc::gen::inRange(5, 95) / 100.0;
  o.aggressive_think_eviction = *rc::gen::arbitrary<bool>();
  KvBlockManager m(o);
  Model model;
  const auto calls = *rc::gen::container<std::vector<Call>>(
      rc::gen::build<Call>(rc::gen::set(&Call::kind, rc::gen::inRange(0, 5)),
                           rc::gen::set(&Call::request, rc::gen::inRange<RequestId>(0, kMaxRequest + 1)),
                           rc::gen::set(&Call::tier, rc::gen::inRange(0, 3)),
                           rc::gen::set(&Call::count, rc::gen::inRange(0U, 12U)),
                           rc::gen::set(&Call::root, rc::gen::inRange<std::uint64_t>(0, 4)),
                           rc::gen::set(&Call::repeat, rc::gen::arbitrary<bool>())));
  for (const Call& c : calls) {
    const RequestId r = c.request;
    std::vector<std::uint64_t> h(c.count);
    for (std::uint32_t i = 0; i < c.count; ++i) h[i] = c.root * 100 + i;
    switch (c.kind) {
      case 0: {  // allocate, hashed so later prompts can hit
        const auto tier = static_cast<BlockTier>(c.tier);
        if (r == 0) {
          RC_ASSERT_THROWS_AS(m.allocate(r, tier, c.count, h), InvalidArgument);
          break;
        }
        const KvBlockUsage before = m.usage();
        const AllocResult a = m.allocate(r, tier, c.count, h);
        if (tier == BlockTier::kThinkComplete) {
          RC_ASSERT(a.status == AllocStatus::kInvalidTier);
        } else if (c.count > before.allocatable_blocks) {
          RC_ASSERT(a.status == AllocStatus::kOutOfBlocks);
        } else {
          RC_ASSERT(a.ok());
          RC_ASSERT(a.blocks.size() == c.count);
          if (c.count > 0) model.held[r] += c.count;
        }
        break;
      }
      case 1: {  // attach_prefix: refused exactly as the model says, else what match_prefix promised
        if (c.repeat && !h.empty()) h.push_back(h.front());
        std::vector<std::uint64_t> sorted = h;
        std::sort(sorted.begin(), sorted.end());
        const bool repeats = std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end();
        if (r == 0 || repeats || model.of(r) != 0) {
          RC_ASSERT_THROWS_AS(m.attach_prefix(r, h), InvalidArgument);
          break;
        }
        const std::uint32_t promised = m.match_prefix(h);
        RC_ASSERT(m.attach_prefix(r, h) == promised);
        if (promised > 0) model.held[r] = promised;
        break;
      }
      case 2: {  // demote: blocks stay unless aggressive eviction drops them
        const std::vector<BlockId> dropped = m.demote_think_blocks(r);
        RC_ASSERT(o.aggressive_think_eviction || dropped.empty());
        if (!dropped.empty()) {
          RC_ASSERT(dropped.size() <= model.of(r));
          model.held[r] -= dropped.size();
          if (model.held[r] == 0) model.held.erase(r);
        }
        break;
      }
      case 3:
        m.release(r, ReleaseKind::kFinished, c.repeat);
        model.held.erase(r);
        break;
      default: m.touch(r); break;
    }
    agree(m, model, kMaxRequest);
  }
  for (RequestId r = 1; r <= kMaxRequest; ++r) m.release(r, ReleaseKind::kFinished);
  model.held.clear();
  agree(m, model, kMaxRequest);
  RC_ASSERT(m.usage().free_blocks + m.usage().cached_blocks[0] + m.usage().cached_blocks[1] +
                m.usage().cached_blocks[2] ==
            m.usage().total_blocks);
}

}  // namespace
}  // namespace meridian
