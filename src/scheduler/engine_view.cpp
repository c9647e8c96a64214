// DualQueueScheduler::engine_view(): the plan in the form an engine adapter
// carries out with the engine's own machinery (ADR-0017): which running think
// requests sit this step out, and the order of the running list, whose tail
// is where the engine takes preemption victims.
#include <algorithm>

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
  // Think requests: most progress first; among equals the older first, so the
  // tail is the shortest context, then the newest (preempt_for's order).
  thread_local std::vector<std::uint32_t> think;
  think.clear();
  for (std::uint32_t s = m.table.front(Queue::kThinkQueue); s != kNil; s = m.table.at(s).next) {
    think.push_back(s);
    if (!m.in_batch(m.table.at(s))) out.unplanned_think.push_back(m.table.at(s).id);
  }
  std::sort(think.begin(), think.end(), [&](std::uint32_t a, std::uint32_t b) {
    const Slot& x = m.table.at(a);
    const Slot& y = m.table.at(b);
    return x.computed != y.computed ? x.computed > y.computed : m.table.older(a, b);
  });
  out.running_order.resize(answers + think.size());
  std::transform(think.begin(), think.end(), out.running_order.begin() + static_cast<std::ptrdiff_t>(answers),
                 [&](std::uint32_t s) { return m.table.at(s).id; });
}

const StepPlan& DualQueueScheduler::last_plan() const noexcept { return impl_->plan; }

}  // namespace meridian
