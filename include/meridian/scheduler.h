// Dual-queue scheduler: the continuous-batching policy (SPEC §3.5, ADR-0007)
// with phase-aware preemption (SPEC §3.6, ADR-0008).
//
// Called once per engine step. It keeps every request's state across steps
// (queues are persistent; nothing is popped and forgotten) and returns the
// step's work: answer-phase decode first, then think-phase decode oldest-last-
// token first (round robin), prefill of waiting requests, and any preemptions
// the caller must carry out before running the step.
//
// Thread-safety: DualQueueScheduler is NOT thread-safe; it belongs to the
// engine's scheduling loop. Ownership: the scheduler owns its request state;
// the StepPlan reference returned by schedule() stays valid until the next
// schedule() call.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "meridian/config.h"
#include "meridian/phase.h"
#include "meridian/step_cost_model.h"

namespace meridian {

/// Engine limits for one step.
struct StepLimits {
  std::uint32_t token_budget = 8192;  ///< max tokens computed in the step (max_num_batched_tokens)
  std::uint32_t max_sequences = 256;  ///< max requests in the step (max_num_seqs)
  /// KV blocks obtainable without preempting anyone (free + evictable cache).
  std::uint64_t free_kv_blocks = std::numeric_limits<std::uint64_t>::max();
  /// ThinkActive blocks below the soft think share (KvBlockUsage::think_headroom());
  /// 0 holds back new reasoning admissions while the pool is short (ADR-0015).
  std::uint64_t free_think_kv_blocks = std::numeric_limits<std::uint64_t>::max();
  /// Prompt tokens the engine prefills on its own this step: requests this
  /// scheduler does not track yet (an engine adapter enters a request at its
  /// first token). Planned as prefill, within the prefill budget and ahead
  /// of optional think decode (ADR-0025); 0 when the scheduler plans every
  /// prefill itself.
  std::uint32_t engine_prefill_tokens = 0;
  /// Of engine_prefill_tokens, the re-prefill of the engine's preemption
  /// victims that had their first token. Held to the room the step's ceiling
  /// leaves: the prefill floor is for prompts before their first token
  /// (ADR-0037).
  std::uint32_t engine_resume_tokens = 0;
};

/// A request entering the scheduler (waiting for prefill).
struct NewRequest {
  RequestId id = 0;
  /// kThinkDecode (reasoning first) or kOutputDecode (thinking disabled).
  /// kPrefill is treated as kThinkDecode.
  Phase phase = Phase::kThinkDecode;
  std::uint32_t prompt_tokens = 0;         ///< >= 1
  std::uint32_t cached_prompt_tokens = 0;  ///< prefix-cache hit: already in KV, no prefill
  std::int64_t arrival_ns = 0;
  /// Times it was preempted before: an engine that re-adds a victim when it
  /// resumes (the vLLM adapter) passes its count, so that admission by
  /// pausing thinking (ADR-0027) never names it again.
  std::uint32_t preemptions = 0;
  /// Prompt tokens an engine already computed for this request alone (the
  /// vLLM adapter adds a request at its first generated token): no prefill,
  /// and unlike cached_prompt_tokens (a prefix shared through the cache) its
  /// KV is the request's own, so a preemption frees it. The larger of the two
  /// counts as computed.
  std::uint32_t computed_prompt_tokens = 0;
  /// A think request an engine re-adds after a preemption keeps its history,
  /// as a victim the scheduler preempted itself does: the tokens it generated
  /// since its first token, and that token's time. Its think deadlines count
  /// from there, so time spent preempted makes it due, not new. generated_tokens
  /// needs first_token_ns (> 0).
  std::uint32_t generated_tokens = 0;
  std::int64_t first_token_ns = 0;
  /// A victim an engine re-adds when it resumes: how long it waited, from its
  /// preemption to its first token after it (0: not a victim, or unknown).
  /// victim_wait_ms() reports the wait victims see from it.
  std::int64_t victim_wait_ns = 0;
};

enum class WorkKind : std::uint8_t {
  kDecode = 0,   ///< one token
  kPrefill = 1,  ///< a chunk of the prompt (or of the recomputed context)
  kSwapIn = 2,   ///< swapped KV comes back, then one token is decoded
};

/// How a preempted request's KV is reclaimed.
enum class ReclaimMode : std::uint8_t {
  kRecompute = 0,  ///< think-phase victims: KV dropped, context recomputed on re-admission
  kSwap = 1,       ///< answer-phase victims: KV copied to host, nothing lost
  kOffload = 2,    ///< any victim when a disagg fabric is configured
};

/// One request's work in the step.
struct ScheduledWork {
  RequestId id = 0;
  WorkKind kind = WorkKind::kDecode;
  Phase phase = Phase::kThinkDecode;
  std::uint32_t tokens = 0;            ///< tokens computed in this step
  std::uint32_t context_tokens = 0;    ///< tokens already in KV before this step
  std::uint32_t new_blocks = 0;        ///< KV blocks to allocate for this step (all tiers)
  std::uint32_t new_think_blocks = 0;  ///< of new_blocks, how many are ThinkActive
  bool due = false;                    ///< think decode forced by the think TPOT guarantee
  bool completes_prefill = false;      ///< the chunk finishes prefill: a token is sampled
};

struct Preemption {
  RequestId id = 0;
  Phase phase = Phase::kThinkDecode;
  ReclaimMode mode = ReclaimMode::kRecompute;
  std::uint32_t blocks = 0;       ///< blocks the scheduler expects to be freed
  std::uint32_t preemptions = 0;  ///< times this request has now been preempted
};

/// Per-step observability (queue depths at step start, batch sizes of the plan).
struct StepStats {
  std::uint32_t output_queue_depth = 0;
  std::uint32_t think_queue_depth = 0;
  std::uint32_t waiting_depth = 0;  ///< new + recompute victims waiting for prefill
  std::uint32_t swapped_depth = 0;
  std::uint32_t output_batch = 0;  ///< answer-phase decodes (incl. swap-ins)
  std::uint32_t think_batch = 0;   ///< think-phase decodes
  std::uint32_t due_think = 0;     ///< of think_batch, forced by the think TPOT guarantee
  std::uint32_t prefill_requests = 0;
  std::uint32_t prefill_tokens = 0;
  /// Prefill tokens this step may hold (the ceiling's room, at least the
  /// prefill floor; when the engine's prefill is only victims that had a
  /// token, no more than the room: ADR-0037): what an engine adapter gives
  /// its own prefill.
  std::uint32_t prefill_budget_tokens = 0;
  /// Of StepLimits::engine_prefill_tokens, what the prefill budget held.
  std::uint32_t engine_prefill_tokens = 0;
  std::uint32_t stalled = 0;              ///< runnable requests left out for lack of KV blocks
  std::uint32_t output_batch_budget = 0;  ///< decodes that fit output_tpot_budget_ms
  std::uint32_t think_batch_cap = 0;      ///< think_batch_multiplier x output_batch_budget
  bool output_slo_bound = false;          ///< answer-phase requests are active
  double step_ceiling_ms = 0;             ///< time bound for optional work this step
  double predicted_step_ms = 0;
  std::uint64_t total_tokens = 0;  ///< cost-model features of the plan
  std::uint64_t kv_tokens = 0;
};

struct StepPlan {
  std::uint64_t step = 0;
  std::vector<ScheduledWork> work;      ///< in priority order
  std::vector<Preemption> preemptions;  ///< carry out before running the step
  std::vector<RequestId> aborted;       ///< can never fit in KV capacity: end them
  /// The prefix lookup attached these requests' cached blocks, then they were not admitted
  /// after all: give the attached blocks back to the cache (they stay waiting, holding no KV).
  std::vector<RequestId> unattached;
  StepStats stats;
};

/// Cumulative counters.
struct SchedulerCounters {
  std::uint64_t steps = 0;
  std::uint64_t scheduled_tokens = 0;
  std::uint64_t preemptions[3] = {};   ///< by ReclaimMode
  std::uint64_t preempted_output = 0;  ///< answer-phase victims (user-visible)
  std::uint64_t preempted_think = 0;
  std::uint64_t admission_preemptions = 0;  ///< think requests paused to admit a new prompt (ADR-0027)
  std::uint64_t ttft_deferred =
      0;  ///< prompts that could no longer meet TTFT, served after the rest (ADR-0028)
  /// [0] answer-phase, [1] think-phase victims, by ReclaimMode (the telemetry cross).
  std::uint64_t preemptions_by_phase[2][3] = {};
  std::uint64_t stalls = 0;
  std::uint64_t aborted = 0;
  /// Partial prefills released (recompute) because nothing ran and no prefill could move.
  std::uint64_t livelock_releases = 0;
  std::uint64_t due_think_decodes = 0;
  /// Steps predicted past output_tpot_budget_ms and past the tightest answer's slack (a step
  /// that takes an answer beyond its mean gap).
  std::uint64_t output_slo_overruns = 0;
  std::uint64_t rejected_step_times = 0;
  std::uint64_t admission_cached_tokens =
      0;  ///< tokens found in the prefix cache at admission (PrefixLookup)
};

struct SchedulerOptions {
  double think_tpot_budget_ms = 80.0;
  double output_tpot_budget_ms = 20.0;
  double ttft_slo_ms = 1000.0;  ///< a new prompt waiting half of it may pause thinking (ADR-0027)
  double ttfv_slo_ms = 0.0;     ///< 0: no TTFV bound; else thinking is paused only with TTFV slack
  bool ttft_triage = true;      ///< prompts that can no longer meet ttft_slo_ms yield (ADR-0028)
  double think_batch_multiplier = 2.5;
  std::uint32_t min_prefill_tokens_per_step = 256;
  bool preemption_enabled = true;
  double preempt_max_fraction = 0.125;
  std::uint32_t preempt_readmit_guard_steps = 8;
  bool fabric_offload = false;  ///< victims are offloaded instead of recomputed/swapped
  std::uint32_t block_tokens = 16;
  std::uint64_t total_kv_blocks = std::numeric_limits<std::uint64_t>::max();  ///< admission check

  /// From [scheduler], [kv_memory] and [disagg]; total_kv_blocks is the
  /// engine's block count. Throws ConfigError if [scheduler] or [kv_memory]
  /// is invalid.
  static SchedulerOptions from_config(const MeridianConfig& config, std::uint64_t total_kv_blocks);
};

/// A prompt waiting for its first token, as TTFT triage (ADR-0028) judges it
/// (DualQueueScheduler::ttft_deferrals()).
struct WaitingPrompt {
  std::int64_t arrival_ns = 0;
  std::uint32_t remaining_tokens = 0;  ///< prefill tokens still to compute
  bool deferred_before = false;        ///< the engine deferred it already (counted once)
};

/// What the scheduler knows about one request (for tests, telemetry, adapters).
struct RequestView {
  enum class State : std::uint8_t { kWaiting, kRunning, kSwapped };
  RequestId id = 0;
  Phase phase = Phase::kThinkDecode;
  State state = State::kWaiting;
  std::uint32_t prompt_tokens = 0;
  std::uint32_t generated_tokens = 0;
  std::uint32_t context_tokens = 0;  ///< tokens in KV
  std::uint32_t preemptions = 0;
  std::int64_t last_token_ns = 0;
};

/// See DualQueueScheduler::engine_view().
struct EngineView {
  std::vector<RequestId> unplanned_think;
  std::vector<RequestId> running_order;
};

class DualQueueScheduler {
 public:
  /// Throws InvalidArgument naming the option on out-of-range options.
  DualQueueScheduler(const SchedulerOptions& options, StepCostModel cost_model);
  ~DualQueueScheduler();
  DualQueueScheduler(DualQueueScheduler&&) noexcept;
  DualQueueScheduler& operator=(DualQueueScheduler&&) noexcept;
  DualQueueScheduler(const DualQueueScheduler&) = delete;
  DualQueueScheduler& operator=(const DualQueueScheduler&) = delete;

  /// Queues a request for prefill. Throws InvalidArgument on a duplicate
  /// id, prompt_tokens == 0, cached > prompt, phase kComplete, or a prompt
  /// that can never fit in total_kv_blocks.
  void add(const NewRequest& request);
  /// Phase change from the router (ExitThink: think -> answer queue before the
  /// next step). kComplete is finish(). Returns false for an unknown id.
  /// `answer_decodes_in_flight`: of the decodes already reported for it
  /// (complete_engine_step), how many the engine ran after the one that
  /// sampled `</think>`: an engine with two steps in flight learns the phase
  /// a step late, so the decode of the step in flight is its first answer
  /// token, at that decode's time (ADR-0032). At most 1 counts.
  bool set_phase(RequestId id, Phase phase, std::uint32_t answer_decodes_in_flight = 0);
  /// The request ended (EOS, abort, length); its state is dropped.
  bool finish(RequestId id);

  /// Called when a request's prefill (a new request's, or a recompute
  /// victim's re-prefill) is admitted and nothing of it is in KV yet, with its
  /// id and the tokens to compute; returns how many leading tokens the engine
  /// found in its prefix cache and attached, so they are not computed (a
  /// victim re-hits its own blocks, as in vLLM). If what is left then does
  /// not fit, the request is not admitted and StepPlan::unattached names it:
  /// the engine gives the attached blocks back. Engines that attach at
  /// arrival pass NewRequest::cached_prompt_tokens instead.
  using PrefixLookup = std::function<std::uint32_t(RequestId id, std::uint32_t tokens)>;
  void set_prefix_lookup(PrefixLookup lookup);

  /// Plans one step. `now_ns` is the engine clock at the step's start.
  const StepPlan& schedule(const StepLimits& limits, std::int64_t now_ns);
  /// Reports that the last plan ran and took `observed_ms`, ending at `end_ns`.
  /// Items listed in `not_run` (e.g. their allocation failed) make no progress.
  void complete_step(double observed_ms, std::int64_t end_ns, std::span<const RequestId> not_run = {});

  [[nodiscard]] std::optional<RequestView> view(RequestId id) const;
  /// For an engine that carries out the plan with its own machinery (the vLLM
  /// adapter): after schedule(), `out` receives the running think requests
  /// the plan left out (throttled) and every running request in the order
  /// the engine should keep them: answers first (queue order), then think
  /// requests by slack, the least first, so the last is the victim this
  /// scheduler would take first (ADR-0036: the latest mean think TPOT
  /// deadline, or TTFV deadline when bound; among equals the shortest
  /// context, then the newest).
  /// O(running log running); clears `out` first.
  void engine_view(EngineView& out) const;
  /// For an engine that runs more than the plan (the vLLM adapter: vLLM
  /// schedules prefill itself, and a request the plan left out may still
  /// run): reports the last plan's step as the engine ran it, ending at
  /// `end_ns`, when its tokens come (deadlines count from it: an engine that
  /// reports a step before it runs passes its predicted end, ADR-0032). Each
  /// running request in `ran` made one decode step, planned
  /// or not; a planned one absent from `ran` made none. Ids unknown to this
  /// scheduler are ignored (vLLM's prefills). The step time is reported
  /// apart, with observe_step(), since an engine with two steps in flight
  /// learns it only a step later. O(plan + ran log ran).
  void complete_engine_step(std::int64_t end_ns, std::span<const RequestId> ran);
  /// For an engine that reports a step before it runs, with its predicted
  /// end (ADR-0032): the step's output came at `from_ns + delta_ns`, not at
  /// `from_ns`. Every token time at or after `from_ns` (that step's decodes
  /// and those of steps reported after it, planned from its predicted end)
  /// moves by `delta_ns`, and the deadlines counted from them follow.
  /// O(requests).
  void retime_tokens(std::int64_t from_ns, std::int64_t delta_ns);
  /// Admission by pausing thinking (ADR-0027) for an engine that owns KV and
  /// preemption (the vLLM adapter): the running think requests to preempt
  /// (recompute) so that a new prompt that arrived at `arrival_ns` and needs
  /// `need_blocks` can start while the engine has `free_blocks`. Empty unless
  /// the prompt has waited half of ttft_slo_ms at `now_ns` and the think
  /// requests that can pause (never preempted before; two TTFT budgets of
  /// slack against their mean think TPOT and, when set, their TTFV) cover
  /// the need, the most slack first (ADR-0036), at most preempt_max_fraction of the
  /// running set and at most `max_victims` (what the step has left when the
  /// engine pauses for several prompts in one step); blocks are counted as
  /// context / block_tokens. Answers are never named. The engine preempts
  /// them and reports each with finish() before it asks again; they are
  /// counted in counters().admission_preemptions. Ignores
  /// SchedulerOptions::preemption_enabled (such an engine turns the core's
  /// own preemption off); the caller decides whether pausing is on.
  std::vector<RequestId> admission_victims(std::int64_t arrival_ns, std::uint64_t need_blocks,
                                           std::uint64_t free_blocks, std::int64_t now_ns,
                                           std::size_t max_victims = std::numeric_limits<std::size_t>::max());
  /// The per-step victim share admission_victims() keeps: preempt_max_fraction
  /// of the running requests this scheduler knows (answer and think queues),
  /// at least one. An engine that pauses for several prompts in one step reads
  /// it once, before the first, and passes what is left as `max_victims`. O(1).
  [[nodiscard]] std::size_t step_victim_share() const;
  /// TTFT triage (ADR-0028) for an engine that orders its own waiting queue
  /// (the vLLM adapter): `queue` holds its new prompts (never preempted) in
  /// queue order. Returns, ascending, the indices of those that can no longer
  /// meet ttft_slo_ms at `now_ns` while the others still can (Moore-Hodgson
  /// on the learned per-token prefill cost); the engine serves them after the
  /// others. A prompt that has waited 10 TTFT budgets is never named. Empty when
  /// SchedulerOptions::ttft_triage is off or before the cost model knows a per-token cost. Prompts named for
  /// the first time (not deferred_before) are counted in counters().ttft_deferred. O(min(queue, 256) log).
  std::vector<std::size_t> ttft_deferrals(std::span<const WaitingPrompt> queue, std::int64_t now_ns);
  /// One step the engine ran: `tokens` computed (decodes and prefill chunks)
  /// over `kv_tokens` of context took `observed_ms`. The step-cost model
  /// learns from these features, not the plan's (ADR-0017). Returns false
  /// when the time was rejected (not finite or not positive; counted).
  bool observe_step(std::uint64_t tokens, std::uint64_t kv_tokens, double observed_ms);
  /// The plan the last schedule() returned (empty before the first).
  [[nodiscard]] const StepPlan& last_plan() const noexcept;
  [[nodiscard]] std::size_t size() const noexcept;
  [[nodiscard]] const SchedulerCounters& counters() const noexcept;
  /// How long a preempted request waits to run again, from its preemption to
  /// its first token after it: smoothed over the victims that resumed (its
  /// own, and those an engine re-adds with NewRequest::victim_wait_ns); 0
  /// before any. Telemetry: no decision reads it (ADR-0035). O(1).
  [[nodiscard]] double victim_wait_ms() const noexcept;
  [[nodiscard]] const StepCostModel& cost_model() const noexcept;
  [[nodiscard]] const SchedulerOptions& options() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

[[nodiscard]] std::string_view to_string(WorkKind kind) noexcept;
[[nodiscard]] std::string_view to_string(ReclaimMode mode) noexcept;

}  // namespace meridian
