// DualQueueScheduler::Impl's prefill lanes (ADR-0015) and TTFT triage (ADR-0028) (scheduler_impl.h declares
// them; the step in schedule() calls them). Split from scheduler_impl.h to keep each file one concern.
//
// Thread-safety: none (owned by one DualQueueScheduler).
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "scheduler/scheduler_impl.h"

namespace meridian {

// Largest chunk <= want whose blocks fit in the free blocks.
std::uint32_t DualQueueScheduler::Impl::fit_chunk(const Slot& r, std::uint32_t want) const {
  const std::uint64_t c = r.computed;
  const std::uint64_t bt = opt.block_tokens;
  // With `allowed` blocks beyond block `first`, tokens up to (first + allowed) * bt fit.
  // Both products stay below 2^34 once `allowed` is capped at what `want` could use.
  auto limit = [&](std::uint64_t first, std::uint64_t allowed) {
    if (allowed > want / bt + 1) return std::uint64_t{want};
    const std::uint64_t end = (first + allowed) * bt;
    return end > c ? end - c : 0;
  };
  const std::uint64_t cap = limit(blocks_for(c), free_blocks);
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(want, cap));
}

bool DualQueueScheduler::Impl::admission_held(const Slot& r, std::uint32_t chunk) const {
  if (table.cold(r).admitted || idle_engine) return false;
  return free_blocks < std::uint64_t{new_blocks(r.computed, chunk)} + watermark(lane_of(r));
}

// Schedules prefill from one queue's lane(s) within `budget`; returns what
// is left. `deferred`: only the prompts TTFT triage deferred this step,
// else only the others.
std::uint32_t DualQueueScheduler::Impl::prefill_lanes(std::uint8_t q, std::uint32_t budget,
                                                      std::array<bool, kLaneCount>& blocked, bool deferred) {
  // Once every lane this queue feeds is blocked nothing more can start, so
  // the walk stops: a long waiting queue costs nothing per step.
  const auto all_blocked = [&] {
    return q == Queue::kResumeQueue ? blocked[kResumeLane] : blocked[kChatLane] && blocked[kReasoningLane];
  };
  for (std::uint32_t s = table.front(q); s != kNil && budget > 0 && seqs_left > 0 && !all_blocked();
       s = table.at(s).next) {
    Slot& r = table.at(s);
    const Lane lane = lane_of(r);
    if (blocked[lane]) continue;
    if (in_batch(r) || r.stalled_step == step) continue;  // planned, or found never-fitting
    SlotCold& c = table.cold(s);
    if ((c.deferred_step == step) != deferred) continue;
    // Its prompt (and, for a victim, what it generated) plus the token it
    // samples can never fit even alone: waiting would hold blocks forever.
    if (never_fits_prefill(r)) {
      r.stalled_step = step;
      to_abort.push_back(s);
      continue;
    }
    std::uint32_t remaining = c.target - r.computed;
    // A victim that had its first token takes only the room (ADR-0037).
    const bool had_token = q == Queue::kResumeQueue && r.generated > 0;
    const std::uint32_t may_take = had_token ? std::min(budget, victim_room) : budget;
    std::uint32_t want = std::min(remaining, may_take);
    std::uint32_t chunk = fit_chunk(r, want);
    if (chunk > 0 && admission_held(r, chunk)) chunk = 0;
    // A new prompt about to miss its TTFT may take the KV its chunk needs
    // from thinking that can wait; it is then not held by a watermark
    // (ADR-0027).
    if (chunk < want && ttft_at_risk(r, c) && pause_thinking_for(new_blocks(r.computed, want))) {
      chunk = fit_chunk(r, want);
    }
    // Admitted (as if nothing were cached): now attach what the prefix
    // cache holds, so only the rest is computed.
    if (chunk > 0 && !c.admitted && r.computed == 0 && prefix_lookup) {
      const std::uint64_t taken = attach_cached(r);
      remaining = c.target - r.computed;
      want = std::min(remaining, may_take);
      chunk = fit_chunk(r, want);
      // Its prefix fits, the rest does not: undo the lookup, so that a waiting request
      // holds no KV (a waiting holder is never a victim: the pool would deadlock).
      if (chunk == 0 && r.computed > 0) detach_cached(r, taken);
    }
    // Victims wait for blocks that finishing requests free; they never
    // preempt to get back in (that is how preemption storms start). With
    // nothing running, release_partial_prefills() ensures progress.
    if (chunk == 0) {  // FCFS within the lane: nobody in it overtakes
      r.stalled_step = step;
      blocked[lane] = true;
      continue;
    }
    emit(s, WorkKind::kPrefill, chunk, new_blocks(r.computed, chunk), new_think_blocks(r, r.computed, chunk),
         false, chunk == remaining);
    c.admitted = true;
    if (had_token) victim_room -= chunk;
    ++plan.stats.prefill_requests;
    plan.stats.prefill_tokens += chunk;
    budget -= chunk;
    if (chunk < remaining) blocked[lane] = true;  // a partial chunk ends its lane's turn
  }
  return budget;
}

bool DualQueueScheduler::Impl::never_fits_prefill(const Slot& r) const {
  return std::uint64_t{blocks_for(std::uint64_t{table.cold(r).target} + 1)} > opt.total_kv_blocks;
}

// At admission, like vLLM: a new request finds its prompt prefix, and a
// recompute victim its own blocks that are still cached; only the rest is
// computed. Nothing is attached while a request waits, so waiting holds no
// KV. The attached blocks leave the evictable cache: they no longer count
// as free.
// Returns the free blocks it counted as taken.
std::uint64_t DualQueueScheduler::Impl::attach_cached(Slot& r) {
  const std::uint32_t target = table.cold(r).target;
  const std::uint32_t cached = std::min(prefix_lookup(r.id, target), target - 1);
  const std::uint32_t blocks = cached / opt.block_tokens;
  r.computed = blocks * opt.block_tokens;
  table.cold(r).shared_blocks = blocks;
  const std::uint64_t taken = std::min<std::uint64_t>(free_blocks, blocks);
  free_blocks -= taken;
  counters.admission_cached_tokens += r.computed;
  return taken;
}

// Undoes attach_cached() for a request that is not admitted after all: the engine gives
// the attached blocks back to the cache (StepPlan::unattached).
void DualQueueScheduler::Impl::detach_cached(Slot& r, std::uint64_t taken) {
  free_blocks += taken;
  counters.admission_cached_tokens -= r.computed;
  r.computed = 0;
  table.cold(r).shared_blocks = 0;
  plan.unattached.push_back(r.id);
}

// Returns the part of the prefill budget no lane used. The floor
// (min_prefill_tokens_per_step) is for prompts before their first token
// (TTFT): a recompute victim that had its first token takes only the room
// the ceiling leaves (victim_room, ADR-0037), not the floor.
std::uint32_t DualQueueScheduler::Impl::prefill(double ceiling_ms) {
  const StepCostCoefficients k = model.coefficients();
  const double per_token_ms = k.per_token_ms + k.per_kv_token_us * 1e-3;
  const double room_ms = ceiling_ms - model.predict_ms(tok, kv);
  const double room = per_token_ms > 0 ? std::floor(std::max(room_ms, 0.0) / per_token_ms) : 1e18;
  const double fit = std::max(room, static_cast<double>(opt.min_prefill_tokens_per_step));
  std::uint32_t budget = static_cast<std::uint32_t>(std::min(fit, static_cast<double>(tokens_left)));
  victim_room = static_cast<std::uint32_t>(std::min(room, static_cast<double>(budget)));
  plan.stats.prefill_budget_tokens = budget;
  // Recompute victims keep a share of the budget (within the room) so that
  // arrivals cannot starve them; arrivals get the rest first, then whatever
  // the victims leave.
  const bool resuming = table.depth(Queue::kResumeQueue) > 0;
  const std::uint32_t resume_share = resuming ? budget / 4 : 0;
  std::array<bool, kLaneCount> blocked{};
  triage_prompts();
  std::uint32_t left = prefill_lanes(Queue::kWaitQueue, budget - resume_share, blocked) + resume_share;
  left = prefill_lanes(Queue::kResumeQueue, left, blocked);
  if (left > 0) left = prefill_lanes(Queue::kWaitQueue, left, blocked);
  if (left > 0 && any_deferred) left = prefill_lanes(Queue::kWaitQueue, left, blocked, true);
  return left;
}

// TTFT triage (ADR-0028): marks the new prompts that can no longer meet
// their TTFT while others still can; prefill() serves them last.
void DualQueueScheduler::Impl::triage_prompts() {
  any_deferred = false;
  if (!opt.ttft_triage || table.depth(Queue::kWaitQueue) == 0) return;
  triage_queue.clear();
  triage_slots.clear();
  for (std::uint32_t s = table.front(Queue::kWaitQueue);
       s != kNil && triage_queue.size() < sched_detail::TtftTriage::kWindow; s = table.at(s).next) {
    const SlotCold& c = table.cold(s);
    if (c.preemptions > 0) continue;
    triage_queue.push_back({c.arrival_ns, c.target - table.at(s).computed, c.ever_deferred});
    triage_slots.push_back(s);
  }
  triage.run(triage_queue, triage_params(), [&](std::size_t i) {
    SlotCold& c = table.cold(triage_slots[i]);
    c.deferred_step = step;
    if (!c.ever_deferred) ++counters.ttft_deferred;
    c.ever_deferred = true;
    any_deferred = true;
  });
}

sched_detail::TtftTriageParams DualQueueScheduler::Impl::triage_params() const {
  return {model.coefficients().per_token_ms, opt.ttft_slo_ms, now_ns_};
}

// The engine's own prefills (StepLimits::engine_prefill_tokens) take what
// the lanes left of the prefill budget: costed in this step, so optional
// think decode fits around them. Its victims that had a first token
// (StepLimits::engine_resume_tokens) take only the room, as the resume lane
// does (ADR-0037). The engine (vLLM) serves its victims before new prompts,
// so the budget it gets can hold them to the room only when no new prompt of
// its own shares the step: then it gets nothing past their room.
void DualQueueScheduler::Impl::reserve_engine_prefill(const StepLimits& limits, std::uint32_t budget_left) {
  const std::uint32_t wanted = limits.engine_prefill_tokens;
  const std::uint32_t resume_wanted = std::min(limits.engine_resume_tokens, wanted);
  const std::uint32_t arrivals = std::min({wanted - resume_wanted, budget_left, tokens_left});
  const std::uint32_t after_arrivals = std::min(budget_left - arrivals, tokens_left - arrivals);
  const std::uint32_t resume = std::min({resume_wanted, after_arrivals, victim_room});
  if (wanted == resume_wanted && resume < resume_wanted) {
    plan.stats.prefill_budget_tokens -= budget_left - resume;
  }
  const std::uint32_t tokens = arrivals + resume;
  if (tokens == 0) return;
  tokens_left -= tokens;
  tok += tokens;
  kv += tokens;  // at least the chunk itself: the context before it is unknown here
  plan.stats.engine_prefill_tokens = tokens;
}

}  // namespace meridian
