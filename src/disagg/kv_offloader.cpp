#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include <absl/container/flat_hash_map.h>
#include <fmt/format.h>

#include "meridian/error.h"
#include "meridian/kv_offload.h"
#include "meridian/mrdn.h"

namespace meridian {

KvOffloaderOptions KvOffloaderOptions::from_config(const MeridianConfig& config) {
  const DisaggConfig& d = config.disagg;
  const auto require = [](std::uint32_t value, const char* field) {
    if (value == 0) throw InvalidArgument(fmt::format("disagg.{} must be >= 1; got 0", field));
  };
  require(d.offload_threshold_blocks, "offload_threshold_blocks");
  require(d.max_inflight_batches, "max_inflight_batches");
  require(d.transfer_timeout_ms, "transfer_timeout_ms");
  KvOffloaderOptions o;
  o.offload_threshold_blocks = d.offload_threshold_blocks;
  o.max_inflight_batches = d.max_inflight_batches;
  o.transfer_timeout = std::chrono::milliseconds(d.transfer_timeout_ms);
  return o;
}

namespace {
using TimePoint = std::chrono::steady_clock::time_point;
}  // namespace

struct KvOffloader::Impl {
  /// (handle, frame) -> logical position of that remote block.
  using PositionMap = absl::flat_hash_map<std::pair<FabricHandle, std::uint32_t>, std::uint32_t>;
  /// One payload pushed and not yet settled.
  struct Batch {
    std::uint64_t token = 0;  ///< pin token of its blocks
    RequestId request = 0;
    FabricHandle handle = 0;
    std::vector<BlockId> blocks;  ///< frame i holds blocks[i]
    std::vector<BlockTier> tiers;
    TimePoint started;
    bool cancelled = false;  ///< request released: only the handle is left to release
  };

  Impl(KvBlockManager& b, KvBlockStore& s, Fabric& f, KvOffloaderOptions o)
      : blocks(b), store(s), fabric(f), options(std::move(o)) {
    if (!options.clock) options.clock = [] { return std::chrono::steady_clock::now(); };
  }

  KvBlockManager& blocks;
  KvBlockStore& store;
  Fabric& fabric;
  KvOffloaderOptions options;
  KvOffloadCounters counters;
  std::vector<Batch> inflight;
  /// A committed payload: its frames' tiers as pushed, to verify what comes back
  /// (a block's own tier may have been demoted since: ThinkActive -> ThinkComplete).
  struct Payload {
    FabricHandle handle = 0;
    std::vector<BlockTier> frame_tiers;
  };
  /// Committed payloads per request, in commit order: each ingested or released once.
  absl::flat_hash_map<RequestId, std::vector<Payload>> committed;
  std::uint64_t next_token = 1;
  std::vector<std::byte> scratch;  ///< reused payload buffer

  void fall_back(OffloadFallbackReason reason, std::size_t block_count, OffloadStart& start) {
    ++counters.fallbacks[static_cast<std::size_t>(reason)];
    counters.fallback_blocks += block_count;
    ++start.batches_fallen_back;
    start.blocks_fallen_back += static_cast<std::uint32_t>(block_count);
  }

  // Fabric calls never let an exception into the engine loop.
  void release_handle(FabricHandle handle) noexcept {
    try {
      fabric.release(handle);
    } catch (...) {  // NOLINT(bugprone-empty-catch): release is best effort; the fabric reclaims on timeout
    }
  }

  bool push_batch(RequestId request, std::span<const BlockId> batch, OffloadStart& start) {
    if (inflight.size() >= options.max_inflight_batches) {
      fall_back(OffloadFallbackReason::kQueueFull, batch.size(), start);
      return false;
    }
    std::vector<BlockTier> tiers;
    tiers.reserve(batch.size());
    PushResult pushed;
    try {
      scratch.clear();
      scratch.reserve(batch.size() * mrdn::frame_size(store.block_size_bytes()));
      for (BlockId b : batch) {
        tiers.push_back(blocks.tier_of(b));
        mrdn::encode_append(tiers.back(), store.block_bytes(b), scratch);
      }
      pushed = fabric.push(scratch);
    } catch (const std::exception& e) {
      pushed = {FabricStatus::kFailed, 0, e.what()};
    }
    switch (pushed.status) {
      case FabricStatus::kOk: break;
      case FabricStatus::kBusy: fall_back(OffloadFallbackReason::kBusy, batch.size(), start); return false;
      case FabricStatus::kUnavailable:
        fall_back(OffloadFallbackReason::kDown, batch.size(), start);
        return false;
      default: fall_back(OffloadFallbackReason::kFailed, batch.size(), start); return false;
    }
    Batch b;
    b.token = next_token++;
    b.request = request;
    b.handle = pushed.handle;
    b.blocks.assign(batch.begin(), batch.end());
    b.tiers = std::move(tiers);
    b.started = options.clock();
    blocks.pin(request, b.blocks, b.token);
    ++counters.batches_pushed;
    counters.bytes_pushed += scratch.size();
    ++start.batches_pushed;
    start.blocks_pushed += static_cast<std::uint32_t>(batch.size());
    inflight.push_back(std::move(b));
    counters.inflight_batches = inflight.size();
    return true;
  }

  // Commits a batch into remote entries; false when its blocks were released meanwhile.
  bool commit(const Batch& b) {
    for (BlockId block : b.blocks) {
      if (blocks.pin_token(block) != b.token) return false;
    }
    std::vector<RemoteBlockRef> refs(b.blocks.size());
    for (std::size_t i = 0; i < b.blocks.size(); ++i) {
      // The block's tier now: a preempted request's reasoning may have been demoted in flight.
      refs[i] = {b.handle, static_cast<std::uint32_t>(i), blocks.tier_of(b.blocks[i])};
    }
    blocks.mark_remote(b.request, b.blocks, refs);
    for (const RemoteBlockRef& ref : refs) ++counters.blocks_offloaded[static_cast<std::size_t>(ref.tier)];
    committed[b.request].push_back({b.handle, b.tiers});
    return true;
  }

  void lose(RequestId request, FabricHandle handle, const PositionMap& position, IngestResult& result) {
    for (const RemoteBlockRef& ref : blocks.remote_entries(request, handle)) {
      result.recompute_positions.push_back(position.at({handle, ref.frame}));
    }
    counters.recompute_blocks += blocks.forget_remote(request, handle);
    release_handle(handle);
    result.status = IngestStatus::kPartial;
  }
};

KvOffloader::KvOffloader(KvBlockManager& blocks, KvBlockStore& store, Fabric& fabric,
                         KvOffloaderOptions options) {
  if (store.num_blocks() != blocks.options().num_blocks ||
      store.block_size_bytes() != blocks.options().block_size_bytes) {
    throw InvalidArgument(
        fmt::format("KvOffloader: the block store holds {} blocks of {} bytes but the block manager {} "
                    "blocks of {} bytes",
                    store.num_blocks(), store.block_size_bytes(), blocks.options().num_blocks,
                    blocks.options().block_size_bytes));
  }
  if (options.offload_threshold_blocks == 0 || options.max_inflight_batches == 0 ||
      options.transfer_timeout.count() <= 0) {
    throw InvalidArgument(
        "KvOffloader: offload_threshold_blocks, max_inflight_batches and transfer_timeout must be > 0");
  }
  impl_ = std::make_unique<Impl>(blocks, store, fabric, std::move(options));
}

KvOffloader::~KvOffloader() {
  for (const Impl::Batch& b : impl_->inflight) impl_->release_handle(b.handle);
  for (const auto& [request, payloads] : impl_->committed) {
    for (const Impl::Payload& p : payloads) impl_->release_handle(p.handle);
  }
}

OffloadStart KvOffloader::on_exit_think(RequestId request) {
  Impl& m = *impl_;
  OffloadStart start;
  const std::vector<BlockId> candidates = m.blocks.offload_candidates(request, OffloadScope::kThinkComplete);
  const std::size_t step = m.options.offload_threshold_blocks;
  for (std::size_t i = 0; i < candidates.size(); i += step) {
    const std::size_t n = std::min(step, candidates.size() - i);
    m.push_batch(request, std::span(candidates).subspan(i, n), start);
  }
  return start;
}

bool KvOffloader::offload_for_preemption(RequestId request) {
  Impl& m = *impl_;
  OffloadStart start;
  const std::vector<BlockId> candidates = m.blocks.offload_candidates(request, OffloadScope::kAllTiers);
  if (candidates.empty()) return false;
  return m.push_batch(request, candidates, start);
}

OffloadProgress KvOffloader::poll() {
  Impl& m = *impl_;
  OffloadProgress progress;
  const TimePoint now = m.options.clock();
  std::size_t keep = 0;
  for (std::size_t i = 0; i < m.inflight.size(); ++i) {
    Impl::Batch& b = m.inflight[i];
    TransferState state = TransferState::kFailed;
    try {
      state = m.fabric.poll(b.handle);
    } catch (...) {  // NOLINT(bugprone-empty-catch): a fabric that throws has failed the transfer
    }
    const bool timed_out = state == TransferState::kInFlight && now - b.started >= m.options.transfer_timeout;
    if (state == TransferState::kInFlight && !timed_out) {
      if (keep != i) m.inflight[keep] = std::move(b);
      ++keep;
      continue;
    }
    if (b.cancelled) {
      m.release_handle(b.handle);
      continue;
    }
    if (state == TransferState::kCommitted) {
      if (m.commit(b)) {
        ++m.counters.batches_committed;
        ++progress.batches_committed;
        progress.blocks_committed += static_cast<std::uint32_t>(b.blocks.size());
      } else {
        // The request was released behind the offloader's back: nothing to commit into.
        m.blocks.unpin(b.blocks, b.token);
        m.release_handle(b.handle);
        ++m.counters.batches_cancelled;
        ++progress.batches_cancelled;
      }
      continue;
    }
    m.blocks.unpin(b.blocks, b.token);
    m.release_handle(b.handle);
    const auto reason = timed_out ? OffloadFallbackReason::kTimeout : OffloadFallbackReason::kFailed;
    ++m.counters.fallbacks[static_cast<std::size_t>(reason)];
    m.counters.fallback_blocks += b.blocks.size();
    ++progress.batches_failed;
  }
  m.inflight.resize(keep);
  m.counters.inflight_batches = m.inflight.size();
  return progress;
}

IngestResult KvOffloader::ingest(RequestId request) {
  Impl& m = *impl_;
  IngestResult result;
  const auto it = m.committed.find(request);
  if (it == m.committed.end()) return result;
  std::vector<Impl::Payload> handles = std::move(it->second);
  m.committed.erase(it);
  // (handle, frame) -> logical position before this call, for recompute_positions.
  Impl::PositionMap position;
  const std::vector<BlockLocation> locations = m.blocks.block_locations(request);
  for (std::size_t p = 0; p < locations.size(); ++p) {
    if (locations[p].kind == BlockLocation::Kind::kRemote) {
      position[{locations[p].remote.handle, locations[p].remote.frame}] = static_cast<std::uint32_t>(p);
    }
  }
  const std::uint64_t block_size = m.store.block_size_bytes();
  for (std::size_t h = 0; h < handles.size(); ++h) {
    const FabricHandle handle = handles[h].handle;
    const std::vector<BlockTier>& frame_tiers = handles[h].frame_tiers;
    const std::vector<RemoteBlockRef> entries = m.blocks.remote_entries(request, handle);
    if (entries.empty()) {
      m.release_handle(handle);
      continue;
    }
    PullResult pulled;
    try {
      pulled = m.fabric.pull(handle, m.scratch);
    } catch (const std::exception& e) {
      pulled = {FabricStatus::kFailed, e.what()};
    }
    if (pulled.status != FabricStatus::kOk) {
      ++m.counters.pull_failures;
      if (result.detail.empty()) {
        result.detail = fmt::format("pull of payload {} failed ({}): {}", handle, to_string(pulled.status),
                                    pulled.message);
      }
      m.lose(request, handle, position, result);
      continue;
    }
    m.counters.bytes_pulled += m.scratch.size();
    const mrdn::BatchDecodeResult decoded = mrdn::decode_batch(m.scratch);
    std::string problem;
    if (!decoded.error.ok()) {
      problem = decoded.error.message();
    } else if (decoded.frames.size() != entries.size() || frame_tiers.size() != entries.size()) {
      problem =
          fmt::format("{} MRDN frames, {} blocks were offloaded", decoded.frames.size(), entries.size());
    } else {
      for (std::size_t f = 0; f < entries.size() && problem.empty(); ++f) {
        if (decoded.frames[f].tier != frame_tiers[f]) {
          problem = fmt::format("frame {} is {}, the block was {}", f, to_string(decoded.frames[f].tier),
                                to_string(frame_tiers[f]));
        } else if (decoded.frames[f].body.size() != block_size) {
          problem = fmt::format("frame {} body is {} bytes, a block is {}", f, decoded.frames[f].body.size(),
                                block_size);
        }
      }
    }
    if (!problem.empty()) {
      ++m.counters.corrupt_payloads;
      if (result.detail.empty()) result.detail = fmt::format("payload {} rejected: {}", handle, problem);
      m.lose(request, handle, position, result);
      continue;
    }
    const AllocResult restored = m.blocks.restore_remote(request, handle);
    if (!restored.ok()) {
      // Not enough room now: this payload and the rest stay remote for a later ingest.
      auto& back = m.committed[request];
      back.insert(back.begin(), handles.begin() + static_cast<std::ptrdiff_t>(h), handles.end());
      result.status = IngestStatus::kOutOfBlocks;
      if (result.detail.empty()) {
        result.detail = fmt::format("payload {}: {}", handle, to_string(restored.status));
      }
      break;
    }
    for (std::size_t f = 0; f < restored.blocks.size(); ++f) {
      const std::span<std::byte> dst = m.store.block_bytes(restored.blocks[f]);
      std::memcpy(dst.data(), decoded.frames[f].body.data(), dst.size());
    }
    result.restored.insert(result.restored.end(), restored.blocks.begin(), restored.blocks.end());
    result.reclaimed.insert(result.reclaimed.end(), restored.reclaimed.begin(), restored.reclaimed.end());
    m.counters.blocks_ingested += restored.blocks.size();
    m.release_handle(handle);
  }
  return result;
}

void KvOffloader::on_release(RequestId request) {
  Impl& m = *impl_;
  for (Impl::Batch& b : m.inflight) {
    if (b.request != request || b.cancelled) continue;
    b.cancelled = true;
    m.blocks.unpin(b.blocks, b.token);
    ++m.counters.batches_cancelled;
  }
  const auto it = m.committed.find(request);
  if (it == m.committed.end()) return;
  for (const Impl::Payload& p : it->second) {
    m.blocks.forget_remote(request, p.handle);
    m.release_handle(p.handle);
  }
  m.committed.erase(it);
}

const KvOffloadCounters& KvOffloader::counters() const noexcept { return impl_->counters; }
const KvOffloaderOptions& KvOffloader::options() const noexcept { return impl_->options; }

std::string KvOffloader::fabric_label() const {
  try {
    return impl_->fabric.label();
  } catch (...) {
    return "unknown";
  }
}

std::vector<FabricHandle> KvOffloader::committed_handles(RequestId request) const {
  std::vector<FabricHandle> out;
  const auto it = impl_->committed.find(request);
  if (it == impl_->committed.end()) return out;
  for (const Impl::Payload& p : it->second) out.push_back(p.handle);
  return out;
}

std::uint32_t KvOffloader::inflight_batches(RequestId request) const {
  return static_cast<std::uint32_t>(
      std::count_if(impl_->inflight.begin(), impl_->inflight.end(),
                    [&](const auto& b) { return b.request == request && !b.cancelled; }));
}

}  // namespace meridian
