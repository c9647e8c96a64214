// RapidCheck property of the KV offloader over random operation sequences
// (allocate, ExitThink offload, preemption offload, poll, ingest, release,
// fabric down/up, corrupt payloads, clock steps): the block manager stays
// consistent, every logical block of every request is either local with its
// exact bytes, remote, or reported for recompute (nothing lost silently,
// nothing freed twice), and once every request is gone the pool is whole and
// the fabric holds nothing.
#include <algorithm>
#include <array>
#include <cstring>
#include <ostream>

#include <absl/container/flat_hash_map.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "meridian/kv_offload.h"

namespace meridian {
namespace {

constexpr std::uint64_t kBlockSize = 64;

struct Op {
  int kind =
      0;  // 0 allocate, 1 exit_think, 2 preempt, 3 poll, 4 ingest, 5 release, 6 down/up, 7 corrupt, 8 clock
  RequestId request = 1;
  int tier = 1;
  std::uint32_t count = 1;
  std::uint32_t offset = 0;
  bool flag = false;
};

void showValue(const Op& op, std::ostream& os) {
  os << "{kind " << op.kind << " request " << op.request << " tier " << op.tier << " count " << op.count
     << " offset " << op.offset << " flag " << op.flag << "}";
}

// Each logical block carries a unique tag; its bytes are a function of the tag.
void write_tag(std::span<std::byte> bytes, std::uint64_t tag) {
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<std::byte>((tag * 2654435761U + i * 97U) >> 3U);
  std::memcpy(bytes.data(), &tag, sizeof tag);
}
std::uint64_t read_tag(std::span<const std::byte> bytes) {
  std::uint64_t tag = 0;
  std::memcpy(&tag, bytes.data(), sizeof tag);
  return tag;
}
bool intact(std::span<const std::byte> bytes, std::uint64_t tag) {
  std::vector<std::byte> expected(bytes.size());
  write_tag(expected, tag);
  return std::equal(bytes.begin(), bytes.end(), expected.begin());
}

RC_GTEST_PROP(KvOffloadProperty, NothingLostNothingFreedTwice, ()) {
  KvBlockManagerOptions mo;
  mo.num_blocks = *rc::gen::inRange<std::uint32_t>(4, 40);
  mo.block_size_bytes = kBlockSize;
  mo.think_phase_memory_fraction = 0.5;
  mo.fabric_offload = *rc::gen::arbitrary<bool>();
  KvBlockManager manager(mo);
  HostBlockStore store(mo.num_blocks, kBlockSize);
  InProcessFabricOptions fo;
  fo.commit_after_polls = *rc::gen::inRange<std::uint32_t>(0, 3);
  fo.max_entries = *rc::gen::inRange<std::uint32_t>(1, 8);
  InProcessFabric fabric(fo);
  std::chrono::steady_clock::time_point now{};
  KvOffloaderOptions oo;
  oo.offload_threshold_blocks = *rc::gen::inRange<std::uint32_t>(1, 5);
  oo.max_inflight_batches = *rc::gen::inRange<std::uint32_t>(1, 4);
  oo.transfer_timeout = std::chrono::milliseconds(10);
  oo.clock = [&now] { return now; };
  KvOffloader offloader(manager, store, fabric, oo);

  // The model: each request's logical blocks as tags, in order.
  absl::flat_hash_map<RequestId, std::vector<std::uint64_t>> model;
  std::uint64_t next_tag = 1;
  bool down = false;

  const auto length = *rc::gen::inRange<std::size_t>(20, 150);
  const auto ops = *rc::gen::container<std::vector<Op>>(
      length, rc::gen::build<Op>(rc::gen::set(&Op::kind, rc::gen::inRange(0, 13)),
                                 rc::gen::set(&Op::request, rc::gen::inRange<RequestId>(1, 4)),
                                 rc::gen::set(&Op::tier, rc::gen::inRange(1, 3)),
                                 rc::gen::set(&Op::count, rc::gen::inRange<std::uint32_t>(0, 6)),
                                 rc::gen::set(&Op::offset, rc::gen::inRange<std::uint32_t>(0, 400)),
                                 rc::gen::set(&Op::flag, rc::gen::arbitrary<bool>())));
  for (const Op& op : ops) {
    const RequestId r = op.request;
    // Kinds 9..12 repeat allocate, exit_think, poll and ingest: the path to a round trip is long.
    constexpr std::array kRepeat{0, 1, 3, 4};
    switch (op.kind >= 9 ? kRepeat[static_cast<std::size_t>(op.kind - 9)] : op.kind) {
      case 0: {
        const AllocResult a = manager.allocate(r, static_cast<BlockTier>(op.tier), op.count);
        if (!a.ok()) break;
        // The lazy offload path takes other requests' ThinkComplete blocks: gone from their lists.
        for (const ReclaimedBlock& rb : a.reclaimed) {
          if (rb.action != ReclaimAction::kOffload) continue;
          auto& tags = model[rb.owner];
          const auto it = std::find(tags.begin(), tags.end(), read_tag(store.block_bytes(rb.block)));
          RC_ASSERT(it != tags.end());
          tags.erase(it);
        }
        for (BlockId b : a.blocks) {
          write_tag(store.block_bytes(b), next_tag);
          model[r].push_back(next_tag++);
        }
        break;
      }
      case 1:
        manager.demote_think_blocks(r);
        offloader.on_exit_think(r);
        break;
      case 2: offloader.offload_for_preemption(r); break;
      case 3: offloader.poll(); break;
      case 4: {
        // A block the restore takes from another request gets overwritten: remember every tag first.
        absl::flat_hash_map<BlockId, std::uint64_t> tag_of;
        for (const auto& [request, tags] : model) {
          for (BlockId b : manager.blocks_of(request)) tag_of[b] = read_tag(store.block_bytes(b));
        }
        const IngestResult in = offloader.ingest(r);
        for (const ReclaimedBlock& rb : in.reclaimed) {
          RC_ASSERT(rb.owner != r);  // never the restoring request's own blocks
          if (rb.action != ReclaimAction::kOffload) continue;
          auto& tags = model[rb.owner];
          const auto it = std::find(tags.begin(), tags.end(), tag_of.at(rb.block));
          RC_ASSERT(it != tags.end());
          tags.erase(it);
        }
        auto positions = in.recompute_positions;
        std::sort(positions.rbegin(), positions.rend());
        auto& tags = model[r];
        for (std::uint32_t p : positions) {
          RC_ASSERT(p < tags.size());
          tags.erase(tags.begin() + p);
        }
        break;
      }
      case 5:
        if (op.flag) offloader.on_release(r);
        manager.release(r, ReleaseKind::kAbort);
        if (!op.flag) offloader.on_release(r);
        model.erase(r);
        break;
      case 6:
        if (op.count > 1 && !down) break;  // down for short spells, so round trips happen too
        down = !down;
        fabric.set_down(down);
        break;
      case 7: {
        const auto handles = offloader.committed_handles(r);
        if (!handles.empty()) fabric.corrupt_byte(handles[op.offset % handles.size()], op.offset);
        break;
      }
      default: now += std::chrono::milliseconds(op.count * 3); break;
    }
    RC_ASSERT(manager.check_invariants() == "");
    // Every logical block is where the model says, local ones byte for byte.
    for (const auto& [request, tags] : model) {
      const std::vector<BlockLocation> locations = manager.block_locations(request);
      RC_ASSERT(locations.size() == tags.size());
      for (std::size_t i = 0; i < tags.size(); ++i) {
        if (locations[i].kind == BlockLocation::Kind::kLocal) {
          RC_ASSERT(intact(store.block_bytes(locations[i].block), tags[i]));
        }
      }
    }
    const KvBlockUsage u = manager.usage();
    std::uint64_t live = 0;
    for (std::size_t t = 0; t < kBlockTierCount; ++t) live += u.live_blocks[t] + u.cached_blocks[t];
    RC_ASSERT(live + u.free_blocks == mo.num_blocks);
    RC_ASSERT(offloader.counters().inflight_batches <= oo.max_inflight_batches);
  }
  const KvOffloadCounters& c = offloader.counters();
  RC_CLASSIFY(c.batches_committed > 0, "committed");
  RC_CLASSIFY(c.blocks_ingested > 0, "ingested");
  RC_CLASSIFY(c.corrupt_payloads + c.pull_failures > 0, "payload lost");
  RC_CLASSIFY(c.batches_cancelled > 0, "cancelled in flight");
  RC_CLASSIFY(c.fallback_blocks > 0, "fell back");
  // Wind down: every request gone, every transfer settled, nothing left anywhere.
  for (const auto& [request, tags] : model) {
    offloader.on_release(request);
    manager.release(request, ReleaseKind::kAbort);
  }
  fabric.set_down(false);
  now += std::chrono::milliseconds(1000);
  offloader.poll();
  RC_ASSERT(offloader.counters().inflight_batches == 0U);
  RC_ASSERT(fabric.entries() == 0U);
  RC_ASSERT(manager.remote_block_count() == 0U);
  RC_ASSERT(manager.usage().free_blocks == mo.num_blocks);
  RC_ASSERT(manager.check_invariants() == "");
}

}  // namespace
}  // namespace meridian
