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
#include "meridian/metrics.h"
#include "meridian/phase_router.h"
#include "meridian/replay.h"
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
  float think_tpot_ms = -1;
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
        pool_(kv_, block_tokens_,
              [this](RequestId id, std::uint32_t index) { return block_hash(id, index); }) {
    validate(o.params);
    const EngineParams& e = o.params.engine;
    if (is_meridian(o.policy)) {
      StepLimits limits;
      limits.token_budget = e.max_num_batched_tokens;
      limits.max_sequences = e.max_num_seqs;
      SchedulerOptions so = SchedulerOptions::from_config(o.config, kv_.usage().total_blocks);
      if (disagg_on()) {  // victims go over the fabric (ReclaimMode::kOffload)
        so.fabric_offload = true;
        link_.emplace(o.params.disagg, kv_.options().block_size_bytes, block_tokens_, w_.requests.size());
      }
      policy_ =
          detail::make_meridian_policy(so, StepCostModel::from_config(o.config.scheduler), limits, pool_);
    } else {
      const bool tuned = o.policy == PolicyKind::kVllmFcfsTuned;
      policy_ = detail::make_vllm_policy(
          {o.policy == PolicyKind::kVllmPriority,
           tuned ? e.tuned_max_num_batched_tokens : e.max_num_batched_tokens, e.max_num_seqs},
          pool_);
    }
    probe_settings_ = ProbeSettings::from(o.config);
    forcing_ = o.policy == PolicyKind::kMeridian && probe_settings_.enabled;
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
        arrival_window_end_ns_ = std::max(arrival_window_end_ns_, std::min(at_ns, max_ns));
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
      if (o_.stop_after_slo_misses > 0 && slo_misses_ > o_.stop_after_slo_misses) {
        stopped_early_ = true;
        break;
      }
      admit_arrivals();
      if (link_) link_->complete_until(now_ns_, [this](RequestId id) { kv_.demote_think_blocks(id); });
      if (active_ == 0 && arrivals_.empty()) break;
      std::chrono::steady_clock::time_point plan_started;
      if (o_.metrics != nullptr) plan_started = std::chrono::steady_clock::now();
      const EngineStep& step = policy_->plan(now_ns_);
      handle_preemptions(step);
      handle_aborts(step);
      if (step.items.empty()) {
        policy_->complete(cost_.step_ms({}), now_ns_);
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
      policy_->complete(ms, end_ns);
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
    // The disaggregated mode: ThinkComplete blocks (demoted once pushed) may be reclaimed.
    k.fabric_offload = disagg_on();
    if (k.num_blocks == 0) {
      throw ConfigError({{"cost_model.gpu_memory_gib",
                          "cost_model.gpu_memory_gib leaves no room for one KV block", "", 0, 0}});
    }
    return k;
  }

  // Blocks that hold conversation transcript (the prompt, and the answer of a
  // request without reasoning) hash by (conversation, position), so the next
  // turn finds them; everything else is unique to the request.
  [[nodiscard]] std::uint64_t block_hash(RequestId id, std::uint32_t index) const {
    const RequestSpec& r = w_.requests[id - 1];
    if (r.conversation > 0) {
      const std::uint64_t transcript =
          std::uint64_t{r.prompt_tokens} + (r.reasoning() ? 0U : r.answer_tokens);
      if ((std::uint64_t{index} + 1) * block_tokens_ <= transcript) {
        return mix64(mix64(r.conversation * 0x9e3779b97f4a7c15ULL + 1) ^ index);
      }
    }
    return mix64(mix64(id * 0xc2b2ae3d27d4eb4fULL + 2) ^ index);
  }

  void admit_arrivals() {
    while (!arrivals_.empty() && arrivals_.top().at_ns <= now_ns_) {
      const Arrival a = arrivals_.top();
      arrivals_.pop();
      const RequestSpec& spec = w_.requests[a.id - 1];
      Live& r = live_[a.id];
      r.spec = &spec;
      r.arrival_ns = a.at_ns;
      ++arrived_;
      // Turned away at the door: counted, never scheduled, no follow-up turns.
      const bool fits = !never_fits(spec);
      if (!fits || active_ >= max_in_flight_) {
        ++(fits ? rejected_ : aborted_);
        r.done = true;
        miss_slo(r);
        record_request(a.id);
        continue;
      }
      const bool reasoning = spec.reasoning();
      RequestOptions ro;
      ro.thinking_disabled = !reasoning;
      const TokenId tail[] = {think_start_};
      const Phase phase =
          router_.begin(a.id, reasoning ? std::span<const TokenId>(tail) : std::span<const TokenId>{}, ro);
      r.in_think = phase == Phase::kThinkDecode || phase == Phase::kPrefill;
      if (reasoning) {
        r.signals = signals_.plan(spec);
        if (forcing_) r.probe = std::make_unique<EntropyProbe>(probe_settings_);
      }
      std::uint32_t cached = 0;
      if (policy_->looks_up_prefix_at_arrival()) cached = pool_.attach_prefix(a.id, spec.prompt_tokens, true);
      policy_->add({a.id, r.in_think ? Phase::kThinkDecode : Phase::kOutputDecode, spec.prompt_tokens, cached,
                    a.at_ns},
                   spec.priority);
      ++active_;
    }
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
  }

  // The request's outcome as it stands now (final once it is done).
  [[nodiscard]] RequestOutcome outcome(RequestId id) const {
    const Live& r = live_[id];
    const RequestSpec& spec = w_.requests[id - 1];
    RequestOutcome o;
    o.reasoning = spec.reasoning();
    o.arrived = r.arrival_ns >= 0;
    if (!o.arrived) return o;
    o.completed = r.done && r.answer_emitted >= spec.answer_tokens;
    if (r.first_token_ns >= 0) o.ttft_ms = ms_between(r.arrival_ns, r.first_token_ns);
    if (r.first_visible_ns >= 0) o.ttfv_ms = ms_between(r.arrival_ns, r.first_visible_ns);
    if (r.answer_emitted >= 2) {
      o.output_tpot_ms =
          ms_between(r.first_visible_ns, r.last_token_ns) / static_cast<float>(r.answer_emitted - 1);
    }
    o.think_tpot_ms = r.think_tpot_ms;
    o.think_tokens = r.think_emitted;
    o.slo_met = meets_slo(o, o_.params.slo);
    return o;
  }

  void handle_aborts(const EngineStep& step) {
    for (RequestId id : step.aborted) {
      kv_.release(id, ReleaseKind::kAbort);
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
        ttft_.push_back(ms_between(r.arrival_ns, now_ns_));
        if (ttft_.back() > o_.params.slo.ttft_ms) miss_slo(r);
      }
      TokenId token = kAnswerTokenId;
      if (r.in_think) {
        if (r.think_emitted >= r.spec->think_tokens || router_.end_think_pending(w.id)) {
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
          ttfv_.push_back(ms_between(r.arrival_ns, now_ns_));
          if (r.think_end_ns >= 0) ttot_.push_back(ms_between(r.think_end_ns, now_ns_));
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
        if (r.think_emitted > 1 && r.first_token_ns >= 0) {
          r.think_tpot_ms = ms_between(r.first_token_ns, now_ns_) / static_cast<float>(r.think_emitted);
          think_tpot_.push_back(r.think_tpot_ms);
        }
        if (ev.forced) {
          r.forced = ev.reason;
          r.forced_before_answer = r.think_emitted < r.signals.answer_at;
        }
        policy_->set_phase(ev.request_id, Phase::kOutputDecode);
        if (link_) {
          offload_think_blocks(ev.request_id);
        } else if (policy_->tiered_kv()) {
          kv_.demote_think_blocks(ev.request_id);
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
    policy_->finish(id);
    kv_.release(id, ReleaseKind::kFinished);
    if (link_) link_->forget(id);
    e2e_.push_back(ms_between(r.arrival_ns, now_ns_));
    if (!outcome(id).slo_met) miss_slo(r);
    record_request(id);
    if (r.spec->reasoning()) {
      ++reasoning_done_;
      think_counts_.push_back(static_cast<float>(r.think_emitted));
      natural_think_tokens_ += r.spec->think_tokens;
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
        p.output_itl_max_ms = window_itl_.back();
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
         oc.completed, oc.slo_met});
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
  ProbeSettings probe_settings_;
  bool forcing_ = false;
  std::optional<detail::DisaggLink> link_;  // the disaggregated mode (Meridian policies)
  std::int64_t link_ready_ns_ = 0;          // the next step starts no earlier

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
  std::uint64_t natural_think_tokens_ = 0;  // natural lengths of the completed reasoning requests
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
  std::vector<float> ttft_, ttot_, ttfv_, output_itl_, think_itl_, think_tpot_, e2e_, think_counts_;
  std::vector<float> window_itl_;
  std::vector<SeriesPoint> series_;
};

ReplayResult Engine::summarize() {
  using detail::mean;
  using detail::percentile;
  ReplayResult out;
  out.policy = o_.policy;
  auto& m = out.metrics;
  auto put = [&](std::string_view name, double v) { m.emplace_back(std::string(name), v); };
  const double reasoning = std::max<double>(1, static_cast<double>(reasoning_done_));
  const double makespan_s = static_cast<double>(last_finish_ns_) / kNsPerS;
  out.outcomes.reserve(w_.requests.size());
  std::uint64_t met[2] = {};    // chat, reasoning
  std::uint64_t total[2] = {};  // chat, reasoning
  std::vector<float> ttfv_class[2];
  std::vector<float> output_tpot;
  // Why requests missed (a request may miss several bounds).
  std::uint64_t miss_incomplete = 0;
  std::uint64_t miss_ttft = 0;
  std::uint64_t miss_output = 0;
  std::uint64_t miss_think = 0;
  const SloParams& slo = o_.params.slo;
  for (const RequestSpec& spec : w_.requests) {
    const RequestOutcome oc = outcome(spec.id);
    const std::size_t cls = oc.reasoning ? 1 : 0;
    ++total[cls];
    if (oc.slo_met) ++met[cls];
    if (!oc.completed) ++miss_incomplete;
    if (oc.ttft_ms > slo.ttft_ms) ++miss_ttft;
    if (oc.output_tpot_ms > slo.output_tpot_ms) ++miss_output;
    if (oc.think_tpot_ms > slo.think_tpot_ms) ++miss_think;
    if (oc.ttfv_ms >= 0) ttfv_class[cls].push_back(oc.ttfv_ms);
    if (oc.output_tpot_ms >= 0) output_tpot.push_back(oc.output_tpot_ms);
    out.outcomes.push_back(oc);
  }
  auto pct = [](std::uint64_t part, std::uint64_t whole) {
    return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
  };
  put("requests", static_cast<double>(w_.requests.size()));
  put("arrived", static_cast<double>(arrived_));
  put("completed", static_cast<double>(finished_));
  put("aborted", static_cast<double>(aborted_));
  put("rejected", static_cast<double>(rejected_));
  put("unfinished", static_cast<double>(active_));
  put("never_arrived", static_cast<double>(w_.requests.size() - arrived_));
  put("stopped_early", stopped_early_ ? 1 : 0);
  put("slo_attainment_pct", pct(met[0] + met[1], total[0] + total[1]));
  put("slo_attainment_chat_pct", pct(met[0], total[0]));
  put("slo_attainment_reasoning_pct", pct(met[1], total[1]));
  const std::uint64_t all = total[0] + total[1];
  put("slo_miss_ttft_pct", pct(miss_ttft, all));
  put("slo_miss_output_tpot_pct", pct(miss_output, all));
  put("slo_miss_think_tpot_pct", pct(miss_think, all));
  put("slo_miss_incomplete_pct", pct(miss_incomplete, all));
  put("ttft_p50_ms", percentile(ttft_, 50));
  put("ttft_p90_ms", percentile(ttft_, 90));
  put("ttft_p95_ms", percentile(ttft_, 95));
  put("ttft_p99_ms", percentile(ttft_, 99));
  put("ttfv_p50_ms", percentile(ttfv_, 50));
  put("ttfv_p95_ms", percentile(ttfv_, 95));
  put("ttfv_chat_p50_ms", percentile(ttfv_class[0], 50));
  put("ttfv_chat_p95_ms", percentile(ttfv_class[0], 95));
  put("ttfv_reasoning_p50_ms", percentile(ttfv_class[1], 50));
  put("ttfv_reasoning_p95_ms", percentile(ttfv_class[1], 95));
  put("ttot_p50_ms", percentile(ttot_, 50));
  put("ttot_p95_ms", percentile(ttot_, 95));
  put("ttot_p99_ms", percentile(ttot_, 99));
  put("output_tpot_p50_ms", percentile(output_tpot, 50));
  put("output_tpot_p90_ms", percentile(output_tpot, 90));
  put("output_tpot_p95_ms", percentile(output_tpot, 95));
  put("output_itl_p50_ms", percentile(output_itl_, 50));
  put("output_itl_p95_ms", percentile(output_itl_, 95));
  put("output_itl_p99_ms", percentile(output_itl_, 99));
  put("output_itl_max_ms", output_itl_.empty() ? 0 : output_itl_.back());
  put("think_tpot_p50_ms", percentile(think_tpot_, 50));
  put("think_tpot_p90_ms", percentile(think_tpot_, 90));
  put("think_tpot_p99_ms", percentile(think_tpot_, 99));
  put("think_itl_p99_ms", percentile(think_itl_, 99));
  put("think_itl_max_ms", think_itl_.empty() ? 0 : think_itl_.back());
  put("e2e_p50_ms", percentile(e2e_, 50));
  put("e2e_p95_ms", percentile(e2e_, 95));
  put("think_tokens_avg", mean(think_counts_));
  put("think_tokens_p95", percentile(think_counts_, 95));
  put("think_tokens_total", static_cast<double>(think_tokens_total_));
  double emitted_by_done = 0;
  for (float c : think_counts_) emitted_by_done += c;
  put("think_tokens_saved_pct",
      natural_think_tokens_ > 0 ? 100.0 * (1.0 - emitted_by_done / static_cast<double>(natural_think_tokens_))
                                : 0);
  put("output_tokens_total", static_cast<double>(output_tokens_total_));
  const std::uint64_t forced_total = forced_[0] + forced_[1] + forced_[2];
  put("forced_pct", 100.0 * static_cast<double>(forced_total) / reasoning);
  put("forced_converged_pct", 100.0 * static_cast<double>(forced_[0]) / reasoning);
  put("forced_overthinking_pct", 100.0 * static_cast<double>(forced_[1]) / reasoning);
  put("forced_hard_cap_pct", 100.0 * static_cast<double>(forced_[2]) / reasoning);
  put("forced_before_answer_pct", 100.0 * static_cast<double>(forced_before_answer_) / reasoning);
  const KvBlockCounters& c = kv_.counters();
  put("evictions_think_complete", static_cast<double>(c.evictions(BlockTier::kThinkComplete)));
  put("evictions_think_active", static_cast<double>(c.evictions(BlockTier::kThinkActive)));
  put("evictions_output_critical", static_cast<double>(c.evictions(BlockTier::kOutputCritical)));
  put("output_critical_eviction_events", static_cast<double>(c.output_critical_eviction_events));
  put("preemptions", static_cast<double>(preemptions_[0] + preemptions_[1] + preemptions_[2]));
  put("preemptions_recompute", static_cast<double>(preemptions_[0]));
  put("preemptions_swap", static_cast<double>(preemptions_[1]));
  put("preempted_answer_phase", static_cast<double>(preempted_answer_));
  put("answer_phase_evicted_blocks", static_cast<double>(answer_blocks_evicted_));
  const auto preempted = static_cast<double>(preemptions_[0] + preemptions_[1] + preemptions_[2]);
  put("preemptions_per_completed", finished_ > 0 ? preempted / static_cast<double>(finished_) : preempted);
  const auto lookups = static_cast<double>(pool_.prompt_lookup_blocks());
  put("prefix_hit_rate", lookups > 0 ? static_cast<double>(pool_.prompt_hit_blocks()) / lookups : 0);
  const auto generated = static_cast<double>(think_tokens_total_ + output_tokens_total_);
  put("throughput_tokens_per_s", makespan_s > 0 ? generated / makespan_s : 0);
  put("think_throughput_tokens_per_s",
      makespan_s > 0 ? static_cast<double>(think_tokens_total_) / makespan_s : 0);
  const double window_s = static_cast<double>(arrival_window_end_ns_) / kNsPerS;
  put("arrival_window_throughput_tokens_per_s",
      window_s > 0 ? static_cast<double>(arrival_window_tokens_) / window_s : 0);
  put("probe_passes", static_cast<double>(probe_passes_));
  put("prefill_tokens", static_cast<double>(prefill_tokens_));
  put("simulated_tokens", static_cast<double>(simulated_tokens_));
  put("steps", static_cast<double>(steps_));
  put("makespan_s", makespan_s);
  put("gpu_busy_pct", makespan_s > 0 ? 100.0 * static_cast<double>(busy_ns_) / kNsPerS / makespan_s : 0);
  put("sim_wall_s", wall_s_);
  put("sim_tokens_per_s", wall_s_ > 0 ? static_cast<double>(simulated_tokens_) / wall_s_ : 0);
  if (o_.params.disagg.enabled()) {  // the baselines have no fabric: zeros, so the keys line up
    const detail::DisaggLink none(o_.params.disagg, kv_.options().block_size_bytes, block_tokens_, 0);
    for (const auto& [k, v] : (link_ ? *link_ : none).metrics(makespan_s)) put(k, v);
    // Offload moves blocks between owners and tiers: the pool must still add up.
    if (const std::string bad = kv_.check_invariants(); !bad.empty()) {
      throw Error(fmt::format("replay: KV pool inconsistent after the disaggregated run: {}", bad));
    }
  }
  out.series = std::move(series_);
  out.ttft_ms = std::move(ttft_);
  out.ttot_ms = std::move(ttot_);
  out.ttfv_ms = std::move(ttfv_);
  out.output_itl_ms = std::move(output_itl_);
  out.think_tpot_ms = std::move(think_tpot_);
  out.e2e_ms = std::move(e2e_);
  out.stopped_early = stopped_early_;
  return out;
}

}  // namespace

bool meets_slo(const RequestOutcome& r, const SloParams& slo) noexcept {
  if (!r.completed || r.ttft_ms < 0 || r.ttft_ms > slo.ttft_ms) return false;
  if (r.output_tpot_ms >= 0 && r.output_tpot_ms > slo.output_tpot_ms) return false;
  return !(r.think_tpot_ms >= 0 && r.think_tpot_ms > slo.think_tpot_ms);
}

ReplayResult run_replay(const Workload& workload, const ReplayOptions& options) {
  Engine engine(workload, options);
  return engine.run();
}

double ReplayResult::metric(std::string_view name) const {
  for (const auto& [k, v] : metrics) {
    if (k == name) return v;
  }
  throw NotFound(fmt::format("replay result has no metric \"{}\"", name));
}

}  // namespace meridian::sim
