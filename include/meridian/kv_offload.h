// The KV offloader: moves a request's KV blocks to a disaggregated fabric
// as MRDN v1 payloads and back (SPEC §3.10, ADR-0020).
//
// Flow. on_exit_think() takes the request's ThinkComplete blocks (call it
// after KvBlockManager::demote_think_blocks), in batches of
// offload_threshold_blocks (a final, smaller batch is sent too: a finished
// reasoning span has no more blocks coming), one payload per batch, one MRDN
// frame per block whose body is the block's bytes from the KvBlockStore and
// whose tier is the block's tier. offload_for_preemption() sends all the
// request's live unshared blocks, any tier, as one payload (accepted or not as
// a whole, so the caller knows whether to recompute). Blocks are pinned while
// their payload is in flight; poll() settles transfers: committed → the blocks
// leave the pool and become remote entries (KvBlockManager::mark_remote);
// failed or older than transfer_timeout → unpinned, they stay local. ingest()
// brings a request's committed payloads back: pull, decode, verify, restore
// the blocks in their logical positions, copy the bytes back.
//
// Back-pressure and faults never block and never throw into the engine loop:
// at most max_inflight_batches in flight; beyond that, or when the fabric
// answers busy/unavailable, the batch stays local (its blocks remain
// evictable ThinkComplete blocks) and a fallback counter by reason counts it.
// A corrupt payload or a failed pull drops the remote entries (the caller
// recomputes them), counted. Handles move one way, in flight → committed →
// ingested or released, so none is ingested twice.
//
// Thread-safety: NOT thread-safe; belongs to the engine loop, like the block
// manager. Ownership: refers to the manager, store and fabric (not owned; they
// must outlive it); owns the bookkeeping of its payloads. The destructor
// releases the fabric handles it still holds.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "meridian/config.h"
#include "meridian/fabric.h"
#include "meridian/kv_block_manager.h"
#include "meridian/kv_block_store.h"
#include "meridian/kv_offload_counters.h"

namespace meridian {

struct KvOffloaderOptions {
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  std::uint32_t offload_threshold_blocks = 4;  ///< >= 1: blocks per payload at ExitThink
  std::uint32_t max_inflight_batches = 4;      ///< >= 1
  std::chrono::milliseconds transfer_timeout{2000};
  Clock clock;  ///< steady_clock::now when empty; tests inject their own

  /// From [disagg]; throws InvalidArgument (naming the field) for a zero value.
  static KvOffloaderOptions from_config(const MeridianConfig& config);
};

/// What one offload call did.
struct OffloadStart {
  std::uint32_t batches_pushed = 0;
  std::uint32_t blocks_pushed = 0;
  std::uint32_t batches_fallen_back = 0;
  std::uint32_t blocks_fallen_back = 0;
  [[nodiscard]] bool all_pushed() const noexcept { return batches_fallen_back == 0; }
};

/// What one poll() settled.
struct OffloadProgress {
  std::uint32_t batches_committed = 0;
  std::uint32_t blocks_committed = 0;  ///< local slots freed
  std::uint32_t batches_failed = 0;    ///< failed or timed out: blocks stay local
  std::uint32_t batches_cancelled = 0;
};

enum class IngestStatus : std::uint8_t {
  kOk = 0,           ///< every committed payload of the request is back (or none was remote)
  kPartial = 1,      ///< some payloads were lost: see recompute_positions
  kOutOfBlocks = 2,  ///< the pool cannot hold a payload now; it stays remote, try later
};

struct IngestResult {
  IngestStatus status = IngestStatus::kOk;
  std::vector<BlockId> restored;  ///< local blocks filled back, in logical order of their payloads
  /// Logical positions (in block_locations() order before the call) of remote
  /// blocks whose payload was corrupt or could not be pulled: recompute them.
  std::vector<std::uint32_t> recompute_positions;
  /// Blocks of other requests the restore took (KvBlockManager's lazy offload
  /// path with fabric_offload on): notify their owners, as after allocate().
  std::vector<ReclaimedBlock> reclaimed;
  std::string detail;  ///< the first problem, naming the handle and the MRDN byte offset
};

class KvOffloader {
 public:
  /// Throws InvalidArgument when the store's geometry does not match the
  /// manager's pool, or an option is zero.
  KvOffloader(KvBlockManager& blocks, KvBlockStore& store, Fabric& fabric, KvOffloaderOptions options = {});
  ~KvOffloader();
  KvOffloader(const KvOffloader&) = delete;
  KvOffloader& operator=(const KvOffloader&) = delete;

  /// Offloads the request's unpinned ThinkComplete blocks; calling it again
  /// retries blocks whose batch fell back.
  OffloadStart on_exit_think(RequestId request);
  /// Sends the request's live unshared blocks not already in flight as one
  /// payload. True when it was accepted; false: nothing was sent (fallback
  /// counted) and the caller recomputes or swaps as before.
  bool offload_for_preemption(RequestId request);
  OffloadProgress poll();
  IngestResult ingest(RequestId request);
  /// The request is gone (finished, aborted, preempted for recompute): its
  /// batches in flight are cancelled (fabric handles released when they
  /// settle), its committed payloads released and its remote entries dropped.
  /// Call it before or after KvBlockManager::release; both orders are safe.
  void on_release(RequestId request);

  [[nodiscard]] const KvOffloadCounters& counters() const noexcept;
  [[nodiscard]] const KvOffloaderOptions& options() const noexcept;
  [[nodiscard]] std::string fabric_label() const;
  /// Committed payload handles the request can still ingest.
  [[nodiscard]] std::vector<FabricHandle> committed_handles(RequestId request) const;
  /// Payloads in flight for the request (cancelled ones excluded).
  [[nodiscard]] std::uint32_t inflight_batches(RequestId request) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meridian
