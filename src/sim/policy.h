// Internal: the scheduling-policy seam of the replay engine, and the KV pool
// the policies allocate from (it knows each block's content hash).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "meridian/kv_block_manager.h"
#include "meridian/scheduler.h"

namespace meridian::sim::detail {

/// Content hash of block `index` of request `id` (prefix-cache identity).
using BlockHashFn = std::function<std::uint64_t(RequestId id, std::uint32_t index)>;

/// The engine's KV: the real block manager plus hashing and prefix lookups.
class KvPool {
 public:
  KvPool(KvBlockManager& kv, std::uint32_t block_tokens, BlockHashFn hash)
      : kv_(kv), block_tokens_(block_tokens), hash_(std::move(hash)) {}

  /// Appends `count` blocks of `tier`; false (nothing changed) if they do not fit.
  bool allocate(RequestId id, BlockTier tier, std::uint32_t count);
  /// What attach_prefix(id, tokens, ...) would attach, touching nothing.
  struct PrefixMatch {
    std::uint32_t tokens = 0;     ///< tokens covered
    std::uint32_t blocks = 0;     ///< blocks matched
    std::uint32_t evictable = 0;  ///< of those, blocks in the evictable cache
  };
  [[nodiscard]] PrefixMatch match_prefix(RequestId id, std::uint32_t tokens);
  /// Attaches cached blocks for the first `tokens - 1` tokens of the request
  /// (at least one token is always computed). Returns the tokens covered.
  /// `first_admission` counts the lookup in the prompt prefix-hit rate.
  std::uint32_t attach_prefix(RequestId id, std::uint32_t tokens, bool first_admission);

  [[nodiscard]] std::uint32_t blocks_for(std::uint64_t tokens) const {
    return static_cast<std::uint32_t>((tokens + block_tokens_ - 1) / block_tokens_);
  }
  [[nodiscard]] std::uint32_t held(RequestId id) const {
    return static_cast<std::uint32_t>(kv_.blocks_of(id).size());
  }
  [[nodiscard]] KvBlockManager& kv() { return kv_; }
  [[nodiscard]] std::uint32_t block_tokens() const { return block_tokens_; }
  /// Content hash of block `index` of request `id`.
  [[nodiscard]] std::uint64_t hash(RequestId id, std::uint32_t index) const { return hash_(id, index); }
  [[nodiscard]] std::uint64_t prompt_lookup_blocks() const { return lookup_blocks_; }
  [[nodiscard]] std::uint64_t prompt_hit_blocks() const { return hit_blocks_; }

 private:
  KvBlockManager& kv_;
  std::uint32_t block_tokens_;
  BlockHashFn hash_;
  std::vector<std::uint64_t> scratch_;
  std::uint64_t lookup_blocks_ = 0;
  std::uint64_t hit_blocks_ = 0;
};

struct StepItem {
  RequestId id = 0;
  WorkKind kind = WorkKind::kDecode;
  std::uint32_t tokens = 0;
  std::uint32_t context = 0;   ///< tokens in KV before the step
  bool samples_token = false;  ///< a token is generated when the step ends
};

struct EngineStep {
  std::vector<StepItem> items;
  std::vector<Preemption> preempted;  ///< already carried out on the KV pool
  std::vector<RequestId> aborted;     ///< can never run: the engine ends them
  std::uint32_t output_queue = 0;
  std::uint32_t think_queue = 0;
  std::uint32_t waiting = 0;
  std::uint32_t swapped = 0;
};

/// One engine scheduler. Not thread-safe; owned by the engine loop.
class SchedulingPolicy {
 public:
  virtual ~SchedulingPolicy() = default;
  /// A request arrived (prefix blocks, if any, are already attached for
  /// policies that look them up at arrival; see looks_up_prefix_at_arrival).
  virtual void add(const NewRequest& request, std::int32_t priority) = 0;
  /// The request's phase moved on. `answer_decodes_in_flight`: decodes of it
  /// already planned when the engine learnt of the move (two in flight), the
  /// first of which samples its first answer token.
  virtual void set_phase(RequestId id, Phase phase, std::uint32_t answer_decodes_in_flight) = 0;
  /// The request ended; the engine releases its KV afterwards.
  virtual void finish(RequestId id) = 0;
  /// Plans one step, carrying out preemptions and allocations on the pool.
  virtual const EngineStep& plan(std::int64_t now_ns) = 0;
  /// The planned step ran and took `ms`, ending at `end_ns`.
  virtual void complete(double ms, std::int64_t end_ns) = 0;
  /// Whether the engine attaches cached prompt blocks when a request arrives
  /// (Meridian) or the policy does so when it admits the request (vLLM).
  [[nodiscard]] virtual bool looks_up_prefix_at_arrival() const = 0;
  /// Whether answer and reasoning blocks live in different tiers (ExitThink demotes).
  [[nodiscard]] virtual bool tiered_kv() const = 0;
  /// The real scheduler behind the policy (Meridian), for telemetry; null for the baselines.
  [[nodiscard]] virtual const DualQueueScheduler* scheduler() const { return nullptr; }
};

/// PASCAL (Huang et al., HPCA 2026, arXiv 2602.11530) inside one instance,
/// on vLLM's scheduler (docs/replay.md#pascal states each reading):
/// reasoning first (new requests and think decode rank above answering; a
/// reasoning request that has thought demote_think_tokens moves to the answer
/// queue), round-robin within each queue with a quantum of decoded tokens,
/// answering preempted first, and an answer-token pacer that skips an answer
/// decode while the request's tokens are ahead of pace_ms per token.
struct PascalOptions {
  bool enabled = false;
  double pace_ms = 20;                       ///< the answer TPOT SLO
  std::uint32_t quantum_tokens = 500;        ///< the paper's round-robin quantum
  std::uint32_t demote_think_tokens = 5000;  ///< the paper's reasoning-queue limit
  /// A new request may preempt answering requests to be admitted.
  bool admission_preempts = true;
};

struct VllmPolicyOptions {
  bool priority = false;  ///< --scheduling-policy priority
  std::uint32_t max_num_batched_tokens = 8192;
  std::uint32_t max_num_seqs = 1024;
  std::uint32_t long_prefill_token_threshold = 0;  ///< 0: off
  bool reserve_full_isl = true;                    ///< scheduler_reserve_full_isl
  PascalOptions pascal = {};                       ///< PASCAL's ranking and pacer (priority ignored)
};

std::unique_ptr<SchedulingPolicy> make_vllm_policy(const VllmPolicyOptions& options, KvPool& pool);
std::unique_ptr<SchedulingPolicy> make_meridian_policy(const SchedulerOptions& options, StepCostModel model,
                                                       StepLimits limits, KvPool& pool);

}  // namespace meridian::sim::detail
