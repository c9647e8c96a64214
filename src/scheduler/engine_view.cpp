// DualQueueScheduler::engine_view(): the plan in the form an engine adapter
// carries out with the engine's own machinery (ADR-0017): which running think
// requests sit this step out, and the order of the running list, whose tail
// is where the engine takes preemption victims.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "meridian/scheduler.h"
#include "scheduler/scheduler_impl.h"

namespace meridian {

void DualQueueScheduler::engine_view(EngineView& out) const {
  const Impl& m = *impl_;
  out.unplanned_think.clear();
  out.running_order.clear();
  for (std::uint32_t s = m.table.front(Queue::kOutputQueue); s != kNil; s = m.table.at(s).next) {
    out.running_order.push_back(m.table.at(s).id);
  }
  const std::size_t answers = out.running_order.size();
  // Think requests in the reverse of the victim order (ADR-0036), so the
  // tail is the first victim preempt_for() would take. Each deadline is
  // computed once, not per comparison: this runs every step over the whole
  // running set.
  thread_local std::vector<Impl::VictimKey> think;
  think.clear();
  for (std::uint32_t s = m.table.front(Queue::kThinkQueue); s != kNil; s = m.table.at(s).next) {
    think.push_back(m.victim_key(s));
    if (!m.in_batch(m.table.at(s))) out.unplanned_think.push_back(m.table.at(s).id);
  }
  std::sort(think.begin(), think.end(),
            [&](const Impl::VictimKey& a, const Impl::VictimKey& b) { return m.victim_before(b, a); });
  out.running_order.resize(answers + think.size());
  std::transform(think.begin(), think.end(), out.running_order.begin() + static_cast<std::ptrdiff_t>(answers),
                 [&](const Impl::VictimKey& k) { return m.table.at(k.slot).id; });
}

std::vector<RequestId> DualQueueScheduler::admission_victims(std::int64_t arrival_ns,
                                                             std::uint64_t need_blocks,
                                                             std::uint64_t free_blocks, std::int64_t now_ns,
                                                             std::size_t max_victims) {
  Impl& m = *impl_;
  std::vector<RequestId> out;
  m.now_ns_ = now_ns;
  if (now_ns - arrival_ns < m.admit_after_ns) return out;
  const std::size_t cap = std::min(step_victim_share(), max_victims);
  if (!m.choose_paused(need_blocks, free_blocks, cap, false)) return out;
  out.reserve(m.chosen.size());
  for (std::uint32_t s : m.chosen) out.push_back(m.table.at(s).id);
  m.counters.admission_preemptions += out.size();
  return out;
}

std::size_t DualQueueScheduler::step_victim_share() const {
  const Impl& m = *impl_;
  return m.victim_cap(m.table.depth(Queue::kOutputQueue) + m.table.depth(Queue::kThinkQueue));
}

std::vector<std::size_t> DualQueueScheduler::ttft_deferrals(std::span<const WaitingPrompt> queue,
                                                            std::int64_t now_ns) {
  Impl& m = *impl_;
  std::vector<std::size_t> out;
  if (!m.opt.ttft_triage) return out;
  m.now_ns_ = now_ns;
  m.triage.run(queue, m.triage_params(), [&](std::size_t i) {
    out.push_back(i);
    if (!queue[i].deferred_before) ++m.counters.ttft_deferred;
  });
  std::sort(out.begin(), out.end());
  return out;
}

void DualQueueScheduler::complete_engine_step(std::int64_t end_ns, std::span<const RequestId> ran) {
  Impl& m = *impl_;
  if (!m.plan_pending) return;
  m.plan_pending = false;
  // One hash lookup per request that ran, then marks by slot (O(ran + plan);
  // sorting both lists was most of this call at 1,024 running):
  // kRan = ran, not (yet) matched to a plan item; kAdvanced = its plan item ran.
  enum : std::uint8_t { kUnmarked = 0, kRan = 1, kAdvanced = 2 };
  thread_local std::vector<std::uint8_t> mark;
  thread_local std::vector<std::uint32_t> ran_slots;
  ran_slots.clear();
  if (mark.size() < m.table.slot_count()) mark.resize(m.table.slot_count(), kUnmarked);
  for (const RequestId id : ran) {
    const std::uint32_t s = m.table.find(id);
    if (s == kNil || mark[s] != kUnmarked) continue;
    mark[s] = kRan;
    ran_slots.push_back(s);
  }
  for (std::size_t i = 0; i < m.plan.work.size(); ++i) {
    const std::uint32_t s = m.planned[i].slot;
    // A slot finished or reused since the plan holds another request now:
    // that one ran unplanned (below), the planned one is gone.
    if (mark[s] != kRan || m.table.at(s).generation != m.planned[i].generation) continue;
    mark[s] = kAdvanced;
    m.advance(i, end_ns);
  }
  // What ran beyond the plan: one decode each (vLLM ran it anyway, e.g. a
  // think request whose output was already in flight).
  for (const std::uint32_t s : ran_slots) {
    const bool unplanned = mark[s] == kRan;
    mark[s] = kUnmarked;
    if (!unplanned) continue;
    Slot& r = m.table.at(s);
    if (!m.running(r)) continue;
    r.computed += 1;
    m.running_context += 1;
    m.decoded(s, end_ns);
  }
}

void DualQueueScheduler::retime_tokens(std::int64_t from_ns, std::int64_t delta_ns) {
  Impl& m = *impl_;
  if (delta_ns == 0) return;
  auto move = [&](std::int64_t& t) {
    if (t < from_ns || t == 0) return false;
    t += delta_ns;
    return true;
  };
  for (std::uint8_t q = 0; q < Queue::kQueueCount; ++q) {
    for (std::uint32_t s = m.table.front(q); s != kNil; s = m.table.at(s).next) {
      SlotCold& c = m.table.cold(s);
      const bool last = move(c.last_token_ns);
      const bool first = move(c.first_token_ns);
      const bool answer = move(c.first_answer_ns);
      if (!(last || first || answer) || (q != Queue::kOutputQueue && q != Queue::kThinkQueue)) continue;
      Slot& r = m.table.at(s);
      if (r.phase == Phase::kThinkDecode) {
        r.deadline_ns = m.think_deadline(r, c);
      } else if (c.first_answer_ns != 0) {
        r.deadline_ns = m.answer_deadline(r, c, c.first_answer_ns);
      }
    }
  }
}

bool DualQueueScheduler::observe_step(std::uint64_t tokens, std::uint64_t kv_tokens, double observed_ms) {
  Impl& m = *impl_;
  const std::uint64_t rejected = m.counters.rejected_step_times;
  m.learn(tokens, kv_tokens, observed_ms, m.model.predict_ms(tokens, kv_tokens));
  return m.counters.rejected_step_times == rejected;
}

const StepPlan& DualQueueScheduler::last_plan() const noexcept { return impl_->plan; }

}  // namespace meridian
