// DualQueueScheduler's private state and step algorithm, shared by the
// files that implement its public methods (dual_queue_scheduler.cpp), its
// engine-adapter queries (engine_view.cpp), preemption (preemption.cpp) and
// the prefill lanes (prefill_lanes.cpp). Not installed.
//
// Thread-safety: none (owned by one DualQueueScheduler).

// The dual-queue step algorithm (ADR-0007) and phase-aware preemption
// (ADR-0008, ADR-0015). One pass per step over the queues it needs:
//   1. answer-phase decode (mandatory; may preempt think, then answer victims)
//   2. swap-ins of preempted answer-phase requests
//   3. think decode that is due under the think TPOT guarantee (mandatory)
//   4. prefill in lanes, each FCFS and none blocking another: chat arrivals,
//      reasoning arrivals, then recompute victims (which keep a share of the
//      budget), within the step ceiling but never less than
//      min_prefill_tokens_per_step; new prompts that can no longer meet
//      their TTFT go last (ADR-0028).
//   5. more think decode, oldest-last-token first, up to the think cap and
//      the step ceiling (ADR-0025: a waiting prompt before think tokens the
//      guarantee does not need).
//   6. with nothing running and nothing planned, partial prefills give way
//      to the one furthest along (release_partial_prefills()).
// Think KV has no wall: think_phase_memory_fraction is a soft share that only
// holds back new reasoning admissions while the pool is short (ADR-0015).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

#include "log/log_format.h"
#include "meridian/kv_block_manager.h"
#include "meridian/scheduler.h"
#include "scheduler/request_table.h"
#include "scheduler/ttft_triage.h"

namespace meridian {

namespace sched_detail {
// Warnings a step can repeat, each at most once per 10 s per process (all
// schedulers share them) with a count of the suppressed: a stuck condition
// must not flood the log.
enum class WarnKind : std::uint8_t { kLivelock, kNeverFits, kStepTimeRejected, kStepTimeClamped };
LogRateLimiter& warn_limiter(WarnKind kind) noexcept;  // dual_queue_scheduler.cpp
}  // namespace sched_detail

using sched_detail::kNil;
using sched_detail::Queue;
using sched_detail::RequestTable;
using sched_detail::Slot;
using sched_detail::SlotCold;

struct DualQueueScheduler::Impl {
  // A think request with its victim_deadline(), computed once for a sort.
  struct VictimKey {
    std::int64_t deadline;
    std::uint32_t slot;
  };
  static constexpr double kNsToMs = 1e-6;
  // Spans added to the engine clock are clamped to this (about 31 years), and
  // the sums saturate: a cost model or budget that predicts absurd times must
  // not overflow int64 (UB; on x86 it wrapped negative and starved think).
  static constexpr double kMaxSpanNs = 1e18;
  // A positive span is at least 1 ns: a bound of 1e-9 ms is a bound no request meets, not
  // "no bound" (0), which is what truncation would make of it.
  [[nodiscard]] static std::int64_t span_ns(double ns) noexcept {
    if (!(ns > 0)) return 0;  // also NaN
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::min(ns, kMaxSpanNs)));
  }
  [[nodiscard]] static std::int64_t clock_plus(std::int64_t t, std::int64_t span) noexcept {
    return t > std::numeric_limits<std::int64_t>::max() - span ? std::numeric_limits<std::int64_t>::max()
                                                               : t + span;
  }
  static constexpr double kStepEwmaAlpha = 0.25;
  // The next step may carry up to this fraction more due work than this one.
  static constexpr double kNextStepMargin = 0.5;
  // Admission watermark: each running think request is expected to grow by this
  // many tokens soon; new reasoning is held back when the pool cannot cover it
  // (and think KV is over its soft share).
  static constexpr std::uint32_t kGrowthHorizonTokens = 128;
  // Answer-active steps aim this far below the output TPOT budget: the learned
  // step model is an estimate, and due work and the prefill floor ride on top.
  static constexpr double kOutputCeilingShare = 0.9;
  // Without answers, prefill borrows the unused ceiling of about this many
  // recent steps (the step-time EWMA's horizon at alpha 0.25).
  static constexpr double kPrefillSlackSteps = 4.0;
  // With answers, the step ceiling follows their slack (ADR-0026): never
  // above kMaxCeilingBudgets budgets (ADR-0029: the time the answers banked
  // goes to thinking, and no single answer gap grows past 1.35 budgets),
  // never below half of one (a late answer does not shrink every step to
  // nothing), and the prefill may take the slack they banked, up to
  // kMaxPrefillBudgets.
  static constexpr double kMinCeilingBudgets = 0.5;
  static constexpr double kMaxCeilingBudgets = 1.5;
  static constexpr double kMaxPrefillBudgets = 5.0;
  // Backstop of the think guarantee: no single think gap beyond this many budgets.
  static constexpr double kMaxGapBudgets = 4.0;
  // Memory pressure ends once this share of the pool (1/50 = 2%) is free beyond
  // the growth reserve.
  static constexpr std::uint64_t kHighWatermarkDivisor = 50;
  // Admission by pausing thinking (ADR-0027): a new prompt that has waited
  // this share of the TTFT budget may take KV from think requests whose
  // deadlines (mean think TPOT, and TTFV when bound) are at least this many
  // TTFT budgets away: the wait moves to a request that can absorb it.
  static constexpr double kAdmitAfterTtftShare = 0.5;
  static constexpr double kVictimSlackTtftBudgets = 2.0;
  // The victim wait telemetry (victim_wait_ms()) weighs each resumed
  // victim's wait by this much: about the last ten resumptions.
  static constexpr double kVictimWaitSmoothing = 0.1;

  SchedulerOptions opt;
  StepCostModel model;
  RequestTable table;
  StepPlan plan;
  SchedulerCounters counters;
  struct PlannedSlot {
    std::uint32_t slot = kNil;
    std::uint32_t generation = 0;  // when planned: a finished or reused slot is skipped
  };
  std::vector<PlannedSlot> planned;            // one per work item
  std::vector<std::uint32_t> swapped_in;       // join their run queue at finalize()
  std::array<std::uint32_t, 2> last_served{};  // per run queue: end of the served prefix
  std::array<bool, 2> served_out_of_order{};  // per run queue: a decode was not at the front of what was left
  std::vector<std::uint32_t> chosen;          // preemption scratch
  std::vector<std::uint32_t> to_abort;
  std::uint64_t step = 0;
  double recent_step_ms = 0;         // EWMA of observed step times
  double overrun_threshold_ms = 0;   // this step's output SLO overrun bound: max(budget, answer slack)
  std::int64_t earliest_due_ns = 0;  // this step's earliest due think deadline (decode_due_think)
  bool plan_pending = false;
  std::uint64_t running_context = 0;  // sum of computed over the two running queues

  // Per-step budget, reset by schedule().
  std::uint64_t free_blocks = 0;
  std::uint64_t think_share_left = 0;  // ThinkActive blocks below the soft share
  std::uint64_t growth_reserve = 0;    // blocks running think requests will need soon (admission watermark)
  std::uint64_t high_watermark = 0;    // free blocks that end memory pressure
  bool pressure = false;               // a preemption happened and the pool has not recovered
  bool idle_engine = false;            // nothing running: admit whatever fits
  bool any_deferred = false;           // TTFT triage deferred a prompt this step
  std::uint32_t victim_room = 0;       // prefill tokens victims with a token may still take (ADR-0037)
  std::vector<std::uint32_t> think_victims;  // preemption scratch: think candidates
  std::vector<VictimKey> victim_keys;        // preemption scratch: think candidates with their deadlines
  sched_detail::TtftTriage triage;           // TTFT triage scratch (ADR-0028)
  std::vector<WaitingPrompt> triage_queue;
  std::vector<std::uint32_t> triage_slots;
  DualQueueScheduler::PrefixLookup prefix_lookup;
  std::uint32_t tokens_left = 0;
  std::uint32_t seqs_left = 0;
  std::uint32_t victims_left = 0;
  std::uint64_t tok = 0;
  std::uint64_t kv = 0;

  // log2(block_tokens) when it is a power of two (the usual 16): a 64-bit
  // division per block computation was the largest cost of a decode.
  int block_shift = -1;
  // The think guarantee in ns, computed once: think_deadline() runs for
  // every served think request and a division there was most of its cost.
  double think_budget_ns = 0;
  double output_budget_ns = 0;
  std::int64_t max_think_gap_ns = 0;
  std::int64_t admit_after_ns = 0;   // kAdmitAfterTtftShare of the TTFT budget
  std::int64_t victim_slack_ns = 0;  // kVictimSlackTtftBudgets TTFT budgets
  double victim_wait_ns = 0;         // smoothed wait of resumed victims (0: none yet)
  std::int64_t ttft_slo_ns = 0;
  std::int64_t ttfv_slo_ns = 0;  // 0: no TTFV bound
  std::int64_t now_ns_ = 0;      // this step's planning time

  Impl(const SchedulerOptions& o, StepCostModel m)
      : opt(o),
        model(m),
        think_budget_ns(o.think_tpot_budget_ms / kNsToMs),
        output_budget_ns(o.output_tpot_budget_ms / kNsToMs),
        max_think_gap_ns(span_ns(kMaxGapBudgets * think_budget_ns)),
        admit_after_ns(span_ns(kAdmitAfterTtftShare * o.ttft_slo_ms / kNsToMs)),
        victim_slack_ns(span_ns(kVictimSlackTtftBudgets * o.ttft_slo_ms / kNsToMs)),
        ttft_slo_ns(span_ns(o.ttft_slo_ms / kNsToMs)),
        ttfv_slo_ns(span_ns(o.ttfv_slo_ms / kNsToMs)) {
    if (std::has_single_bit(o.block_tokens)) block_shift = std::countr_zero(o.block_tokens);
  }

  [[nodiscard]] std::uint32_t blocks_for(std::uint64_t tokens) const {
    const std::uint64_t rounded_up = tokens + opt.block_tokens - 1;
    return static_cast<std::uint32_t>(block_shift >= 0 ? rounded_up >> block_shift
                                                       : rounded_up / opt.block_tokens);
  }
  // Whether `tokens` fills whole blocks, so the next token opens a new one.
  [[nodiscard]] bool block_boundary(std::uint64_t tokens) const {
    return block_shift >= 0 ? (tokens & (opt.block_tokens - 1)) == 0 : tokens % opt.block_tokens == 0;
  }
  [[nodiscard]] std::uint32_t new_blocks(std::uint32_t context, std::uint32_t n) const {
    return blocks_for(std::uint64_t{context} + n) - blocks_for(context);
  }
  // Blocks whose first token lies past the prompt, allocated while thinking.
  [[nodiscard]] std::uint32_t new_think_blocks(const Slot& r, std::uint32_t context, std::uint32_t n) const {
    if (r.phase != Phase::kThinkDecode) return 0;
    const std::uint32_t lo = std::max(blocks_for(context), blocks_for(r.prompt));
    const std::uint32_t hi = blocks_for(std::uint64_t{context} + n);
    return hi > lo ? hi - lo : 0;
  }
  [[nodiscard]] std::uint32_t held_blocks(const Slot& r) const {
    const std::uint32_t held = blocks_for(r.computed);
    const std::uint32_t shared = table.cold(r).shared_blocks;
    return held > shared ? held - shared : 0;
  }
  [[nodiscard]] bool in_batch(const Slot& r) const { return r.batch_step == step; }
  // A re-admitted victim is not a victim again for a while (longer each time).
  void guard_readmission(std::uint32_t s) {
    SlotCold& c = table.cold(s);
    c.guard_until_step = step + std::uint64_t{opt.preempt_readmit_guard_steps} * c.preemptions;
  }
  [[nodiscard]] bool running(const Slot& r) const {
    return r.queue == Queue::kOutputQueue || r.queue == Queue::kThinkQueue;
  }

  // Inlined: it runs once per scheduled request, and a call with seven
  // arguments cost as much as the work itself (docs/benchmarks.md).
  [[gnu::always_inline]] void emit(std::uint32_t s, WorkKind kind, std::uint32_t tokens, std::uint32_t nb,
                                   std::uint32_t ntb, bool due, bool completes) {
    Slot& r = table.at(s);
    plan.work.push_back({r.id, kind, r.phase, tokens, r.computed, nb, ntb, due, completes});
    planned.push_back({s, r.generation});
    if (kind == WorkKind::kDecode) {
      // Served decodes rotate to the back in O(1) only while they are a prefix of their queue.
      if (r.prev != last_served[r.queue]) served_out_of_order[r.queue] = true;
      last_served[r.queue] = s;
    }
    if (kind != WorkKind::kPrefill && r.phase == Phase::kOutputDecode) ++plan.stats.output_batch;
    r.batch_step = step;
    free_blocks -= nb;
    --seqs_left;
    tokens_left -= tokens;
    tok += tokens;
    kv += std::uint64_t{r.computed} + tokens;
  }

  // --- preemption (ADR-0008) and admission by pausing thinking (ADR-0027) ----
  // Defined in preemption.cpp, where each states its rule.
  void sort_least_progress_first(std::vector<std::uint32_t>& slots) const;
  void sort_most_slack_first(std::vector<std::uint32_t>& slots);
  [[nodiscard]] bool candidate(std::uint32_t s, std::uint32_t requester) const;
  bool preempt_for(std::uint32_t requester, std::uint64_t need, bool answer_victims);
  bool choose_paused(std::uint64_t need, std::uint64_t free, std::size_t cap, bool skip_planned);
  bool pause_thinking_for(std::uint64_t need);
  void preempt(std::uint32_t s);

  // A new prompt (never preempted) that has waited kAdmitAfterTtftShare of
  // the TTFT budget and can still meet it (not deferred by TTFT triage).
  [[nodiscard]] bool ttft_at_risk(const Slot& r, const SlotCold& c) const {
    return opt.preemption_enabled && r.queue == Queue::kWaitQueue && c.preemptions == 0 &&
           c.deferred_step != step && now_ns_ - c.arrival_ns >= admit_after_ns;
  }
  // A running think request that can absorb a wait: never preempted before
  // (so nobody is paused twice this way), and its mean think TPOT deadline
  // and, when bound, its TTFV deadline at least victim_slack_ns away. The
  // measured victim wait is not a condition (ADR-0035 retired ADR-0034's).
  [[nodiscard]] bool can_pause(const Slot& r, const SlotCold& c) const {
    if (c.preemptions > 0 || held_blocks(r) == 0) return false;
    if (think_mean_deadline(r, c) - now_ns_ < victim_slack_ns) return false;
    return ttfv_slo_ns == 0 || clock_plus(c.arrival_ns, ttfv_slo_ns) - now_ns_ >= victim_slack_ns;
  }
  void note_victim_wait(std::int64_t wait_ns) {
    smooth(victim_wait_ns, static_cast<double>(std::max<std::int64_t>(wait_ns, 0)), kVictimWaitSmoothing);
  }
  // Exponential smoothing of `estimate` toward `value` by `weight`; the first
  // value (while the estimate is 0) sets it.
  static void smooth(double& estimate, double value, double weight) {
    estimate = estimate == 0 ? value : estimate + weight * (value - estimate);
  }
  // A victim produced its first token since its preemption.
  void resumed(SlotCold& c, std::int64_t end_ns) {
    if (c.preempted_ns == 0) return;
    note_victim_wait(end_ns - c.preempted_ns);
    c.preempted_ns = 0;
  }
  [[nodiscard]] std::size_t victim_cap(std::uint32_t running_count) const {
    return std::max(1U, static_cast<std::uint32_t>(std::floor(opt.preempt_max_fraction * running_count)));
  }

  // --- the step --------------------------------------------------------------

  // Answers may always preempt (think victims first). The think TPOT
  // guarantee may not while the pool is under pressure (a preemption already
  // happened and memory has not recovered): it degrades to a stall instead of
  // feeding a preemption storm, unless nothing at all could run this step
  // (then progress needs a victim).
  [[nodiscard]] bool may_preempt(const Slot& r) const {
    return r.phase == Phase::kOutputDecode || !pressure || plan.work.empty();
  }

  // Schedules one decode; mandatory work may preempt. Returns whether it ran.
  [[gnu::always_inline]] bool try_decode(std::uint32_t s, bool mandatory, bool due) {
    Slot& r = table.at(s);
    // One token needs a new block only when the last one is full; the think
    // formula is the slow path.
    std::uint32_t nb = 0;
    std::uint32_t ntb = 0;
    if (block_boundary(r.computed)) {
      nb = 1;
      ntb = new_think_blocks(r, r.computed, 1);
      if (nb > free_blocks &&
          !(mandatory && may_preempt(r) && preempt_for(s, nb, r.phase == Phase::kOutputDecode))) {
        stall(r, nb);
        return false;
      }
    }
    emit(s, WorkKind::kDecode, 1, nb, ntb, due, false);
    return true;
  }

  void stall(Slot& r, std::uint32_t nb) {
    r.stalled_step = step;
    ++plan.stats.stalled;
    ++counters.stalls;
    // Alone it can never fit: waiting would hang forever, so it is ended.
    const bool never_fits = std::uint64_t{blocks_for(r.computed)} + nb > opt.total_kv_blocks;
    if (never_fits) to_abort.push_back(table.find(r.id));
  }

  void decode_outputs() {
    for (std::uint32_t s = table.front(Queue::kOutputQueue); s != kNil; s = table.at(s).next) {
      if (seqs_left == 0 || tokens_left == 0) return;
      try_decode(s, true, false);
    }
  }

  void swap_in() {
    for (std::uint32_t s = table.front(Queue::kSwapQueue); s != kNil;) {
      Slot& r = table.at(s);
      const std::uint32_t next = r.next;
      if (seqs_left == 0 || tokens_left == 0) return;
      const std::uint32_t nb = blocks_for(r.computed) + new_blocks(r.computed, 1);
      const std::uint32_t ntb = r.think_blocks + new_think_blocks(r, r.computed, 1);
      if (nb > free_blocks && !preempt_for(s, nb, false)) return;  // FIFO
      emit(s, WorkKind::kSwapIn, 1, nb, ntb, false, false);
      running_context += r.computed;
      guard_readmission(s);
      // Stays in the swap queue until finalize(): were it in a run queue now,
      // the think pass could reach it and schedule it twice.
      swapped_in.push_back(s);
      s = next;
    }
  }

  // The think TPOT guarantee (ADR-0015) is the SLO's own quantity: a think
  // request's mean gap, think duration / think tokens, stays within
  // think_tpot_budget_ms. A request skipped now is next served at the end of
  // the next step at the latest (plus a margin for the next step carrying
  // more due work), so it is due when that would lift its mean past the
  // budget, or stretch this one gap past kMaxGapBudgets budgets (a backstop:
  // no request is parked for long even with slack in its mean), or when it
  // found no KV block last step (it may now preempt, so memory pressure
  // cannot park it forever). The slack in the mean is what lets answer steps
  // stay short through load peaks. A step is estimated as the largest of the
  // recent step time, this step's ceiling and a step holding every running
  // request plus the prefill floor. Due requests are scattered over the think
  // queue (it is ordered by last token, the mean depends on each request's
  // history), so the whole queue is scanned.
  // Each request carries its deadline (think_deadline()), so the scan is one
  // comparison per request.
  void decode_due_think(std::int64_t now_ns, double floor_ms) {
    constexpr double kSteps = 2 + kNextStepMargin;
    const std::int64_t horizon_end_ns = clock_plus(now_ns, span_ns(kSteps * floor_ms / kNsToMs));
    auto is_due = [&](const Slot& r) {
      return horizon_end_ns > r.deadline_ns || (r.stalled_step != 0 && r.stalled_step + 1 == step);
    };
    earliest_due_ns = std::numeric_limits<std::int64_t>::max();
    for (std::uint32_t s = table.front(Queue::kThinkQueue); s != kNil; s = table.at(s).next) {
      if (seqs_left == 0 || tokens_left == 0) break;
      if (!is_due(table.at(s))) continue;
      if (try_decode(s, true, true)) {
        ++plan.stats.due_think;
        const std::int64_t deadline = table.at(s).deadline_ns;
        if (deadline > now_ns) earliest_due_ns = std::min(earliest_due_ns, deadline);
      }
    }
    counters.due_think_decodes += plan.stats.due_think;
  }

  // The time left before the earliest deadline among this step's due think
  // decodes: the optional work (prefill beyond its floor, optional think)
  // must end the step by then. A request was left out of the last step on
  // the estimate that the next one stays near that step's length; when the
  // regime changes between them (the last answer finishes, so the ceiling and
  // the prefill's borrowing jump), that estimate breaks, and a long step
  // here would carry the due token past its deadline. Only deadlines still
  // ahead count: a request already late (memory pressure, a stall) is served
  // now whatever the step's length, and cutting every prompt to the floor
  // for it would starve prefill while such requests last (a long-think run
  // under KV pressure took 43 % longer that way).
  [[nodiscard]] double due_room_ms(std::int64_t now_ns) const {
    if (plan.stats.due_think == 0 || earliest_due_ns <= now_ns) {
      return std::numeric_limits<double>::infinity();
    }
    return static_cast<double>(earliest_due_ns - now_ns) * kNsToMs;
  }

  // Prefill lanes (ADR-0015). Each lane is FCFS and a request that does not
  // fit blocks only its own lane: chat arrivals never wait behind reasoning,
  // and no new arrival waits behind a recompute victim.
  enum Lane : std::uint8_t { kChatLane = 0, kReasoningLane = 1, kResumeLane = 2, kLaneCount = 3 };

  [[nodiscard]] static Lane lane_of(const Slot& r) {
    if (r.queue == Queue::kResumeQueue) return kResumeLane;
    return r.phase == Phase::kOutputDecode ? kChatLane : kReasoningLane;
  }

  // Admission watermarks (ADR-0015): blocks that must stay free after a new
  // (re)prefill starts. Outside pressure, chat needs none and reasoning keeps
  // the running think requests' growth free once think KV is over its soft
  // share; recompute victims always keep it. Under pressure (a preemption
  // happened and the pool has not recovered past the high watermark) chat
  // keeps the growth reserve and everything else the high watermark, so
  // victims are not re-admitted only to be preempted again (hysteresis).
  // A prefill already under way is never held, nor anything when nothing runs.
  [[nodiscard]] std::uint64_t watermark(Lane lane) const {
    if (lane == kChatLane) return pressure ? growth_reserve : 0;
    if (pressure) return high_watermark;
    return lane == kResumeLane || think_share_left == 0 ? growth_reserve : 0;
  }

  // --- prefill lanes (ADR-0015) and TTFT triage (ADR-0028) -------------------
  // Defined in prefill_lanes.cpp, where each states its rule.
  [[nodiscard]] std::uint32_t fit_chunk(const Slot& r, std::uint32_t want) const;
  [[nodiscard]] bool admission_held(const Slot& r, std::uint32_t chunk) const;
  std::uint32_t prefill_lanes(std::uint8_t q, std::uint32_t budget, std::array<bool, kLaneCount>& blocked,
                              bool deferred = false);
  [[nodiscard]] bool never_fits_prefill(const Slot& r) const;
  std::uint64_t attach_cached(Slot& r);
  void detach_cached(Slot& r, std::uint64_t taken);
  std::uint32_t prefill(double ceiling_ms);
  void triage_prompts();
  [[nodiscard]] sched_detail::TtftTriageParams triage_params() const;
  void reserve_engine_prefill(const StepLimits& limits, std::uint32_t budget_left);
  // Progress when nothing runs and no prefill could move (preemption.cpp).
  void release_partial_prefills();

  // New blocks the think requests optional think may serve would need for
  // their next token (one each at a block boundary), up to the think cap.
  [[nodiscard]] std::uint64_t optional_think_growth_blocks(std::uint32_t think_cap) const {
    std::uint64_t blocks = 0;
    std::uint32_t served = plan.stats.think_batch;
    for (std::uint32_t s = table.front(Queue::kThinkQueue); s != kNil && served < think_cap;
         s = table.at(s).next) {
      const Slot& r = table.at(s);
      if (in_batch(r) || r.stalled_step == step) continue;
      ++served;
      if (block_boundary(r.computed)) ++blocks;
    }
    return blocks;
  }

  // Think decode beyond what is due, oldest last token first, while the step
  // stays within `ceiling_ms` and the think cap. Runs after prefill: a prompt
  // waiting for its first token (TTFT) comes before think tokens the think
  // TPOT guarantee does not need (ADR-0025).
  void decode_optional_think(double ceiling_ms, std::uint32_t think_cap) {
    // The cost model is monotone in both features, so when even a request
    // with no context would pass the ceiling, every one would: the walk
    // (which would skip the whole due batch first) is not needed.
    if (model.predict_ms(tok + 1, kv + 1) > ceiling_ms) return;
    for (std::uint32_t s = table.front(Queue::kThinkQueue); s != kNil; s = table.at(s).next) {
      if (plan.stats.think_batch >= think_cap || seqs_left == 0 || tokens_left == 0) return;
      const Slot& r = table.at(s);
      if (in_batch(r) || r.stalled_step == step) continue;  // due: planned, or found no block
      if (model.predict_ms(tok + 1, kv + r.computed + 1) > ceiling_ms) return;
      if (try_decode(s, false, false)) ++plan.stats.think_batch;
    }
  }

  // Round robin: served decodes go to the back of their queue, in plan order,
  // then swap-ins join theirs. Each pass walks its queue from the front, so
  // in a queue where no decode was served out of order and without a stall
  // (a skipped request) the served requests are exactly a prefix ending at
  // last_served, moved in O(1); the other queue may still need the walk.
  void finalize() {
    StepStats& st = plan.stats;
    std::array<bool, 2> in_order{};
    for (std::uint8_t q : {std::uint8_t{Queue::kOutputQueue}, std::uint8_t{Queue::kThinkQueue}}) {
      in_order[q] = st.stalled == 0 && !served_out_of_order[q];
      if (in_order[q] && last_served[q] != kNil) table.rotate_prefix_to_back(q, last_served[q]);
    }
    if (!in_order[Queue::kOutputQueue] || !in_order[Queue::kThinkQueue]) {
      for (std::size_t i = 0; i < plan.work.size(); ++i) {
        const std::uint32_t s = planned[i].slot;
        const std::uint8_t q = table.at(s).queue;
        if (plan.work[i].kind == WorkKind::kDecode && !in_order[q]) table.push_back(q, s);
      }
    }
    for (std::uint32_t s : swapped_in) {
      table.push_back(table.at(s).phase == Phase::kOutputDecode ? Queue::kOutputQueue : Queue::kThinkQueue,
                      s);
    }
    for (std::uint32_t s : to_abort) {
      if (table.at(s).batch_step == step) continue;  // ran after all (a later preemption freed room)
      plan.aborted.push_back(table.at(s).id);
      ++counters.aborted;
      log_detail::logf_limited(
          sched_detail::warn_limiter(sched_detail::WarnKind::kNeverFits), LogLevel::kWarn,
          "scheduler: request {} aborted: it can never fit in the KV capacity of {} blocks", table.at(s).id,
          opt.total_kv_blocks);
      drop(s);
    }
    to_abort.clear();
    st.total_tokens = tok;
    st.kv_tokens = kv;
    st.predicted_step_ms = model.predict_ms(tok, kv);
    // An overrun takes some answer past its mean: beyond the budget and
    // beyond what the tightest answer banked (ADR-0029).
    if (st.output_slo_bound && st.predicted_step_ms > overrun_threshold_ms) {
      ++counters.output_slo_overruns;
    }
    counters.scheduled_tokens += tok;
  }

  void drop(std::uint32_t s) {
    const Slot& r = table.at(s);
    if (running(r)) running_context -= r.computed;
    table.destroy(s);
  }

  // B_o: decodes that fit output_tpot_budget_ms at the mean running context.
  [[nodiscard]] std::uint32_t output_batch_budget(std::uint32_t running_count, std::uint32_t max_seqs) const {
    const StepCostCoefficients k = model.coefficients();
    const double ctx = running_count == 0 ? 0.0 : static_cast<double>(running_context) / running_count;
    const double per_seq_ms = k.per_token_ms + k.per_kv_token_us * 1e-3 * (ctx + 1);
    const double room = opt.output_tpot_budget_ms - k.base_ms;
    const double n = per_seq_ms > 0 ? std::floor(room / per_seq_ms) : static_cast<double>(max_seqs);
    return static_cast<std::uint32_t>(std::clamp(n, 1.0, static_cast<double>(std::max(max_seqs, 1U))));
  }

  const StepPlan& schedule(const StepLimits& limits, std::int64_t now_ns) {
    ++step;
    now_ns_ = now_ns;
    ++counters.steps;
    plan.step = step;
    plan.work.clear();
    plan.preemptions.clear();
    plan.aborted.clear();
    plan.unattached.clear();
    plan.stats = StepStats{};
    planned.clear();
    swapped_in.clear();
    last_served.fill(kNil);
    served_out_of_order.fill(false);
    free_blocks = limits.free_kv_blocks;
    think_share_left = limits.free_think_kv_blocks;
    tokens_left = limits.token_budget;
    seqs_left = limits.max_sequences;
    tok = kv = 0;

    StepStats& st = plan.stats;
    st.output_queue_depth = table.depth(Queue::kOutputQueue);
    st.think_queue_depth = table.depth(Queue::kThinkQueue);
    st.waiting_depth = table.depth(Queue::kWaitQueue) + table.depth(Queue::kResumeQueue);
    st.swapped_depth = table.depth(Queue::kSwapQueue);
    const std::uint32_t running_count = st.output_queue_depth + st.think_queue_depth;
    growth_reserve = std::uint64_t{st.think_queue_depth} * blocks_for(kGrowthHorizonTokens);
    high_watermark = growth_reserve + opt.total_kv_blocks / kHighWatermarkDivisor;
    if (pressure && free_blocks >= high_watermark) pressure = false;
    idle_engine = running_count == 0 && st.swapped_depth == 0;
    victims_left = opt.preemption_enabled ? static_cast<std::uint32_t>(victim_cap(running_count)) : 0;
    const bool output_active = st.output_queue_depth > 0 || st.swapped_depth > 0;
    st.output_slo_bound = output_active;
    st.output_batch_budget = output_batch_budget(running_count, limits.max_sequences);
    st.think_batch_cap = static_cast<std::uint32_t>(
        std::max(1.0, std::floor(opt.think_batch_multiplier * st.output_batch_budget)));
    // With answers, the step ends before the earliest answer deadline (the
    // slack of the tightest answer, within [kMinCeilingBudgets,
    // kMaxCeilingBudgets] budgets).
    // Without, steps stay short enough that a think request may be skipped
    // at least once: two steps (plus margin) within half the budget.
    const double answer_budget_ms = opt.output_tpot_budget_ms;
    const double answer_slack = answer_slack_ms(now_ns);
    overrun_threshold_ms = std::max(answer_budget_ms, answer_slack);
    st.step_ceiling_ms =
        output_active ? kOutputCeilingShare * std::clamp(answer_slack, kMinCeilingBudgets * answer_budget_ms,
                                                         kMaxCeilingBudgets * answer_budget_ms)
                      : opt.think_tpot_budget_ms / (2 * (2 + kNextStepMargin));

    decode_outputs();
    swap_in();
    const bool waiting = st.waiting_depth > 0 || limits.engine_prefill_tokens > 0;
    const std::uint32_t floor_tokens = waiting ? std::min(opt.min_prefill_tokens_per_step, tokens_left) : 0;
    // Prefill may borrow the time the answers banked: the answer SLO bounds
    // the *mean* gap, so a longer step after short ones keeps every answer's
    // mean, and a prompt finishes in fewer steps (TTFT). Without answers, what
    // recent steps left unused below the ceiling, or the slack the think
    // requests banked (ADR-0028), whichever is more.
    const double unused_ms = recent_step_ms > 0 ? std::max(0.0, st.step_ceiling_ms - recent_step_ms) : 0.0;
    const double prefill_ceiling_ms =
        output_active && std::isfinite(answer_slack)
            ? std::max(st.step_ceiling_ms,
                       kOutputCeilingShare * std::min(answer_slack, kMaxPrefillBudgets * answer_budget_ms))
            : std::max(st.step_ceiling_ms + kPrefillSlackSteps * unused_ms, think_slack_ceiling_ms(now_ns));
    // No step of this plan can be longer than one holding every running
    // request plus the prefill floor, the prefill's ceiling or the step
    // ceiling: bound S by it too.
    const double full_step_ms = model.predict_ms(std::uint64_t{running_count} + floor_tokens,
                                                 running_context + running_count + floor_tokens);
    decode_due_think(
        now_ns, std::max({waiting ? prefill_ceiling_ms : st.step_ceiling_ms, recent_step_ms, full_step_ms}));
    st.think_batch = st.due_think;
    // Prefill goes before optional think for time, not for KV: the blocks the
    // next think tokens need stay out of its reach, or a prompt admitted now
    // would stall running requests into preemption.
    const std::uint64_t think_growth =
        std::min(free_blocks, optional_think_growth_blocks(st.think_batch_cap));
    free_blocks -= think_growth;
    const double due_room = due_room_ms(now_ns);
    const std::uint32_t prefill_left = prefill(std::min(prefill_ceiling_ms, due_room));
    free_blocks += think_growth;
    reserve_engine_prefill(limits, prefill_left);
    // Without answers the ceiling is only the step the think guarantee plans
    // with: every running request plus the prefill floor also fits in it.
    decode_optional_think(
        std::min(output_active ? st.step_ceiling_ms : std::max(st.step_ceiling_ms, full_step_ms), due_room),
        st.think_batch_cap);
    if (plan.work.empty() && running_count == 0) release_partial_prefills();
    finalize();
    plan_pending = true;
    return plan;
  }

  // Without answers, a prefill step may last until the earliest think
  // deadline with room for one more step after it (as decode_due_think()
  // plans), within one think budget: think requests served faster than
  // their budget bank slack in their mean, as answers do (ADR-0026).
  [[nodiscard]] double think_slack_ceiling_ms(std::int64_t now_ns) const {
    const double slack_ms = static_cast<double>(earliest_deadline_ns(Queue::kThinkQueue) - now_ns) * kNsToMs /
                            (2 + kNextStepMargin);
    return kOutputCeilingShare * std::min(slack_ms, opt.think_tpot_budget_ms);
  }
  // The time to the earliest deadline of the running answers (infinite when
  // none has had its first answer token): how long this step may run.
  [[nodiscard]] double answer_slack_ms(std::int64_t now_ns) const {
    const std::int64_t earliest = earliest_deadline_ns(Queue::kOutputQueue);
    if (earliest == std::numeric_limits<std::int64_t>::max()) return std::numeric_limits<double>::infinity();
    return static_cast<double>(earliest - now_ns) * kNsToMs;
  }
  // The earliest deadline in a run queue (int64 max when it is empty).
  [[nodiscard]] std::int64_t earliest_deadline_ns(std::uint8_t q) const {
    std::int64_t earliest = std::numeric_limits<std::int64_t>::max();
    for (std::uint32_t s = table.front(q); s != kNil; s = table.at(s).next) {
      earliest = std::min(earliest, table.at(s).deadline_ns);
    }
    return earliest;
  }

  // An answer request's next deadline: the time that keeps the mean gap since
  // its first answer token within output_tpot_budget_ms (ADR-0026).
  [[nodiscard]] std::int64_t answer_deadline(const Slot& r, SlotCold& c, std::int64_t end_ns) const {
    if (c.first_answer_ns == 0) c.first_answer_ns = end_ns;
    const std::uint32_t answered = r.generated - std::min(r.generated, c.answer_base);
    return clock_plus(c.first_answer_ns, span_ns(output_budget_ns * static_cast<double>(answered)));
  }

  // When a think request's next token must have come: skipped past it, its
  // mean gap over the `generated` gaps since its first token would pass the
  // budget, or this one gap would pass kMaxGapBudgets budgets.
  [[nodiscard]] std::int64_t think_deadline(const Slot& r, const SlotCold& c) const {
    return std::min(think_mean_deadline(r, c), clock_plus(c.last_token_ns, max_think_gap_ns));
  }
  // The latest time the next think token keeps the mean gap within budget.
  [[nodiscard]] std::int64_t think_mean_deadline(const Slot& r, const SlotCold& c) const {
    return clock_plus(c.first_token_ns, span_ns(think_budget_ns * static_cast<double>(r.generated)));
  }
  // The first deadline a wait would cost a think request (ADR-0036): its
  // next token's mean think TPOT deadline (before its first token, its TTFT
  // deadline) and, when bound, its TTFV deadline. The later it is, the more
  // slack the request has banked to absorb a preemption.
  [[nodiscard]] std::int64_t victim_deadline(const Slot& r, const SlotCold& c) const {
    const std::int64_t own =
        c.first_token_ns == 0 ? clock_plus(c.arrival_ns, ttft_slo_ns) : think_mean_deadline(r, c);
    return ttfv_slo_ns == 0 ? own : std::min(own, clock_plus(c.arrival_ns, ttfv_slo_ns));
  }
  [[nodiscard]] VictimKey victim_key(std::uint32_t s) const {
    return {victim_deadline(table.at(s), table.cold(s)), s};
  }
  // The think victim order (ADR-0036), one definition for preempt_for(),
  // choose_paused() and engine_view(): whether `a` goes before `b`. The
  // later deadline first; among equals the least progress lost, then the
  // newest. A strict total order (ids are unique).
  [[nodiscard]] bool victim_before(const VictimKey& a, const VictimKey& b) const {
    if (a.deadline != b.deadline) return a.deadline > b.deadline;
    const Slot& x = table.at(a.slot);
    const Slot& y = table.at(b.slot);
    return x.computed != y.computed ? x.computed < y.computed : table.older(b.slot, a.slot);
  }

  void complete(double observed_ms, std::int64_t end_ns, std::span<const RequestId> not_run) {
    if (!plan_pending) return;
    plan_pending = false;
    learn(plan.stats.total_tokens, plan.stats.kv_tokens, observed_ms, plan.stats.predicted_step_ms);
    for (std::size_t i = 0; i < plan.work.size(); ++i) {
      const ScheduledWork& w = plan.work[i];
      if (!not_run.empty() && std::find(not_run.begin(), not_run.end(), w.id) != not_run.end()) continue;
      advance(i, end_ns);
    }
  }

  // One observed step time: the cost model learns from it (features: what the
  // step computed), and the smoothed step time the think deadlines use moves.
  void learn(std::uint64_t tokens, std::uint64_t kv_tokens, double observed_ms, double predicted) {
    const std::uint64_t clamped_before = model.clamped();
    if (!model.observe(tokens, kv_tokens, observed_ms)) {
      ++counters.rejected_step_times;
      log_detail::logf_limited(sched_detail::warn_limiter(sched_detail::WarnKind::kStepTimeRejected),
                               LogLevel::kWarn,
                               "scheduler: step time {} ms rejected (must be finite and > 0)", observed_ms);
    } else if (model.clamped() != clamped_before) {
      log_detail::logf_limited(
          sched_detail::warn_limiter(sched_detail::WarnKind::kStepTimeClamped), LogLevel::kDebug,
          "scheduler: step time {:.3f} ms clamped in the step-cost model (predicted {:.3f} ms)", observed_ms,
          predicted);
    }
    // Bounded as the cost model bounds it, so one absurd timing cannot make
    // every think request due for the next dozens of steps.
    const double took = std::isfinite(observed_ms) && observed_ms > 0
                            ? std::min(observed_ms, predicted + StepCostModel::residual_bound_ms(predicted))
                            : predicted;
    // Smoothed so one long step (a big prefill) does not make every think request due.
    smooth(recent_step_ms, took, kStepEwmaAlpha);
  }

  // The last plan's item `i` ran, ending at `end_ns`.
  void advance(std::size_t i, std::int64_t end_ns) {
    const ScheduledWork& w = plan.work[i];
    const std::uint32_t s = planned[i].slot;
    Slot& r = table.at(s);
    if (r.generation != planned[i].generation) return;  // finished or reused meanwhile
    // A swap-in re-allocates all of the request's blocks: its ThinkActive
    // count is what it just got, not an addition.
    if (r.phase == Phase::kThinkDecode) {
      r.think_blocks = w.kind == WorkKind::kSwapIn ? w.new_think_blocks : r.think_blocks + w.new_think_blocks;
    }
    r.computed += w.tokens;
    SlotCold& c = table.cold(s);
    if (w.kind != WorkKind::kPrefill) {
      if (w.kind == WorkKind::kSwapIn) resumed(c, end_ns);
      decoded(s, end_ns);
      if (running(r)) running_context += w.tokens;
      return;
    }
    if (r.computed < c.target) return;
    resumed(c, end_ns);
    ++r.generated;  // the chunk that completes prefill samples a token
    c.last_token_ns = end_ns;
    if (c.first_token_ns == 0) c.first_token_ns = end_ns;
    r.deadline_ns = r.phase == Phase::kThinkDecode ? think_deadline(r, c) : answer_deadline(r, c, end_ns);
    guard_readmission(s);
    running_context += r.computed;
    table.push_back(r.phase == Phase::kOutputDecode ? Queue::kOutputQueue : Queue::kThinkQueue, s);
  }

  // A running request produced a token at `end_ns`.
  void decoded(std::uint32_t s, std::int64_t end_ns) {
    Slot& r = table.at(s);
    SlotCold& c = table.cold(s);
    ++r.generated;
    c.last_token_ns = end_ns;
    r.deadline_ns = r.phase == Phase::kThinkDecode ? think_deadline(r, c) : answer_deadline(r, c, end_ns);
  }
};

}  // namespace meridian
