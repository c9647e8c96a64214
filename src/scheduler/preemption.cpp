// DualQueueScheduler::Impl's preemption (ADR-0008), admission by pausing thinking (ADR-0027) and the
// livelock release of partial prefills (scheduler_impl.h declares them; the
// step in schedule() calls them). Split from scheduler_impl.h to keep each
// file one concern.
//
// Thread-safety: none (owned by one DualQueueScheduler).
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "scheduler/scheduler_impl.h"

namespace meridian {

// The order partial prefills are released in: the least progress lost first
// (the shortest context), then the newest, as vLLM takes its newest request.
void DualQueueScheduler::Impl::sort_least_progress_first(std::vector<std::uint32_t>& slots) const {
  std::sort(slots.begin(), slots.end(), [&](std::uint32_t a, std::uint32_t b) {
    const Slot& x = table.at(a);
    const Slot& y = table.at(b);
    return x.computed != y.computed ? x.computed < y.computed : table.older(b, a);
  });
}

// Victim order among think requests (ADR-0036, victim_before()): the most
// slack first, the request whose first deadline a wait would cost is furthest
// away; it has banked the most time to absorb the wait, and it usually holds
// the longest context, so fewer victims cover a shortfall.
void DualQueueScheduler::Impl::sort_most_slack_first(std::vector<std::uint32_t>& slots) {
  victim_keys.clear();
  for (std::uint32_t s : slots) victim_keys.push_back(victim_key(s));
  std::sort(victim_keys.begin(), victim_keys.end(),
            [&](const VictimKey& a, const VictimKey& b) { return victim_before(a, b); });
  std::transform(victim_keys.begin(), victim_keys.end(), slots.begin(),
                 [](const VictimKey& k) { return k.slot; });
}

// Anti-livelock: within a tier only younger requests are victims, so the
// oldest request of a tier can always make progress. Answer-phase
// requesters may take think-phase victims of any age.
// The re-admission guard protects a victim from requesters of its own phase
// only: an answer-phase request never waits while a think victim exists.
// A partial prefill (waiting, holding blocks, producing nothing) is a
// victim for a running requester of any age: otherwise an older partial
// prefill and a younger running request could each wait for the other.
bool DualQueueScheduler::Impl::candidate(std::uint32_t s, std::uint32_t requester) const {
  const Slot& r = table.at(s);
  if (in_batch(r) || r.computed == 0 || s == requester) return false;
  const Slot& q = table.at(requester);
  if (!running(r) && running(q)) return true;
  const bool same_tier = r.phase == q.phase;
  if (same_tier && step < table.cold(r).guard_until_step) return false;
  return !same_tier || table.older(requester, s);
}

// Picks victims in the order below, within the per-step cap, until `need`
// blocks are free. Preempts nobody unless the whole shortfall can be
// covered. Answer-phase victims only for an answer-phase requester.
bool DualQueueScheduler::Impl::preempt_for(std::uint32_t requester, std::uint64_t need, bool answer_victims) {
  if (!opt.preemption_enabled || victims_left == 0) return false;
  std::uint64_t got = free_blocks;
  chosen.clear();
  auto satisfied = [&] { return got >= need; };
  // `phase`: only victims in that phase (kComplete: any).
  auto scan = [&](std::uint8_t q, Phase phase) {
    for (std::uint32_t s = table.front(q); s != kNil && !satisfied() && chosen.size() < victims_left;
         s = table.at(s).next) {
      const Slot& r = table.at(s);
      if (phase != Phase::kComplete && r.phase != phase) continue;
      if (!candidate(s, requester)) continue;
      // A victim that frees nothing would only waste the cap.
      if (held_blocks(r) == 0) continue;
      chosen.push_back(s);
      got += held_blocks(r);
    }
  };
  // Think-phase work first, answer-phase last (ADR-0015): reasoning partial
  // prefills (they are not a prefix of their queue under prefill lanes),
  // then running think requests, the most slack first (ADR-0036); only then
  // answer-phase partial prefills (a chat prompt not yet streaming), and
  // streaming answers only for an answer-phase requester.
  scan(Queue::kResumeQueue, Phase::kThinkDecode);
  scan(Queue::kWaitQueue, Phase::kThinkDecode);
  think_victims.clear();
  bool think_holders = false;  // running think requests holding KV that this requester may not take
  for (std::uint32_t s = table.front(Queue::kThinkQueue); s != kNil; s = table.at(s).next) {
    const Slot& r = table.at(s);
    if (s == requester || in_batch(r) || held_blocks(r) == 0) continue;
    if (candidate(s, requester)) {
      think_victims.push_back(s);
    } else {
      think_holders = true;
    }
  }
  sort_most_slack_first(think_victims);
  for (std::uint32_t s : think_victims) {
    if (satisfied() || chosen.size() >= victims_left) break;
    chosen.push_back(s);
    got += held_blocks(table.at(s));
  }
  // A think requester takes an answer-phase partial prefill only when no
  // think request holds KV at all (the older ones it may not take will
  // progress first); without that last resort a lone think request and a
  // stuck chat prefill could wait for each other.
  const bool think_requester = table.at(requester).phase == Phase::kThinkDecode;
  if (!(think_requester && think_holders)) {
    scan(Queue::kResumeQueue, Phase::kOutputDecode);
    scan(Queue::kWaitQueue, Phase::kOutputDecode);
  }
  if (answer_victims) scan(Queue::kOutputQueue, Phase::kComplete);
  if (!satisfied()) return false;
  for (std::uint32_t s : chosen) preempt(s);
  return true;
}

// Chooses (into `chosen`) think requests that can pause, the most slack
// first (ADR-0036), at most `cap`, until `free` + what they hold covers `need`;
// chooses nobody unless the whole need is covered. Never an answer-phase
// request. `skip_planned`: requests in this step's plan are not candidates.
bool DualQueueScheduler::Impl::choose_paused(std::uint64_t need, std::uint64_t free, std::size_t cap,
                                             bool skip_planned) {
  chosen.clear();
  if (free >= need) return true;
  if (cap == 0) return false;
  std::uint64_t got = free;
  think_victims.clear();
  for (std::uint32_t s = table.front(Queue::kThinkQueue); s != kNil; s = table.at(s).next) {
    const Slot& r = table.at(s);
    if (!(skip_planned && in_batch(r)) && can_pause(r, table.cold(s))) think_victims.push_back(s);
  }
  sort_most_slack_first(think_victims);
  for (std::uint32_t s : think_victims) {
    if (got >= need || chosen.size() >= cap) break;
    chosen.push_back(s);
    got += held_blocks(table.at(s));
  }
  if (got >= need) return true;
  chosen.clear();
  return false;
}

// Preempts (recompute) what choose_paused() picks for `need` blocks.
bool DualQueueScheduler::Impl::pause_thinking_for(std::uint64_t need) {
  if (!choose_paused(need, free_blocks, victims_left, true)) return false;
  for (std::uint32_t s : chosen) preempt(s);
  counters.admission_preemptions += chosen.size();
  return true;
}

void DualQueueScheduler::Impl::preempt(std::uint32_t s) {
  Slot& r = table.at(s);
  const bool was_running = running(r);
  const bool keeps_kv = was_running && (opt.fabric_offload || r.phase == Phase::kOutputDecode);
  const ReclaimMode mode = opt.fabric_offload && was_running ? ReclaimMode::kOffload
                           : keeps_kv                        ? ReclaimMode::kSwap
                                                             : ReclaimMode::kRecompute;
  const std::uint32_t held = held_blocks(r);
  free_blocks += held;
  if (was_running) running_context -= r.computed;
  SlotCold& c = table.cold(s);
  ++c.preemptions;
  c.preempted_ns = now_ns_;
  plan.preemptions.push_back({r.id, r.phase, mode, held, c.preemptions});
  ++counters.preemptions[static_cast<std::size_t>(mode)];
  ++(r.phase == Phase::kOutputDecode ? counters.preempted_output : counters.preempted_think);
  ++counters.preemptions_by_phase[r.phase == Phase::kOutputDecode ? 0 : 1][static_cast<std::size_t>(mode)];
  --victims_left;
  pressure = true;
  c.admitted = false;
  if (keeps_kv) {
    c.shared_blocks = 0;  // released; the swap-in allocates every block anew
    table.push_back(Queue::kSwapQueue, s);
    return;
  }
  c.target = r.prompt + r.generated;
  r.computed = 0;
  c.shared_blocks = 0;
  r.think_blocks = 0;
  // The latest victim resumes first, as in vLLM, whose waiting queue takes
  // each victim back at its front (ADR-0035): it has lost the least time.
  table.push_front(Queue::kResumeQueue, s);
}

// Progress guarantee when nothing runs and no prefill could move: partial
// prefills then hold the blocks each other needs (victims never preempt to
// get back in), and no finishing request will free any. The partial prefill
// furthest along keeps its blocks; the others are released as recompute
// victims, least progress first, until its whole remaining prompt fits, and
// its chunk runs. Each time this happens the furthest progress grows, so some
// prefill completes.
void DualQueueScheduler::Impl::release_partial_prefills() {
  std::uint32_t keeper = kNil;
  chosen.clear();
  for (std::uint8_t q : {std::uint8_t{Queue::kWaitQueue}, std::uint8_t{Queue::kResumeQueue}}) {
    for (std::uint32_t s = table.front(q); s != kNil; s = table.at(s).next) {
      const Slot& r = table.at(s);
      if (!table.cold(s).admitted || (r.stalled_step == step && never_fits_prefill(r))) continue;
      chosen.push_back(s);
      if (keeper == kNil || r.computed > table.at(keeper).computed ||
          (r.computed == table.at(keeper).computed && table.older(s, keeper))) {
        keeper = s;
      }
    }
  }
  if (keeper == kNil) return;
  sort_least_progress_first(chosen);
  const Slot& k = table.at(keeper);
  const std::uint32_t remaining = table.cold(keeper).target - k.computed;
  const std::uint64_t need = new_blocks(k.computed, remaining);
  const std::uint32_t cap = victims_left;  // these releases are outside the per-step cap
  for (std::uint32_t s : chosen) {
    if (free_blocks >= need) break;
    if (s == keeper || held_blocks(table.at(s)) == 0) continue;
    victims_left = 1;
    preempt(s);
    ++counters.livelock_releases;
    log_detail::logf_limited(sched_detail::warn_limiter(sched_detail::WarnKind::kLivelock), LogLevel::kWarn,
                             "scheduler: livelock release: request {} preempted so request {} can finish "
                             "its prefill ({} blocks free, {} needed)",
                             table.at(s).id, k.id, free_blocks, need);
  }
  victims_left = cap;
  const std::uint32_t budget = std::min(std::max(plan.stats.prefill_budget_tokens, 1U), tokens_left);
  const std::uint32_t chunk = seqs_left > 0 ? fit_chunk(k, std::min(remaining, budget)) : 0;
  if (chunk == 0) return;
  emit(keeper, WorkKind::kPrefill, chunk, new_blocks(k.computed, chunk),
       new_think_blocks(k, k.computed, chunk), false, chunk == remaining);
  ++plan.stats.prefill_requests;
  plan.stats.prefill_tokens += chunk;
}

}  // namespace meridian
