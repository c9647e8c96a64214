// DualQueueScheduler's public methods; the step algorithm itself is in
// scheduler/scheduler_impl.h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "meridian/scheduler.h"
#include "scheduler/scheduler_impl.h"

namespace meridian {

LogRateLimiter& sched_detail::warn_limiter(WarnKind kind) noexcept {
  constexpr std::chrono::seconds kInterval{10};
  static std::array<LogRateLimiter, 4> limiters{LogRateLimiter(kInterval), LogRateLimiter(kInterval),
                                                LogRateLimiter(kInterval), LogRateLimiter(kInterval)};
  return limiters.at(static_cast<std::size_t>(kind));
}

SchedulerOptions SchedulerOptions::from_config(const MeridianConfig& config, std::uint64_t total_kv_blocks) {
  validate_or_throw(config.scheduler);
  validate_or_throw(config.kv_memory);
  SchedulerOptions o;
  const SchedulerConfig& s = config.scheduler;
  o.think_tpot_budget_ms = s.think_tpot_budget_ms;
  o.output_tpot_budget_ms = s.output_tpot_budget_ms;
  o.ttft_slo_ms = s.ttft_slo_ms;
  o.ttfv_slo_ms = s.ttfv_slo_ms;
  o.ttft_triage = s.ttft_triage;
  o.think_batch_multiplier = s.think_batch_multiplier;
  o.min_prefill_tokens_per_step = s.min_prefill_tokens_per_step;
  o.preemption_enabled = s.preemption_enabled;
  o.preempt_max_fraction = s.preempt_max_fraction;
  o.preempt_readmit_guard_steps = s.preempt_readmit_guard_steps;
  o.fabric_offload = config.disagg.enabled && config.disagg.fabric != FabricKind::kNone;
  o.block_tokens = config.kv_memory.block_tokens;
  o.total_kv_blocks = total_kv_blocks;
  return o;
}

namespace {

void check_options(const SchedulerOptions& o) {
  auto fail = [](std::string_view field, const std::string& rule, double got) {
    throw InvalidArgument(fmt::format("{} must be {}; got {}", field, rule, got));
  };
  // Finite too: an infinite budget or multiplier turns into an undefined
  // float -> integer conversion when batch sizes are derived from it.
  const auto finite_above = [](double v, double low, bool inclusive) {
    return std::isfinite(v) && (inclusive ? v >= low : v > low);
  };
  if (!finite_above(o.think_tpot_budget_ms, 0, false)) {
    fail("scheduler.think_tpot_budget_ms", "finite and > 0", o.think_tpot_budget_ms);
  }
  if (!finite_above(o.output_tpot_budget_ms, 0, false)) {
    fail("scheduler.output_tpot_budget_ms", "finite and > 0", o.output_tpot_budget_ms);
  }
  if (!finite_above(o.ttft_slo_ms, 0, false)) {
    fail("scheduler.ttft_slo_ms", "finite and > 0", o.ttft_slo_ms);
  }
  if (!finite_above(o.ttfv_slo_ms, 0, true)) {
    fail("scheduler.ttfv_slo_ms", "finite and >= 0", o.ttfv_slo_ms);
  }
  if (!finite_above(o.think_batch_multiplier, 1, true)) {
    fail("scheduler.think_batch_multiplier", "finite and >= 1", o.think_batch_multiplier);
  }
  if (!(o.preempt_max_fraction > 0 && o.preempt_max_fraction <= 1)) {
    fail("scheduler.preempt_max_fraction", "in (0, 1]", o.preempt_max_fraction);
  }
  if (o.block_tokens == 0) fail("kv_memory.block_tokens", ">= 1", 0);
  if (o.total_kv_blocks == 0) fail("total_kv_blocks", ">= 1", 0);
}

}  // namespace

DualQueueScheduler::DualQueueScheduler(const SchedulerOptions& options, StepCostModel cost_model) {
  check_options(options);
  impl_ = std::make_unique<Impl>(options, cost_model);
}

DualQueueScheduler::~DualQueueScheduler() = default;
DualQueueScheduler::DualQueueScheduler(DualQueueScheduler&&) noexcept = default;
DualQueueScheduler& DualQueueScheduler::operator=(DualQueueScheduler&&) noexcept = default;

void DualQueueScheduler::add(const NewRequest& request) {
  Impl& m = *impl_;
  if (m.table.find(request.id) != kNil) {
    throw InvalidArgument(fmt::format("request {} is already scheduled", request.id));
  }
  if (request.prompt_tokens == 0) {
    throw InvalidArgument(fmt::format("request {}: prompt_tokens must be >= 1", request.id));
  }
  if (request.cached_prompt_tokens > request.prompt_tokens) {
    throw InvalidArgument(fmt::format("request {}: cached_prompt_tokens {} exceeds prompt_tokens {}",
                                      request.id, request.cached_prompt_tokens, request.prompt_tokens));
  }
  if (request.computed_prompt_tokens > request.prompt_tokens) {
    throw InvalidArgument(fmt::format("request {}: computed_prompt_tokens {} exceeds prompt_tokens {}",
                                      request.id, request.computed_prompt_tokens, request.prompt_tokens));
  }
  if (request.phase == Phase::kComplete) {
    throw InvalidArgument(fmt::format("request {}: cannot add a completed request", request.id));
  }
  if (request.generated_tokens > 0 && request.first_token_ns <= 0) {
    throw InvalidArgument(fmt::format("request {}: generated_tokens {} needs first_token_ns > 0 (got {})",
                                      request.id, request.generated_tokens, request.first_token_ns));
  }
  if (request.victim_wait_ns < 0) {
    throw InvalidArgument(
        fmt::format("request {}: victim_wait_ns must be >= 0 (got {})", request.id, request.victim_wait_ns));
  }
  const std::uint64_t need = std::uint64_t{m.blocks_for(request.prompt_tokens)} + 1;
  if (need > m.opt.total_kv_blocks) {
    throw InvalidArgument(fmt::format("request {}: a {}-token prompt needs {} KV blocks; the capacity is {}",
                                      request.id, request.prompt_tokens, need, m.opt.total_kv_blocks));
  }
  const std::uint32_t s = m.table.create(request.id);
  Slot& r = m.table.at(s);
  r.phase = request.phase == Phase::kOutputDecode ? Phase::kOutputDecode : Phase::kThinkDecode;
  r.prompt = request.prompt_tokens;
  SlotCold& c = m.table.cold(s);
  c.target = request.prompt_tokens;
  // At least one prompt token is always computed: it produces the first logits.
  const std::uint32_t cached = std::min(request.cached_prompt_tokens, request.prompt_tokens - 1);
  r.computed = std::max(cached, std::min(request.computed_prompt_tokens, request.prompt_tokens - 1));
  c.shared_blocks = cached / m.opt.block_tokens;  // only the cache's blocks are shared
  c.arrival_ns = request.arrival_ns;
  c.last_token_ns = request.arrival_ns;
  c.preemptions = request.preemptions;
  r.generated = request.generated_tokens;
  if (request.generated_tokens > 0) {
    c.first_token_ns = request.first_token_ns;
    c.last_token_ns = std::max(c.last_token_ns, request.first_token_ns);
  }
  if (request.victim_wait_ns > 0) m.note_victim_wait(request.victim_wait_ns);
  m.table.push_back(Queue::kWaitQueue, s);
}

bool DualQueueScheduler::set_phase(RequestId id, Phase phase, std::uint32_t answer_decodes_in_flight) {
  Impl& m = *impl_;
  if (phase == Phase::kComplete) return finish(id);
  const std::uint32_t s = m.table.find(id);
  if (s == kNil) return false;
  Slot& r = m.table.at(s);
  // Phases only move forward; the only transition the scheduler acts on is ExitThink.
  if (phase != Phase::kOutputDecode || r.phase == Phase::kOutputDecode) return true;
  r.phase = Phase::kOutputDecode;
  r.think_blocks = 0;  // demoted to ThinkComplete
  // Its answer deadlines count from its first answer token: still to come,
  // or the decode in flight, timed when it was reported (ADR-0032).
  SlotCold& c = m.table.cold(s);
  const std::uint32_t in_flight = std::min({answer_decodes_in_flight, r.generated, 1U});
  c.answer_base = r.generated - in_flight;
  r.deadline_ns =
      in_flight > 0 ? m.answer_deadline(r, c, c.last_token_ns) : std::numeric_limits<std::int64_t>::max();
  // Served first on the very next step, ahead of answers already streaming.
  if (r.queue == Queue::kThinkQueue) m.table.push_front(Queue::kOutputQueue, s);
  return true;
}

bool DualQueueScheduler::finish(RequestId id) {
  Impl& m = *impl_;
  const std::uint32_t s = m.table.find(id);
  if (s == kNil) return false;
  m.drop(s);
  return true;
}

void DualQueueScheduler::set_prefix_lookup(PrefixLookup lookup) { impl_->prefix_lookup = std::move(lookup); }

const StepPlan& DualQueueScheduler::schedule(const StepLimits& limits, std::int64_t now_ns) {
  return impl_->schedule(limits, now_ns);
}

void DualQueueScheduler::complete_step(double observed_ms, std::int64_t end_ns,
                                       std::span<const RequestId> not_run) {
  impl_->complete(observed_ms, end_ns, not_run);
}

std::optional<RequestView> DualQueueScheduler::view(RequestId id) const {
  const std::uint32_t s = impl_->table.find(id);
  if (s == kNil) return std::nullopt;
  const Slot& r = impl_->table.at(s);
  RequestView v;
  v.id = r.id;
  v.phase = r.phase;
  v.state = impl_->running(r)              ? RequestView::State::kRunning
            : r.queue == Queue::kSwapQueue ? RequestView::State::kSwapped
                                           : RequestView::State::kWaiting;
  v.prompt_tokens = r.prompt;
  v.generated_tokens = r.generated;
  v.context_tokens = r.computed;
  v.preemptions = impl_->table.cold(s).preemptions;
  v.last_token_ns = impl_->table.cold(s).last_token_ns;
  return v;
}

std::size_t DualQueueScheduler::size() const noexcept { return impl_->table.size(); }
const SchedulerCounters& DualQueueScheduler::counters() const noexcept { return impl_->counters; }
double DualQueueScheduler::victim_wait_ms() const noexcept { return impl_->victim_wait_ns * Impl::kNsToMs; }
const StepCostModel& DualQueueScheduler::cost_model() const noexcept { return impl_->model; }
const SchedulerOptions& DualQueueScheduler::options() const noexcept { return impl_->opt; }

std::string_view to_string(WorkKind kind) noexcept {
  switch (kind) {
    case WorkKind::kDecode: return "decode";
    case WorkKind::kPrefill: return "prefill";
    case WorkKind::kSwapIn: return "swap_in";
  }
  return "unknown";
}

std::string_view to_string(ReclaimMode mode) noexcept {
  switch (mode) {
    case ReclaimMode::kRecompute: return "recompute";
    case ReclaimMode::kSwap: return "swap";
    case ReclaimMode::kOffload: return "offload";
  }
  return "unknown";
}

}  // namespace meridian
