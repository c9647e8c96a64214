// The soak (docs/operations.md#soak): a million requests and more through one
// long-lived set of Meridian's engine-side components, the way an engine
// adapter uses them: RequestIdMap for the engine's string ids, PhaseRouter for
// every token, DualQueueScheduler + KvBlockManager driven by StepDriver, and
// EntropyProbe forcing. Time, workload and signals come from the replay
// simulator (roofline step cost, `mixed` workload generator, signal model).
//
// Unlike run_replay(), which keeps every request's outcome and every token gap
// for its report, this loop streams: the workload is generated a window at a
// time and only live requests are held, so its own memory is bounded and any
// growth that shows is the components'.
//
// Thread-safety: run_soak() is reentrant; one call uses one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meridian/phase_router.h"

namespace meridian::soak {

struct SoakOptions {
  std::uint64_t requests = 1'000'000;  ///< at least this many arrive (whole windows are generated)
  std::uint64_t seed = 42;
  double arrival_rate = 12;          ///< conversations per second (about 2 requests each): ~80 % of capacity
  double window_s = 30;              ///< workload generated this many simulated seconds at a time
  std::uint32_t cancel_every = 200;  ///< one request in this many is cancelled mid-stream by its client
  std::uint32_t checkpoints = 4;     ///< memory samples at 1/n, 2/n, ... of the requests
  /// One request in this many (0: none) gets a prompt of all but two of the pool's
  /// blocks and an answer that outgrows it, which the scheduler must abort.
  std::uint64_t outgrow_every = 0;
};

/// State sampled when a share of the requests has been retired.
struct Checkpoint {
  double fraction = 0;
  std::uint64_t retired = 0;
  double sim_s = 0;
  double wall_s = 0;
  std::uint64_t rss_bytes = 0;
  std::uint64_t live = 0;            ///< requests between arrival and retirement
  std::uint64_t router_tracked = 0;  ///< PhaseRouter::tracked()
  std::uint64_t scheduled = 0;       ///< DualQueueScheduler::size()
  std::uint64_t mapped_ids = 0;      ///< RequestIdMap::size()
  std::uint64_t kv_live_blocks = 0;  ///< blocks held by requests
};

struct SoakResult {
  std::uint64_t generated = 0;  ///< requests the workload windows produced
  std::uint64_t arrived = 0;
  std::uint64_t completed = 0;
  std::uint64_t cancelled = 0;           ///< by their client, mid-stream
  std::uint64_t aborted = 0;             ///< by the scheduler (could never fit)
  std::uint64_t dropped_follow_ups = 0;  ///< later turns of cancelled or aborted conversations
  std::uint64_t steps = 0;
  std::uint64_t tokens = 0;  ///< generated tokens fed to the router
  std::uint64_t preemptions = 0;
  std::uint64_t prefix_hit_blocks = 0;
  std::uint64_t probe_passes = 0;
  bool stuck = false;  ///< nothing could run for too long (requests left open)
  double sim_s = 0;
  double wall_s = 0;
  std::uint64_t peak_rss_bytes = 0;
  std::vector<Checkpoint> checkpoints;
  RouterCounters router;

  // The end state, which must be empty.
  std::uint64_t live = 0;
  std::uint64_t pending_follow_ups = 0;
  std::uint64_t router_tracked = 0;
  std::uint64_t scheduled = 0;
  std::uint64_t mapped_ids = 0;
  std::uint64_t kv_live_blocks = 0;
  std::uint64_t kv_allocatable_blocks = 0;
  std::uint64_t kv_total_blocks = 0;
  std::string kv_invariants;  ///< KvBlockManager::check_invariants(): empty when consistent
};

/// Throws meridian::Error on bad options.
[[nodiscard]] SoakResult run_soak(const SoakOptions& options);

/// Resident set size of this process now, and its peak (bytes; 0 if unknown).
[[nodiscard]] std::uint64_t current_rss_bytes();
[[nodiscard]] std::uint64_t peak_rss_bytes();

}  // namespace meridian::soak
