// A model of vLLM v1's scheduler (vllm/v1/core/sched/scheduler.py), the
// baselines of the A/B replay:
//  * running requests first, in list order; each gets min(remaining, budget)
//    tokens (chunked prefill), a chunk cut to long_prefill_token_threshold
//    when that is set and more than one request is running or waiting;
//  * when a request's KV allocation fails, preempt by recompute: the tail of
//    the running list (fcfs) or the max (priority, arrival) request (priority),
//    freeing its blocks (hashed blocks stay cached) and putting it back at the
//    front of the waiting queue with nothing computed; stop if it was itself;
//  * then, only if nothing was preempted this step, admit waiting requests in
//    queue order (fcfs: FIFO, priority: (priority, arrival)) while the budget,
//    max_num_seqs and KV allow (with scheduler_reserve_full_isl, KV for the
//    whole sequence, not just the first chunk); a request that does not fit
//    blocks the queue;
//  * a request that has grown past the whole KV pool is aborted (vLLM caps a
//    request at max_model_len, which its KV must hold; without the cap it
//    would preempt itself and recompute forever).
// Nothing is phase-aware: one LRU tier for every block, no forcing.
//
// With PascalOptions::enabled the same scheduler ranks requests as PASCAL
// does (the key (queue, round, arrival)): the running list is walked in rank
// order each step, victims are taken from the bottom of the ranking, the
// waiting queue is ordered by rank, and the answer pacer leaves out an answer
// decode whose next token is not due before the step after next.
#include <algorithm>
#include <deque>
#include <set>
#include <tuple>
#include <vector>

#include "sim/policy.h"

namespace meridian::sim::detail {
namespace {

class VllmPolicy final : public SchedulingPolicy {
 public:
  VllmPolicy(const VllmPolicyOptions& options, KvPool& pool)
      : opt_(options), pool_(pool), total_blocks_(pool.kv().usage().total_blocks) {}

  void add(const NewRequest& request, std::int32_t priority) override {
    if (request.id >= reqs_.size()) reqs_.resize(request.id + 1);
    Req& r = reqs_[request.id];
    r = Req{};
    r.live = true;
    r.priority = priority;
    r.arrival_ns = request.arrival_ns;
    r.prompt = request.prompt_tokens;
    r.phase = request.phase;
    enqueue(request.id, false);
  }

  void set_phase(RequestId id, Phase phase, std::uint32_t /*answer_decodes_in_flight*/) override {
    Req& r = reqs_.at(id);
    // A ranked waiting entry is keyed by the phase: re-key it (the async engine
    // can report a token of a request it preempted since).
    const bool rekey = ranked() && r.live && !r.running && waiting_prio_.erase(key(id)) > 0;
    r.phase = phase;
    if (rekey) waiting_prio_.insert(key(id));
  }

  void finish(RequestId id) override {
    Req& r = reqs_.at(id);
    if (r.running) {
      running_.erase(std::find(running_.begin(), running_.end(), id));
    } else {
      dequeue(id);
    }
    r.live = false;
    r.running = false;
  }

  bool looks_up_prefix_at_arrival() const override { return false; }
  bool tiered_kv() const override { return false; }

  const EngineStep& plan(std::int64_t now_ns) override {
    step_.items.clear();
    step_.preempted.clear();
    step_.aborted.clear();
    std::uint32_t budget = opt_.max_num_batched_tokens;
    // vLLM lifts the cap when a single request is eligible: nobody to starve.
    chunk_cap_ = running_.size() + waiting_size() > 1 ? opt_.long_prefill_token_threshold : 0;
    if (opt_.pascal.enabled) {
      // Rank order, decodes before prefill chunks: the token budget goes to
      // every running decode first, as vLLM's chunked prefill does (the paper
      // leaves the in-step order open; this one keeps answers flowing).
      std::stable_sort(running_.begin(), running_.end(), [this](RequestId a, RequestId b) {
        return std::pair(prefilling(a), key(a)) < std::pair(prefilling(b), key(b));
      });
    }
    bool held_by_pacer = false;
    const bool preempted_any = schedule_running(now_ns, opt_.pascal.enabled, budget, held_by_pacer);
    if (!preempted_any) admit(budget);
    if (step_.items.empty() && held_by_pacer) {  // the GPU would idle: answers run ahead of the pace
      bool none = false;
      schedule_running(now_ns, false, budget, none);
    }
    step_.output_queue = 0;
    step_.think_queue = 0;
    for (RequestId id : running_) {
      (reqs_[id].phase == Phase::kOutputDecode ? step_.output_queue : step_.think_queue) += 1;
    }
    step_.waiting = static_cast<std::uint32_t>(waiting_size());
    return step_;
  }

  void complete(double ms, std::int64_t end_ns) override {
    last_step_ns_ = static_cast<std::int64_t>(ms * 1e6);
    for (const StepItem& w : step_.items) {
      Req& r = reqs_[w.id];
      r.computed += w.tokens;
      if (!w.samples_token) continue;
      ++r.generated;
      if (!opt_.pascal.enabled) continue;
      if (r.phase == Phase::kOutputDecode) {
        if (r.answer_tokens++ == 0) r.first_visible_ns = end_ns;
      } else {
        ++r.think_tokens;
      }
      if (++r.quantum_used >= opt_.pascal.quantum_tokens) {  // round-robin: to the back of its queue
        r.quantum_used = 0;
        ++r.round;
      }
    }
  }

 private:
  // vLLM's pass over the running list: each request gets its tokens, the
  // ranking's bottom preempted when KV runs out. `pace`: PASCAL's pacer may
  // leave answer decodes out (then `held_by_pacer`). Returns whether it preempted.
  bool schedule_running(std::int64_t now_ns, bool pace, std::uint32_t& budget, bool& held_by_pacer) {
    bool preempted_any = false;
    for (std::size_t i = 0; i < running_.size() && budget > 0;) {
      const RequestId id = running_[i];
      Req& r = reqs_[id];
      if (pace && paced(r, now_ns)) {  // keeps its KV; its next token is not due yet
        held_by_pacer = true;
        ++i;
        continue;
      }
      const std::uint32_t n = std::min(capped(r.tokens() - r.computed), budget);
      if (pool_.blocks_for(std::uint64_t{r.computed} + n) > total_blocks_) {
        abort(id, i);  // the engine releases its KV
        continue;
      }
      const std::uint32_t need = pool_.blocks_for(std::uint64_t{r.computed} + n) - pool_.held(id);
      bool scheduled = true;
      while (!pool_.allocate(id, BlockTier::kOutputCritical, need)) {
        const std::size_t victim = pick_victim();
        const RequestId vid = running_[victim];
        budget += unschedule(vid);
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(victim));
        if (victim < i) --i;
        preempt(vid);
        preempted_any = true;
        if (vid == id) {
          scheduled = false;
          break;
        }
      }
      if (!scheduled) break;
      // Only the last sampled token left to compute is a decode; anything more is (re)prefill.
      const WorkKind kind = r.computed + 1 < r.tokens() ? WorkKind::kPrefill : WorkKind::kDecode;
      step_.items.push_back({id, kind, n, r.computed, r.computed + n == r.tokens()});
      budget -= n;
      ++i;
    }
    return preempted_any;
  }

  struct Req {
    bool live = false;
    bool running = false;
    std::int32_t priority = 0;
    std::int64_t arrival_ns = 0;
    std::uint32_t prompt = 0;
    std::uint32_t generated = 0;
    std::uint32_t computed = 0;
    std::uint32_t preemptions = 0;
    bool admitted_once = false;
    Phase phase = Phase::kThinkDecode;
    // PASCAL only
    std::uint32_t think_tokens = 0;
    std::uint32_t answer_tokens = 0;
    std::int64_t first_visible_ns = -1;
    std::uint32_t round = 0;         // round-robin rounds completed
    std::uint32_t quantum_used = 0;  // tokens decoded in this round
    [[nodiscard]] std::uint32_t tokens() const { return prompt + generated; }
  };
  // (class, round, arrival, id): vLLM priority uses (priority, 0, arrival, id).
  using PrioKey = std::tuple<std::int64_t, std::int64_t, std::int64_t, RequestId>;

  [[nodiscard]] bool prefilling(RequestId id) const { return reqs_[id].computed + 1 < reqs_[id].tokens(); }
  [[nodiscard]] bool ranked() const { return opt_.priority || opt_.pascal.enabled; }
  [[nodiscard]] PrioKey key(RequestId id) const {
    const Req& r = reqs_[id];
    if (!opt_.pascal.enabled) return {r.priority, 0, r.arrival_ns, id};
    // The reasoning queue: prefill and thinking, up to the demotion limit.
    const bool answering =
        r.phase == Phase::kOutputDecode ||
        (r.phase == Phase::kThinkDecode && r.think_tokens >= opt_.pascal.demote_think_tokens);
    return {answering ? 1 : 0, r.round, r.arrival_ns, id};
  }
  // The pacer: an answer decode waits while its next token's time on the pace
  // (first answer token + k x pace) is later than the end of the next step.
  [[nodiscard]] bool paced(const Req& r, std::int64_t now_ns) const {
    if (!opt_.pascal.enabled || opt_.pascal.pace_ms <= 0 || r.phase != Phase::kOutputDecode ||
        r.first_visible_ns < 0) {
      return false;
    }
    if (r.computed + 1 < r.tokens()) return false;  // a re-prefill is not paced
    const auto due_ns = r.first_visible_ns + static_cast<std::int64_t>(static_cast<double>(r.answer_tokens) *
                                                                       opt_.pascal.pace_ms * 1e6);
    return due_ns > now_ns + 2 * last_step_ns_;
  }
  [[nodiscard]] std::size_t waiting_size() const {
    return ranked() ? waiting_prio_.size() : waiting_fifo_.size();
  }
  [[nodiscard]] std::uint32_t capped(std::uint32_t tokens) const {
    return chunk_cap_ > 0 && tokens > chunk_cap_ ? chunk_cap_ : tokens;
  }

  void enqueue(RequestId id, bool front) {
    if (ranked()) {
      waiting_prio_.insert(key(id));
    } else if (front) {
      waiting_fifo_.push_front(id);
    } else {
      waiting_fifo_.push_back(id);
    }
  }
  void dequeue(RequestId id) {
    if (ranked()) {
      waiting_prio_.erase(key(id));
    } else if (auto it = std::find(waiting_fifo_.begin(), waiting_fifo_.end(), id);
               it != waiting_fifo_.end()) {
      waiting_fifo_.erase(it);
    }
  }

  [[nodiscard]] std::size_t pick_victim() const {
    if (!ranked()) return running_.size() - 1;
    std::size_t best = 0;
    for (std::size_t k = 1; k < running_.size(); ++k) {
      if (key(running_[k]) > key(running_[best])) best = k;
    }
    return best;
  }

  // Drops `id`'s item from this step's plan if it was scheduled; returns its tokens.
  std::uint32_t unschedule(RequestId id) {
    for (auto it = step_.items.begin(); it != step_.items.end(); ++it) {
      if (it->id == id) {
        const std::uint32_t tokens = it->tokens;
        step_.items.erase(it);
        return tokens;
      }
    }
    return 0;
  }

  // Ends running_[index], which can never fit; the engine releases its KV.
  void abort(RequestId id, std::size_t index) {
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
    Req& r = reqs_[id];
    r.live = false;
    r.running = false;
    step_.aborted.push_back(id);
  }

  void preempt(RequestId id) {
    Req& r = reqs_[id];
    const std::uint32_t blocks = pool_.held(id);
    pool_.kv().release(id, ReleaseKind::kRecompute, r.phase == Phase::kOutputDecode);
    r.running = false;
    r.computed = 0;
    ++r.preemptions;
    step_.preempted.push_back({id, r.phase, ReclaimMode::kRecompute, blocks, r.preemptions});
    enqueue(id, true);
  }

  // PASCAL: reasoning preempts answering. A waiting request of the reasoning
  // queue that lacks `blocks` free blocks preempts running answer-queue
  // requests, lowest ranked first, if together they free enough (otherwise
  // nobody is preempted). Their scheduled tokens go back to `budget`.
  bool make_room_for(RequestId id, std::uint64_t blocks, std::uint32_t& budget) {
    if (!opt_.pascal.enabled || !opt_.pascal.admission_preempts || std::get<0>(key(id)) != 0) return false;
    std::vector<RequestId> answering;
    std::uint64_t reclaimable = 0;
    for (RequestId rid : running_) {
      if (std::get<0>(key(rid)) == 1) {
        answering.push_back(rid);
        reclaimable += pool_.held(rid);
      }
    }
    if (reclaimable < blocks) return false;
    const std::uint64_t needed_free = pool_.kv().usage().allocatable_blocks + blocks;
    std::sort(answering.begin(), answering.end(),
              [this](RequestId a, RequestId b) { return key(a) > key(b); });
    for (RequestId victim : answering) {
      if (pool_.kv().usage().allocatable_blocks >= needed_free) break;
      budget += unschedule(victim);
      running_.erase(std::find(running_.begin(), running_.end(), victim));
      preempt(victim);
    }
    return true;
  }

  void admit(std::uint32_t budget) {
    while (budget > 0 && running_.size() < opt_.max_num_seqs) {
      RequestId id = 0;
      if (ranked()) {
        if (waiting_prio_.empty()) return;
        id = std::get<3>(*waiting_prio_.begin());
      } else {
        if (waiting_fifo_.empty()) return;
        id = waiting_fifo_.front();
      }
      Req& r = reqs_[id];
      // As allocate_slots(): check first, touch nothing when it does not fit (a request that
      // keeps failing at the queue head must not keep its cached prefix fresh in the LRU).
      // Evictable hits count against the free blocks, as vLLM counts them.
      const KvPool::PrefixMatch hit = pool_.match_prefix(id, r.tokens());
      const std::uint32_t n = std::min(capped(r.tokens() - hit.tokens), budget);
      const std::uint64_t free = pool_.kv().usage().allocatable_blocks;
      const auto need_for = [&](std::uint64_t tokens) {
        return std::uint64_t{pool_.blocks_for(tokens)} - hit.blocks + hit.evictable;
      };
      const std::uint64_t need_blocks =
          std::max(opt_.reserve_full_isl ? need_for(r.tokens()) : 0, need_for(std::uint64_t{hit.tokens} + n));
      if (need_blocks > free && !make_room_for(id, need_blocks - free, budget)) {
        return;  // a request that does not fit blocks the queue
      }
      r.computed = pool_.attach_prefix(id, r.tokens(), !r.admitted_once);
      const std::uint32_t need = pool_.blocks_for(std::uint64_t{r.computed} + n) - pool_.held(id);
      if (!pool_.allocate(id, BlockTier::kOutputCritical, need)) {
        // Undo the lookup: the attached blocks go back to the cache.
        pool_.kv().release(id, ReleaseKind::kFinished);
        r.computed = 0;
        return;
      }
      r.admitted_once = true;
      if (ranked()) {
        waiting_prio_.erase(waiting_prio_.begin());
      } else {
        waiting_fifo_.pop_front();
      }
      r.running = true;
      running_.push_back(id);
      step_.items.push_back({id, WorkKind::kPrefill, n, r.computed, r.computed + n == r.tokens()});
      budget -= n;
    }
  }

  VllmPolicyOptions opt_;
  KvPool& pool_;
  std::uint64_t total_blocks_;
  std::vector<Req> reqs_;  // indexed by request id
  std::vector<RequestId> running_;
  std::deque<RequestId> waiting_fifo_;
  std::set<PrioKey> waiting_prio_;
  EngineStep step_;
  std::uint32_t chunk_cap_ = 0;  // this step's long_prefill_token_threshold (0: none)
  std::int64_t last_step_ns_ = 0;
};

}  // namespace

std::unique_ptr<SchedulingPolicy> make_vllm_policy(const VllmPolicyOptions& options, KvPool& pool) {
  return std::make_unique<VllmPolicy>(options, pool);
}

}  // namespace meridian::sim::detail
