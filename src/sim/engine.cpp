// The replay engine loop (replay.h): arrivals, one policy step, the step's
// simulated duration from the roofline, tokens through the real PhaseRouter,
// entropy signals through the real EntropyProbe, and every measurement.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <queue>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "meridian/entropy_probe.h"
#include "meridian/error.h"
#include "meridian/metrics.h"
#include "meridian/phase_router.h"
#include "meridian/replay.h"
#include "meridian/replay_timeline.h"
#include "meridian/sustainable_ruler.h"
#include "sim/block_hash.h"
#include "sim/disagg.h"
#include "sim/engine_setup.h"
#include "sim/metrics.h"
#include "sim/policy.h"

namespace meridian::sim {
namespace {

using detail::check_request;
using detail::EngineStep;
using detail::first_id;
using detail::KvPool;
using detail::router_limits;
using detail::StepItem;

constexpr TokenId kThinkTokenId = 1000;   // any ordinary vocabulary id
constexpr TokenId kAnswerTokenId = 2000;  // any ordinary vocabulary id
constexpr double kNsPerMs = 1e6;
constexpr double kNsPerS = 1e9;
// Consecutive steps with nothing runnable and no arrival to wait for.
constexpr std::uint32_t kMaxStalledSteps = 100000;

float ms_between(std::int64_t from_ns, std::int64_t to_ns) {
  return static_cast<float>(static_cast<double>(to_ns - from_ns) / kNsPerMs);
}

struct Live {
  const RequestSpec* spec = nullptr;
  RequestSignals signals;
  std::unique_ptr<EntropyProbe> probe;  // while thinking under forcing (a pointer: Live is per request)
  std::int64_t arrival_ns = -1;
  std::int64_t first_token_ns = -1;
  std::int64_t think_end_ns = -1;
  std::int64_t first_visible_ns = -1;
  std::int64_t last_token_ns = -1;
  std::uint32_t think_emitted = 0;
  std::uint32_t answer_emitted = 0;
  bool in_think = false;
  bool done = false;
  std::optional<ForceReason> forced;
  bool forced_before_answer = false;
  bool slo_missed = false;  // already counted in slo_misses_
  std::int64_t finish_ns = -1;
};

struct Arrival {
  std::int64_t at_ns;
  RequestId id;
  bool operator>(const Arrival& o) const { return at_ns != o.at_ns ? at_ns > o.at_ns : id > o.id; }
};

class Engine {
 public:
  Engine(const Workload& workload, const ReplayOptions& o)
      : w_(workload),
        o_(o),
        cost_(o.params.cost_model),
        signals_(o.params.signal_model, o.seed),
        model_(o.config.model(o.model)),
        think_start_(first_id(model_.think_start_token_ids, "think_start_token_ids", o.model)),
        think_end_(first_id(model_.think_end_token_ids, "think_end_token_ids", o.model)),
        eos_(first_id(model_.eos_token_ids, "eos_token_ids", o.model)),
        router_(model_, router_limits(o.policy, o)),
        block_tokens_(o.config.kv_memory.block_tokens),
        kv_(kv_options()),
        pool_(kv_, block_tokens_, BlockHashes(workload, block_tokens_)),
        watch_(workload, o.params.slo, o.ruler) {
    validate(o.params);
    if (is_adversary(o.policy)) targeted_ = detail::adversary_targets(w_, o.params.engine.adversary_share);
    const EngineParams& e = o.params.engine;
    // Under async scheduling too: the adapter holds think decodes through
    // vLLM's next_decode_eligible_step, in-flight ones included (ADR-0024).
    if (is_meridian(o.policy)) {
      StepLimits limits;
      limits.token_budget = e.max_num_batched_tokens;
      limits.max_sequences = e.max_num_seqs;
      SchedulerOptions so = SchedulerOptions::from_config(o.config, kv_.usage().total_blocks);
      // Meridian is given the SLO it is judged by, as an operator sets the
      // [scheduler] budgets to theirs (docs/replay.md#the-slo-grid).
      so.output_tpot_budget_ms = o.params.slo.output_tpot_ms;
      so.think_tpot_budget_ms = o.params.slo.think_tpot_ms;
      so.ttft_slo_ms = o.params.slo.ttft_ms;
      so.ttfv_slo_ms = o.params.slo.ttfv_ms;
      if (disagg_on()) {  // victims go over the fabric (ReclaimMode::kOffload)
        so.fabric_offload = true;
        link_.emplace(o.params.disagg, kv_.options().block_size_bytes, block_tokens_, w_.requests.size());
      }
      policy_ =
          detail::make_meridian_policy(so, StepCostModel::from_config(o.config.scheduler), limits, pool_);
    } else {
      const bool tuned = o.policy == PolicyKind::kVllmFcfsTuned;
      detail::PascalOptions pascal;
      pascal.enabled = o.policy == PolicyKind::kPascal;
      pascal.pace_ms = e.pascal_pace_fraction * o.params.slo.output_tpot_ms;
      policy_ = detail::make_vllm_policy(
          {o.policy == PolicyKind::kVllmPriority,
           tuned ? e.tuned_max_num_batched_tokens : e.max_num_batched_tokens, e.max_num_seqs,
           e.long_prefill_token_threshold, e.scheduler_reserve_full_isl, pascal},
          pool_);
    }
    async_ = e.async_scheduling;
    probe_settings_ = ProbeSettings::from(o.config);
    forcing_ = o.policy == PolicyKind::kMeridian && probe_settings_.enabled;
    // Only forcing or a think cap ever leaves a forced </think> pending in the router.
    may_force_end_ =
        forcing_ || router_limits(o.policy, o).max_think_tokens != std::numeric_limits<std::uint64_t>::max();
    total_blocks_ = kv_.usage().total_blocks;
    max_in_flight_ = std::uint64_t{e.max_num_seqs} + kMaxWaitingRequests;
    const auto max_ns = static_cast<std::int64_t>(e.max_sim_time_s * kNsPerS);
    live_.resize(w_.requests.size() + 1);
    next_turn_.assign(w_.requests.size() + 1, 0);
    for (const RequestSpec& r : w_.requests) {
      check_request(r, static_cast<RequestId>(&r - w_.requests.data()) + 1);
      if (r.after == 0) {
        const auto at_ns = static_cast<std::int64_t>(std::llround(r.arrival_s * kNsPerS));
        arrivals_.push({at_ns, r.id});
        ++first_turns_left_;
        arrival_window_end_ns_ = std::max(arrival_window_end_ns_, std::min(at_ns, max_ns));
      } else if (next_turn_[r.after] != 0) {
        // A second follow-up of one turn would never arrive (read_trace refuses it too).
        throw InvalidArgument(
            fmt::format("workload request {}: after ({}) already has a follow-up (request {})", r.id, r.after,
                        next_turn_[r.after]));
      } else {
        next_turn_[r.after] = r.id;
      }
    }
  }

  ReplayResult run() {
    const auto wall_start = std::chrono::steady_clock::now();
    const auto max_ns = static_cast<std::int64_t>(o_.params.engine.max_sim_time_s * kNsPerS);
    const auto interval_ns = static_cast<std::int64_t>(o_.params.engine.series_interval_s * kNsPerS);
    next_sample_ns_ = interval_ns;
    std::uint32_t stalled = 0;
    while (now_ns_ < max_ns) {
      if (o_.stop_when_decided && decided()) {
        stopped_early_ = true;
        break;
      }
      // Two in flight: this step was planned when the previous one started.
      admit_arrivals(async_ && planned_during_ns_ >= 0 ? planned_during_ns_ : now_ns_);
      release_held();
      if (link_) link_->complete_until(now_ns_, [this](RequestId id) { kv_.demote_think_blocks(id); });
      if (active_ == 0 && arrivals_.empty() && held_.empty()) break;
      std::chrono::steady_clock::time_point plan_started;
      if (o_.metrics != nullptr) plan_started = std::chrono::steady_clock::now();
      const EngineStep& step = policy_->plan(now_ns_);
      handle_preemptions(step);
      handle_aborts(step);
      release_finished();
      planned_during_ns_ = -1;
      if (step.items.empty()) {
        policy_->complete(cost_.step_ms({}), now_ns_);
        report_exits(step);
        if (!arrivals_.empty()) {  // idle until the next arrival
          now_ns_ = std::max(now_ns_ + 1, arrivals_.top().at_ns);
          if (o_.on_time) o_.on_time(static_cast<double>(now_ns_) / kNsPerS);
          continue;
        }
        // Requests exist but nothing can run: let time pass, and give up
        // (reporting them unfinished) if that never changes.
        if (++stalled > kMaxStalledSteps) break;
        if (const auto t = link_ ? link_->next_completion() : std::nullopt; t && *t > now_ns_) {
          now_ns_ = *t;  // a push completing frees blocks
          continue;
        }
        now_ns_ += static_cast<std::int64_t>(cost_.step_ms({}) * kNsPerMs);
        continue;
      }
      stalled = 0;
      const double ms = step_ms(step);
      // With a fabric the step starts once the KV it needs has moved.
      const std::int64_t begin_ns = std::max(now_ns_, link_ready_ns_);
      if (link_) link_->add_wait(begin_ns - now_ns_);
      const std::int64_t end_ns = begin_ns + static_cast<std::int64_t>(std::llround(ms * kNsPerMs));
      planned_during_ns_ = begin_ns;
      policy_->complete(ms, end_ns);
      report_exits(step);
      ++steps_;
      busy_ns_ += end_ns - begin_ns;
      now_ns_ = end_ns;
      router_.advance_clock(now_ns_);
      emit_tokens(step);
      sample_series(step, interval_ns);
      if (o_.metrics != nullptr) {
        // The scheduler's CPU time for the step: plan through completion
        // (with the engine's own bookkeeping of the step, which is small).
        feed_metrics(step,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - plan_started).count());
      }
      if (o_.on_time) o_.on_time(static_cast<double>(now_ns_) / kNsPerS);
      if (o_.progress && (steps_ & 1023U) == 0) {
        o_.progress(static_cast<double>(finished_ + aborted_ + rejected_) /
                    static_cast<double>(w_.requests.size()));
      }
    }
    wall_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    if (o_.progress) o_.progress(1.0);
    return summarize();
  }

 private:
  // A request whose prompt and first generated token need more blocks than
  // the whole KV pool can never run, whatever the policy does.
  [[nodiscard]] bool never_fits(const RequestSpec& spec) const {
    return std::uint64_t{pool_.blocks_for(spec.prompt_tokens)} + 1 > total_blocks_;
  }

  [[nodiscard]] KvBlockManagerOptions kv_options() const {
    KvBlockManagerOptions k;
    k.num_blocks = cost_.kv_capacity_blocks(block_tokens_);
    k.block_size_bytes = cost_.params().kv_bytes_per_token() * block_tokens_;
    k.think_phase_memory_fraction = o_.config.kv_memory.think_phase_memory_fraction;
    k.aggressive_think_eviction = o_.config.kv_memory.aggressive_think_eviction;
    k.release_tail_first = o_.params.engine.kv_free_tail_first;
    // The disaggregated mode: ThinkComplete blocks (demoted once pushed) may be reclaimed.
    k.fabric_offload = disagg_on();
    if (k.num_blocks == 0) {
      throw ConfigError({{"cost_model.gpu_memory_gib",
                          "cost_model.gpu_memory_gib leaves no room for one KV block", "", 0, 0}});
    }
    return k;
  }

  void admit_arrivals(std::int64_t until_ns) {
    while (!arrivals_.empty() && arrivals_.top().at_ns <= until_ns) {
      const Arrival a = arrivals_.top();
      arrivals_.pop();
      const RequestSpec& spec = w_.requests[a.id - 1];
      Live& r = live_[a.id];
      r.spec = &spec;
      r.arrival_ns = a.at_ns;
      ++arrived_;
      if (spec.after == 0) --first_turns_left_;
      const bool targeted = !targeted_.empty() && targeted_[a.id - 1] != 0;
      // Turned away at the door (or dropped by adversary-abort): counted, never
      // scheduled, no follow-up turns.
      const bool fits = !never_fits(spec);
      const bool dropped = targeted && o_.policy == PolicyKind::kAdversaryAbort;
      if (!fits || dropped || active_ >= max_in_flight_) {
        ++(fits && !dropped ? rejected_ : aborted_);
        watch_.dropped();
        r.done = true;
        miss_slo(r);
        record_request(a.id);
        continue;
      }
      if (targeted && a.at_ns < arrival_window_end_ns_) {  // adversary-hold: until the first turns stop
        held_.push_back(a.id);
        continue;
      }
      start(a.id);
    }
  }

  // adversary-hold: the first turns stopped arriving; what it held goes to the scheduler now.
  void release_held() {
    if (held_.empty() || first_turns_left_ > 0) return;
    for (RequestId id : held_) start(id);
    held_.clear();
  }

  // A request that arrived goes to the router and the scheduler.
  void start(RequestId id) {
    const RequestSpec& spec = w_.requests[id - 1];
    Live& r = live_[id];
    const bool reasoning = spec.reasoning();
    RequestOptions ro;
    ro.thinking_disabled = !reasoning;
    const TokenId tail[] = {think_start_};
    const Phase phase =
        router_.begin(id, reasoning ? std::span<const TokenId>(tail) : std::span<const TokenId>{}, ro);
    r.in_think = phase == Phase::kThinkDecode || phase == Phase::kPrefill;
    if (reasoning) {
      r.signals = signals_.plan(spec);
      if (forcing_) r.probe = std::make_unique<EntropyProbe>(probe_settings_);
    }
    std::uint32_t cached = 0;
    if (policy_->looks_up_prefix_at_arrival()) cached = pool_.attach_prefix(id, spec.prompt_tokens, true);
    policy_->add({id, r.in_think ? Phase::kThinkDecode : Phase::kOutputDecode, spec.prompt_tokens, cached,
                  r.arrival_ns},
                 spec.priority);
    ++active_;
  }

  [[nodiscard]] bool disagg_on() const { return is_meridian(o_.policy) && o_.params.disagg.enabled(); }

  void handle_preemptions(const EngineStep& step) {
    for (const Preemption& p : step.preempted) {
      ++preemptions_[static_cast<std::size_t>(p.mode)];
      if (link_ && p.mode == ReclaimMode::kOffload) {
        if (const auto out = link_->preempt(p.id, p.blocks, now_ns_)) {
          link_ready_ns_ = std::max(link_ready_ns_, *out);
        }
      }
      if (p.phase == Phase::kOutputDecode) {
        ++preempted_answer_;
        answer_blocks_evicted_ += p.blocks;
      }
    }
  }

  void miss_slo(Live& r) {
    if (r.slo_missed) return;
    r.slo_missed = true;
    ++slo_misses_;
    watch_.missed(r.spec->id);
  }

  // ReplayOptions::stop_when_decided: the verdict can no longer be "meets" (stop_reason_ says why).
  [[nodiscard]] bool decided() {
    if (const auto reason = watch_.decided()) {
      stop_reason_ = *reason;
      return true;
    }
    if (backlog_checked_ || first_turns_left_ > 0 || watch_.ruler() != Ruler::kSustainable) return false;
    backlog_checked_ = true;  // the window's arrivals are all in: the backlog rule is final
    std::vector<RequestTimeline> timelines;
    timelines.reserve(w_.requests.size());
    for (const RequestSpec& spec : w_.requests) timelines.push_back(timeline(spec.id));
    if (!watch_.backlog_grew(timelines, static_cast<double>(arrival_window_end_ns_) / kNsPerS)) return false;
    stop_reason_ = VerdictReason::kBacklogGrowing;
    return true;
  }

  // The request's times so far (final once it is done), on the replay's clock in seconds.
  [[nodiscard]] RequestTimeline timeline(RequestId id) const {
    const Live& r = live_[id];
    const RequestSpec& spec = w_.requests[id - 1];
    const auto s = [](std::int64_t ns) { return ns < 0 ? -1.0 : static_cast<double>(ns) / kNsPerS; };
    RequestTimeline t;
    t.reasoning = spec.reasoning();
    t.arrived = r.arrival_ns >= 0;
    t.completed = r.done && r.answer_emitted >= spec.answer_tokens;
    t.arrival_s = s(r.arrival_ns);
    t.conversation_arrival_s = watch_.conversation_start(id);
    t.conversation_id = watch_.conversation_id(id);
    t.first_token_s = s(r.first_token_ns);
    t.first_visible_s = s(r.first_visible_ns);
    t.think_end_s = s(r.think_end_ns);
    t.last_token_s = s(r.last_token_ns);
    t.finish_s = s(r.finish_ns);
    t.think_tokens = r.think_emitted;
    t.answer_tokens = r.answer_emitted;
    t.natural_think_tokens = spec.think_tokens;
    t.natural_answer_tokens = spec.answer_tokens;
    return t;
  }
  [[nodiscard]] RequestOutcome outcome(RequestId id) const {
    return timeline_outcome(timeline(id), o_.params.slo);
  }

  void handle_aborts(const EngineStep& step) {
    for (RequestId id : step.aborted) {
      kv_.release(id, ReleaseKind::kAbort);
      if (live_[id].done) continue;  // finished a step ago (async); counted then
      if (link_) link_->forget(id);
      router_.end(id);
      live_[id].done = true;
      miss_slo(live_[id]);
      record_request(id);
      ++aborted_;
      --active_;
    }
  }

  double step_ms(const EngineStep& step) {
    StepShape shape;
    for (const StepItem& w : step.items) {
      const double c = w.context;
      const double n = w.tokens;
      shape.tokens += w.tokens;
      shape.kv_tokens_read += std::uint64_t{w.context} + w.tokens;
      shape.attended_pairs += n * c + n * (n + 1) / 2;
      if (w.kind == WorkKind::kSwapIn) resume(w, shape);
      if (w.kind == WorkKind::kPrefill) prefill_tokens_ += w.tokens;
    }
    for (const Preemption& p : step.preempted) {
      if (p.mode == ReclaimMode::kSwap) shape.swap_tokens += std::uint64_t{p.blocks} * block_tokens_;
    }
    shape.tokens += probe_tokens_;
    shape.kv_tokens_read += probe_kv_tokens_;
    shape.attended_pairs += static_cast<double>(probe_kv_tokens_);
    probe_passes_ += probe_tokens_;
    probe_tokens_ = 0;
    probe_kv_tokens_ = 0;
    simulated_tokens_ += shape.tokens;
    return cost_.step_ms(shape);
  }

  // A swap-in: over PCIe, or with a fabric pulled back over the link (the step
  // waits for it) or, for a victim that fell back, recomputed in this step.
  void resume(const StepItem& w, StepShape& shape) {
    std::int64_t ready_ns = 0;
    switch (link_ ? link_->resume(w.id, w.context, now_ns_, ready_ns)
                  : detail::DisaggLink::Resume::kNotOffloaded) {
      case detail::DisaggLink::Resume::kNotOffloaded: shape.swap_tokens += w.context; break;
      case detail::DisaggLink::Resume::kPull: link_ready_ns_ = std::max(link_ready_ns_, ready_ns); break;
      case detail::DisaggLink::Resume::kRecompute: {
        const double c = w.context;
        shape.tokens += w.context;
        shape.kv_tokens_read += w.context;
        shape.attended_pairs += c * (c + 1) / 2;
        prefill_tokens_ += w.context;
        break;
      }
    }
  }

  // ExitThink with a fabric: the reasoning blocks are queued for a push and
  // demoted when it completes (DisaggLink::complete_until).
  void offload_think_blocks(RequestId id) {
    std::uint32_t think = 0;
    for (BlockId b : kv_.blocks_of(id)) think += kv_.tier_of(b) == BlockTier::kThinkActive ? 1U : 0U;
    link_->exit_think(id, think, now_ns_);
  }

  void emit_tokens(const EngineStep& step) {
    ids_.clear();
    tokens_.clear();
    for (const StepItem& w : step.items) {
      if (!w.samples_token) continue;
      Live& r = live_[w.id];
      if (r.done) continue;
      if (r.first_token_ns < 0) {
        r.first_token_ns = now_ns_;
        if (ms_between(r.arrival_ns, now_ns_) > o_.params.slo.ttft_ms) miss_slo(r);
      }
      TokenId token = kAnswerTokenId;
      if (r.in_think) {
        if (r.think_emitted >= r.spec->think_tokens || (may_force_end_ && router_.end_think_pending(w.id))) {
          token = think_end_;
        } else {
          token = kThinkTokenId;
          if (r.think_emitted > 0) think_itl_.push_back(ms_between(r.last_token_ns, now_ns_));
          ++r.think_emitted;
          ++think_tokens_total_;
          window_tokens_ += 1;
        }
      } else {
        ++r.answer_emitted;
        ++output_tokens_total_;
        window_tokens_ += 1;
        if (r.first_visible_ns < 0) {
          r.first_visible_ns = now_ns_;
        } else {
          const auto itl = ms_between(r.last_token_ns, now_ns_);
          output_itl_.push_back(itl);
          window_itl_.push_back(itl);
          if (o_.metrics != nullptr) o_.metrics->record_output_itl(static_cast<double>(itl) / 1000.0);
        }
        if (r.answer_emitted >= r.spec->answer_tokens) token = eos_;
      }
      r.last_token_ns = now_ns_;
      ids_.push_back(w.id);
      tokens_.push_back(token);
    }
    if (now_ns_ <= arrival_window_end_ns_) arrival_window_tokens_ += ids_.size();
    events_.resize(ids_.size());
    const std::size_t n = router_.on_tokens(ids_, tokens_, events_);
    for (std::size_t i = 0; i < n; ++i) on_event(events_[i]);
    if (forcing_) observe_signals();
  }

  void on_event(const PhaseEvent& ev) {
    if (o_.metrics != nullptr) o_.metrics->record_event(ev);
    Live& r = live_[ev.request_id];
    switch (ev.kind) {
      case PhaseEventKind::kExitThink:
        r.in_think = false;
        r.think_end_ns = now_ns_;
        if (ev.forced) {
          r.forced = ev.reason;
          r.forced_before_answer = r.think_emitted < r.signals.answer_at;
        }
        if (async_) {
          unreported_exits_.push_back(ev.request_id);  // learnt after planning the next step
        } else {
          report_exit_think(ev.request_id, 0);
        }
        r.probe.reset();
        break;
      case PhaseEventKind::kComplete: finish(ev.request_id); break;
      case PhaseEventKind::kEnterThink:
      case PhaseEventKind::kForceBudget: break;
    }
  }

  void finish(RequestId id) {
    Live& r = live_[id];
    r.done = true;
    if (async_) {
      unreleased_.push_back(id);  // the scheduler learns of it after planning the next step
    } else {
      release(id);
    }
    r.finish_ns = now_ns_;
    if (!outcome(id).slo_met) miss_slo(r);
    record_request(id);
    if (r.spec->reasoning()) {
      ++reasoning_done_;
      if (r.forced) {
        ++forced_[static_cast<std::size_t>(*r.forced)];
        if (r.forced_before_answer) ++forced_before_answer_;
      }
    }
    ++finished_;
    --active_;
    last_finish_ns_ = now_ns_;
    if (const RequestId next = next_turn_[id]; next != 0) {
      const double delay = w_.requests[next - 1].delay_s;
      arrivals_.push({now_ns_ + static_cast<std::int64_t>(std::llround(delay * kNsPerS)), next});
    }
  }

  void release(RequestId id) {
    policy_->finish(id);
    kv_.release(id, ReleaseKind::kFinished);
    if (link_) link_->forget(id);
  }

  // The scheduler learns that a request left its reasoning: it is answering
  // now, and its blocks are reasoning that will not grow.
  void report_exit_think(RequestId id, std::uint32_t answer_decodes_in_flight) {
    policy_->set_phase(id, Phase::kOutputDecode, answer_decodes_in_flight);
    if (link_) {
      offload_think_blocks(id);
    } else if (policy_->tiered_kv()) {
      kv_.demote_think_blocks(id);
    }
  }

  // Async scheduling: the previous step's </think> tokens reach the scheduler
  // once it has planned (and counted as run) the next step, as vLLM's
  // update_from_output follows schedule(); a decode of the request in that
  // step samples its first answer token.
  void report_exits(const EngineStep& step) {
    for (RequestId id : unreported_exits_) {
      if (live_[id].done) continue;  // aborted since
      const bool in_flight = std::any_of(step.items.begin(), step.items.end(),
                                         [id](const StepItem& w) { return w.id == id && w.samples_token; });
      report_exit_think(id, in_flight ? 1U : 0U);
    }
    unreported_exits_.clear();
  }

  // Async scheduling: a request that finished in the previous step was
  // scheduled once more (its output is dropped); now its KV is given back.
  void release_finished() {
    for (RequestId id : unreleased_) release(id);
    unreleased_.clear();
  }

  // Feeds the tokens just generated to each thinking request's probe and
  // asks the router to force when the probe says so.
  void observe_signals() {
    for (RequestId id : ids_) {
      Live& r = live_[id];
      if (!r.in_think || !r.probe || r.done) continue;
      const std::uint32_t t = r.think_emitted;  // this token was think token t (1-based)
      if (t == 0) continue;
      ThinkTokenObservation obs;
      obs.think_tokens = t;
      obs.token_entropy = signals_.token_entropy(r.signals, t - 1);
      if (r.probe->eat_due(t)) {
        obs.eat = EatSample{signals_.eat(r.signals, t - 1), EatSource::kProbePass};
        // The probe pass is one more token of forward work over the request's
        // context (</think> appended, logits read, KV of it discarded); it
        // rides on the next step.
        ++probe_tokens_;
        probe_kv_tokens_ += std::uint64_t{r.spec->prompt_tokens} + t;
      }
      const EntropySignal sig = r.probe->observe(obs);
      if (sig.force && *sig.force != ForceReason::kHardCap) router_.request_force(id, *sig.force);
    }
  }

  void sample_series(const EngineStep& step, std::int64_t interval_ns) {
    while (now_ns_ >= next_sample_ns_) {
      SeriesPoint p;
      p.t_s = static_cast<double>(next_sample_ns_) / kNsPerS;
      p.output_queue = step.output_queue;
      p.think_queue = step.think_queue;
      p.waiting = step.waiting;
      p.swapped = step.swapped;
      const KvBlockUsage u = kv_.usage();
      std::uint64_t live = 0;
      for (std::uint32_t b : u.live_blocks) live += b;
      p.kv_used_fraction = static_cast<double>(live) / u.total_blocks;
      if (!window_itl_.empty()) {
        p.output_itl_p99_ms = detail::percentile(window_itl_, 99);
        p.output_itl_max_ms = detail::max_of(window_itl_);
      }
      p.tokens = window_tokens_;
      window_itl_.clear();
      window_tokens_ = 0;
      series_.push_back(p);
      next_sample_ns_ += interval_ns;
    }
  }

  // Telemetry (ReplayOptions::metrics): the components' counters and this step.
  void feed_metrics(const EngineStep& step, double schedule_s) {
    telemetry::EngineMetrics& m = *o_.metrics;
    StepStats stats;
    if (const DualQueueScheduler* s = policy_->scheduler()) {
      stats = s->last_plan().stats;
      m.sync(*s);
    } else {  // a baseline: its queues, no Meridian plan
      stats.output_queue_depth = step.output_queue;
      stats.think_queue_depth = step.think_queue;
      stats.waiting_depth = step.waiting;
      stats.swapped_depth = step.swapped;
    }
    m.record_step(stats, schedule_s);
    m.sync(router_);
    m.sync(kv_);
  }

  // A request finished or was given up on (turned away, aborted).
  void record_request(RequestId id) {
    if (o_.metrics == nullptr) return;
    const Live& r = live_[id];
    const RequestOutcome oc = outcome(id);
    auto seconds = [](std::int64_t from_ns, std::int64_t to_ns) {
      return from_ns >= 0 && to_ns >= 0 ? static_cast<double>(to_ns - from_ns) / kNsPerS : -1.0;
    };
    o_.metrics->record_request(
        {seconds(r.arrival_ns, r.first_token_ns), seconds(r.arrival_ns, r.first_visible_ns),
         seconds(r.think_end_ns, r.first_visible_ns), oc.completed ? seconds(r.arrival_ns, now_ns_) : -1.0,
         oc.completed, oc.slo_met, oc.slo_misses});
  }

  ReplayResult summarize();

  const Workload& w_;
  const ReplayOptions& o_;
  RooflineCostModel cost_;
  SignalModel signals_;
  const ModelConfig& model_;
  TokenId think_start_;
  TokenId think_end_;
  TokenId eos_;
  PhaseRouter router_;
  std::uint32_t block_tokens_;
  KvBlockManager kv_;
  KvPool pool_;
  std::unique_ptr<detail::SchedulingPolicy> policy_;
  VerdictWatch watch_;
  std::vector<char> targeted_;   // adversary policies: the requests they hold or abort
  std::vector<RequestId> held_;  // adversary-hold: arrived, not yet given to the scheduler
  std::uint64_t first_turns_left_ = 0;
  bool backlog_checked_ = false;
  VerdictReason stop_reason_ = VerdictReason::kMet;  // why stop_when_decided ended the run
  ProbeSettings probe_settings_;
  bool forcing_ = false;
  bool may_force_end_ = true;
  bool async_ = false;                       // two steps in flight ([engine] async_scheduling)
  std::optional<detail::DisaggLink> link_;   // the disaggregated mode (Meridian policies)
  std::int64_t link_ready_ns_ = 0;           // the next step starts no earlier
  std::int64_t planned_during_ns_ = -1;      // async: start of the step the next plan overlapped
  std::vector<RequestId> unreleased_;        // async: finished, still held by the scheduler
  std::vector<RequestId> unreported_exits_;  // async: left reasoning; the scheduler learns after its plan

  std::vector<Live> live_;  // indexed by request id
  std::vector<RequestId> next_turn_;
  std::priority_queue<Arrival, std::vector<Arrival>, std::greater<>> arrivals_;
  std::vector<RequestId> ids_;
  std::vector<TokenId> tokens_;
  std::vector<PhaseEvent> events_;

  std::int64_t now_ns_ = 0;
  std::int64_t next_sample_ns_ = 0;
  std::int64_t busy_ns_ = 0;
  std::int64_t last_finish_ns_ = 0;
  std::uint64_t steps_ = 0;
  std::uint64_t arrived_ = 0;
  std::uint64_t active_ = 0;
  std::uint64_t finished_ = 0;
  std::uint64_t aborted_ = 0;
  std::uint64_t rejected_ = 0;       // arrived while the engine held max_in_flight_ requests
  std::uint64_t total_blocks_ = 0;   // KV pool size
  std::uint64_t max_in_flight_ = 0;  // max_num_seqs + kMaxWaitingRequests
  std::uint64_t reasoning_done_ = 0;
  std::uint64_t simulated_tokens_ = 0;
  std::uint64_t prefill_tokens_ = 0;
  std::uint64_t think_tokens_total_ = 0;
  std::uint64_t output_tokens_total_ = 0;
  std::uint64_t preemptions_[3] = {};
  std::uint64_t preempted_answer_ = 0;
  std::uint64_t answer_blocks_evicted_ = 0;
  std::uint64_t slo_misses_ = 0;
  bool stopped_early_ = false;
  std::uint64_t forced_[3] = {};
  std::uint64_t forced_before_answer_ = 0;
  std::uint32_t window_tokens_ = 0;
  std::uint64_t probe_tokens_ = 0;  // probe passes waiting for the next step
  std::uint64_t probe_kv_tokens_ = 0;
  std::uint64_t probe_passes_ = 0;
  std::uint64_t arrival_window_tokens_ = 0;  // generated while first turns still arrive
  std::int64_t arrival_window_end_ns_ = 0;
  double wall_s_ = 0;
  std::vector<float> output_itl_, think_itl_;
  std::vector<float> window_itl_;
  std::vector<SeriesPoint> series_;
};

ReplayResult Engine::summarize() {
  std::vector<RequestTimeline> timelines;
  timelines.reserve(w_.requests.size());
  for (const RequestSpec& spec : w_.requests) timelines.push_back(timeline(spec.id));
  RunTotals t;
  t.steps = steps_;
  t.prefill_tokens = prefill_tokens_;
  t.simulated_tokens = simulated_tokens_;
  t.preemptions = preemptions_[0] + preemptions_[1] + preemptions_[2];
  t.preempted_answer_phase = preempted_answer_;
  t.prefix_lookup_blocks = pool_.prompt_lookup_blocks();
  t.prefix_hit_blocks = pool_.prompt_hit_blocks();
  t.rejected = rejected_;
  t.unfinished = active_;
  t.busy_s = static_cast<double>(busy_ns_) / kNsPerS;
  t.makespan_s = static_cast<double>(last_finish_ns_) / kNsPerS;
  t.arrival_window_end_s = static_cast<double>(arrival_window_end_ns_) / kNsPerS;
  t.arrival_window_tokens = arrival_window_tokens_;
  t.wall_s = wall_s_;
  t.stopped_early = stopped_early_;
  // One definition of every metric (summarize_timelines); then what only this engine counts.
  ReplayResult out = summarize_timelines(timelines, std::move(output_itl_), std::move(think_itl_), t,
                                         o_.params.slo, o_.ruler);
  out.policy = o_.policy;
  auto set = [&](std::string_view name, double v) {
    for (auto& [k, value] : out.metrics) {
      if (k == name) value = v;
    }
  };
  if (stopped_early_) {  // judged on the rule it broke, not on the requests the stop left open
    out.verdict.meets = false;
    out.verdict.reason = stop_reason_;
    set("meets_ruler", 0);
  }
  const double reasoning = std::max<double>(1, static_cast<double>(reasoning_done_));
  set("aborted", static_cast<double>(aborted_));
  set("forced_pct", 100.0 * static_cast<double>(forced_[0] + forced_[1] + forced_[2]) / reasoning);
  set("forced_converged_pct", 100.0 * static_cast<double>(forced_[0]) / reasoning);
  set("forced_overthinking_pct", 100.0 * static_cast<double>(forced_[1]) / reasoning);
  set("forced_hard_cap_pct", 100.0 * static_cast<double>(forced_[2]) / reasoning);
  set("forced_before_answer_pct", 100.0 * static_cast<double>(forced_before_answer_) / reasoning);
  const KvBlockCounters& c = kv_.counters();
  set("evictions_think_complete", static_cast<double>(c.evictions(BlockTier::kThinkComplete)));
  set("evictions_think_active", static_cast<double>(c.evictions(BlockTier::kThinkActive)));
  set("evictions_output_critical", static_cast<double>(c.evictions(BlockTier::kOutputCritical)));
  set("output_critical_eviction_events", static_cast<double>(c.output_critical_eviction_events));
  set("preemptions_recompute", static_cast<double>(preemptions_[0]));
  set("preemptions_swap", static_cast<double>(preemptions_[1]));
  set("answer_phase_evicted_blocks", static_cast<double>(answer_blocks_evicted_));
  set("probe_passes", static_cast<double>(probe_passes_));
  if (o_.params.disagg.enabled()) {  // the baselines have no fabric: zeros, so the keys line up
    const detail::DisaggLink none(o_.params.disagg, kv_.options().block_size_bytes, block_tokens_, 0);
    for (const auto& [k, v] : (link_ ? *link_ : none).metrics(t.makespan_s)) out.metrics.emplace_back(k, v);
    // Offload moves blocks between owners and tiers: the pool must still add up.
    if (const std::string bad = kv_.check_invariants(); !bad.empty()) {
      throw Error(fmt::format("replay: KV pool inconsistent after the disaggregated run: {}", bad));
    }
  }
  out.series = std::move(series_);
  return out;
}

}  // namespace

ReplayResult run_replay(const Workload& workload, const ReplayOptions& options) {
  if (options.policy == PolicyKind::kVllmBest) {
    throw InvalidArgument(
        "replay: vllm-best is a setting search, not one run: find_goodput() picks its setting, and "
        "run_seeds() runs it from StudyOptions::vllm_best");
  }
  Engine engine(workload, options);
  return engine.run();
}

}  // namespace meridian::sim
