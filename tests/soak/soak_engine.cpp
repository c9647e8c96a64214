// The soak's engine loop (soak_engine.h). It follows the replay engine
// (src/sim/engine.cpp) step for step, minus its per-request records.
#include "soak_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <absl/container/flat_hash_map.h>
#include <fmt/format.h>

#include "meridian/entropy_probe.h"
#include "meridian/error.h"
#include "meridian/kv_block_manager.h"
#include "meridian/request_id_map.h"
#include "meridian/scheduler.h"
#include "meridian/sim_cost_model.h"
#include "meridian/sim_workload.h"
#include "meridian/step_driver.h"

namespace meridian::soak {
namespace {

constexpr TokenId kThinkStart = 151667;  // Qwen3's <think>, </think>, <|im_end|>
constexpr TokenId kThinkEnd = 151668;
constexpr TokenId kEos = 151645;
constexpr TokenId kThinkToken = 1000;  // any ordinary vocabulary ids
constexpr TokenId kAnswerToken = 2000;
constexpr double kNsPerMs = 1e6;
constexpr double kNsPerS = 1e9;
constexpr std::uint32_t kMaxStalledSteps = 100000;

// The `mixed` workload with shorter reasoning, so that a million requests
// simulate in minutes, and a think cap that the longest ones reach.
sim::WorkloadParams workload(const SoakOptions& o) {
  sim::WorkloadParams p = sim::workload_preset("mixed");
  p.arrival_rate = o.arrival_rate;
  p.duration_s = o.window_s;
  p.reasoning_ratio = 0.5;
  p.think = {384, 0.6, 32, 4096};
  p.answer = {96, 0.5, 8, 1024};
  p.chat_output = {64, 0.5, 4, 1024};
  p.turn_delay_mean_s = 5;
  return p;
}

// Qwen3-8B on a 40 GB card: about 5,000 KV blocks, so that live requests
// press on the pool and preemption, swaps and the prefix cache all take part.
sim::CostModelParams cost_model() {
  sim::CostModelParams p;
  p.gpu_memory_gib = 34;
  return p;
}

MeridianConfig config() {
  MeridianConfig c = MeridianConfig::defaults();
  c.scheduler.min_think_tokens = 128;
  c.scheduler.max_think_tokens = 1536;
  return c;
}

std::uint64_t mix(std::uint64_t x) { return sim::mix64(x); }

struct Live {
  sim::RequestSpec spec;  // id: the request's number in the soak, 1-based
  std::string external_id;
  sim::RequestSignals signals;
  std::optional<EntropyProbe> probe;
  std::uint32_t think_emitted = 0;
  std::uint32_t answer_emitted = 0;
  std::uint32_t cancel_after = 0;  // tokens; 0 = runs to the end
  bool in_think = false;
  bool looked_up = false;  // its first prefix lookup counts in the hit rate
};

struct Arrival {
  std::int64_t at_ns = 0;
  sim::RequestSpec spec;
  bool operator>(const Arrival& o) const { return at_ns != o.at_ns ? at_ns > o.at_ns : spec.id > o.spec.id; }
};

enum class Retire : std::uint8_t { kCompleted, kCancelled, kAborted };

class SoakEngine {
 public:
  explicit SoakEngine(const SoakOptions& o)
      : o_(o),
        config_(config()),
        params_(workload(o)),
        cost_(cost_model()),
        signals_(sim::SignalModelParams{}, o.seed),
        router_(config_.model("qwen3"), RouterLimits::from(config_.scheduler)),
        kv_(kv_options()),
        scheduler_(SchedulerOptions::from_config(config_, kv_.usage().total_blocks),
                   StepCostModel::from_config(config_.scheduler)),
        driver_(scheduler_, kv_,
                [this](RequestId id, std::uint32_t first, std::span<std::uint64_t> out) {
                  for (std::uint32_t i = 0; i < out.size(); ++i) out[i] = block_hash(id, first + i);
                }),
        probe_settings_(ProbeSettings::from(config_)) {
    if (o.requests == 0 || o.checkpoints == 0 || !(o.arrival_rate > 0) || !std::isfinite(o.arrival_rate) ||
        !(o.window_s > 0) || !std::isfinite(o.window_s)) {
      throw InvalidArgument(
          "soak: requests and checkpoints must be >= 1, arrival_rate and window_s finite and > 0");
    }
    limits_.token_budget = 8192;  // vLLM's H100 server defaults, as in [engine]
    limits_.max_sequences = 1024;
    scheduler_.set_prefix_lookup(
        [this](RequestId id, std::uint32_t tokens) { return attach_prefix(id, tokens); });
  }

  SoakResult run() {
    const auto wall_start = std::chrono::steady_clock::now();
    wall_start_ = wall_start;
    std::uint32_t stalled = 0;
    for (;;) {
      refill_workload();
      admit_arrivals();
      if (live_.empty() && arrivals_.empty()) {
        if (!need_more()) break;
        continue;  // the next window
      }
      const StepPlan& plan = driver_.plan(limits_, now_ns_);
      result_.preemptions += plan.preemptions.size();
      for (RequestId id : plan.aborted) retire(id, Retire::kAborted);
      const double ms = step_ms(plan);
      if (ran_ == 0) {
        driver_.complete(ms, now_ns_);
        if (!arrivals_.empty()) {  // idle until the next arrival (or the next window's first)
          std::int64_t next = arrivals_.top().at_ns;
          if (need_more()) next = std::min(next, next_window_ns_);
          now_ns_ = std::max(now_ns_ + 1, next);
          continue;
        }
        if (++stalled > kMaxStalledSteps) {
          result_.stuck = true;
          break;
        }
        now_ns_ += static_cast<std::int64_t>(ms * kNsPerMs);
        continue;
      }
      stalled = 0;
      const std::int64_t end_ns = now_ns_ + std::max<std::int64_t>(std::llround(ms * kNsPerMs), 1);
      driver_.complete(ms, end_ns);
      ++result_.steps;
      now_ns_ = end_ns;
      router_.advance_clock(now_ns_);
      emit_tokens();
    }
    take_checkpoint(1.0);
    return finish(wall_start);
  }

 private:
  [[nodiscard]] KvBlockManagerOptions kv_options() const {
    KvBlockManagerOptions k;
    k.num_blocks = cost_.kv_capacity_blocks(config_.kv_memory.block_tokens);
    k.block_size_bytes = cost_.params().kv_bytes_per_token() * config_.kv_memory.block_tokens;
    k.think_phase_memory_fraction = config_.kv_memory.think_phase_memory_fraction;
    return k;
  }

  // As the replay engine: transcript blocks hash by (conversation, position),
  // so the next turn finds them; everything else is unique to the request.
  [[nodiscard]] std::uint64_t block_hash(RequestId id, std::uint32_t index) const {
    const sim::RequestSpec& r = live_.at(id).spec;
    const std::uint32_t block_tokens = config_.kv_memory.block_tokens;
    if (r.conversation > 0) {
      const std::uint64_t transcript = r.prompt_tokens + (r.reasoning() ? 0U : r.answer_tokens);
      if ((std::uint64_t{index} + 1) * block_tokens <= transcript) {
        return mix(mix(r.conversation * 0x9e3779b97f4a7c15ULL + 1) ^ index);
      }
    }
    return mix(mix(r.id * 0xc2b2ae3d27d4eb4fULL + 2) ^ index);
  }

  std::uint32_t attach_prefix(RequestId id, std::uint32_t tokens) {
    const std::uint32_t block_tokens = config_.kv_memory.block_tokens;
    if (tokens <= 1 || kv_.holds_blocks(id)) return 0;
    hashes_.resize((tokens - 1) / block_tokens);
    for (std::uint32_t i = 0; i < hashes_.size(); ++i) hashes_[i] = block_hash(id, i);
    const std::uint32_t hit = hashes_.empty() ? 0 : kv_.attach_prefix(id, hashes_);
    Live& r = live_.at(id);
    if (!r.looked_up) result_.prefix_hit_blocks += hit;
    r.looked_up = true;
    return hit * block_tokens;
  }

  // Requests that will arrive (later turns of conversations cut short never do).
  [[nodiscard]] bool need_more() const { return generated_ - result_.dropped_follow_ups < o_.requests; }

  // Generates the next window of the workload once simulated time reaches it
  // (or when nothing else is left), until enough requests exist.
  void refill_workload() {
    while (need_more() && (now_ns_ >= next_window_ns_ || (arrivals_.empty() && live_.empty()))) {
      const sim::Workload w = sim::generate_workload(params_, o_.seed * 1'000'003 + windows_);
      std::uint64_t conversations = 0;
      for (sim::RequestSpec spec : w.requests) {
        spec.id += generated_;
        if (spec.after != 0) spec.after += generated_;
        if (spec.conversation != 0) {
          conversations = std::max(conversations, spec.conversation);
          spec.conversation += conversations_;
        }
        if (o_.outgrow_every > 0 && spec.id % o_.outgrow_every == o_.outgrow_every / 2) {
          // Its answer outgrows the whole pool: the scheduler must abort it.
          const std::uint32_t blocks = kv_.usage().total_blocks;
          spec.prompt_tokens = (blocks - 2) * config_.kv_memory.block_tokens;
          spec.answer_tokens = 4 * config_.kv_memory.block_tokens;
        }
        if (spec.after == 0) {
          arrivals_.push({next_window_ns_ + std::llround(spec.arrival_s * kNsPerS), spec});
        } else {
          follow_ups_.emplace(spec.after, spec);
        }
      }
      generated_ += w.requests.size();
      conversations_ += conversations;
      next_window_ns_ += std::llround(o_.window_s * kNsPerS);
      ++windows_;
    }
  }

  void admit_arrivals() {
    while (!arrivals_.empty() && arrivals_.top().at_ns <= now_ns_) {
      const Arrival a = arrivals_.top();
      arrivals_.pop();
      std::string external = fmt::format("soak-{}", a.spec.id);
      const RequestId id = ids_.intern(external);
      Live& r = live_[id];
      r.spec = a.spec;
      r.external_id = std::move(external);
      const bool reasoning = a.spec.reasoning();
      RequestOptions ro;
      ro.thinking_disabled = !reasoning;
      const TokenId tail[] = {kThinkStart};
      const Phase phase =
          router_.begin(id, reasoning ? std::span<const TokenId>(tail) : std::span<const TokenId>{}, ro);
      r.in_think = phase == Phase::kThinkDecode || phase == Phase::kPrefill;
      if (reasoning) {
        r.signals = signals_.plan(a.spec);
        r.probe.emplace(probe_settings_);
      }
      if (o_.cancel_every > 0 && mix(a.spec.id ^ o_.seed) % o_.cancel_every == 0) {
        r.cancel_after = 1 + static_cast<std::uint32_t>(mix(a.spec.id) % 64);
      }
      scheduler_.add(
          {id, r.in_think ? Phase::kThinkDecode : Phase::kOutputDecode, a.spec.prompt_tokens, 0, a.at_ns});
      ++result_.arrived;
    }
  }

  double step_ms(const StepPlan& plan) {
    sim::StepShape shape;
    sampled_.clear();
    ran_ = 0;
    const auto& not_run = driver_.not_run();
    for (const ScheduledWork& w : plan.work) {
      if (std::find(not_run.begin(), not_run.end(), w.id) != not_run.end()) continue;
      ++ran_;
      const double c = w.context_tokens;
      const double n = w.tokens;
      shape.tokens += w.tokens;
      shape.kv_tokens_read += std::uint64_t{w.context_tokens} + w.tokens;
      shape.attended_pairs += n * c + n * (n + 1) / 2;
      if (w.kind == WorkKind::kSwapIn) shape.swap_tokens += w.context_tokens;
      if (w.kind != WorkKind::kPrefill || w.completes_prefill) sampled_.push_back(w.id);
    }
    for (std::size_t i = 0; i < plan.preemptions.size(); ++i) {
      if (plan.preemptions[i].mode == ReclaimMode::kSwap) {
        shape.swap_tokens += std::uint64_t{driver_.released_blocks()[i]} * config_.kv_memory.block_tokens;
      }
    }
    shape.tokens += probe_tokens_;
    shape.kv_tokens_read += probe_kv_tokens_;
    shape.attended_pairs += static_cast<double>(probe_kv_tokens_);
    probe_tokens_ = 0;
    probe_kv_tokens_ = 0;
    return cost_.step_ms(shape);
  }

  void emit_tokens() {
    ids_step_.clear();
    tokens_.clear();
    cancels_.clear();
    for (RequestId id : sampled_) {
      auto it = live_.find(id);
      if (it == live_.end()) continue;
      Live& r = it->second;
      if (r.cancel_after > 0 && r.think_emitted + r.answer_emitted >= r.cancel_after) {
        cancels_.push_back(id);
        continue;
      }
      TokenId token = kAnswerToken;
      if (r.in_think) {
        if (r.think_emitted >= r.spec.think_tokens || router_.end_think_pending(id)) {
          token = kThinkEnd;
        } else {
          token = kThinkToken;
          ++r.think_emitted;
        }
      } else {
        ++r.answer_emitted;
        if (r.answer_emitted >= r.spec.answer_tokens) token = kEos;
      }
      ids_step_.push_back(id);
      tokens_.push_back(token);
    }
    result_.tokens += ids_step_.size();
    events_.resize(ids_step_.size());
    const std::size_t n = router_.on_tokens(ids_step_, tokens_, events_);
    for (std::size_t i = 0; i < n; ++i) on_event(events_[i]);
    observe_signals();
    for (RequestId id : cancels_) {
      router_.end(id);
      scheduler_.finish(id);
      retire(id, Retire::kCancelled);
    }
  }

  void on_event(const PhaseEvent& ev) {
    switch (ev.kind) {
      case PhaseEventKind::kExitThink: {
        Live& r = live_.at(ev.request_id);
        r.in_think = false;
        r.probe.reset();
        scheduler_.set_phase(ev.request_id, Phase::kOutputDecode);
        (void)kv_.demote_think_blocks(ev.request_id);
        break;
      }
      case PhaseEventKind::kComplete:
        scheduler_.finish(ev.request_id);
        retire(ev.request_id, Retire::kCompleted);
        break;
      case PhaseEventKind::kEnterThink:
      case PhaseEventKind::kForceBudget: break;
    }
  }

  // The tokens just generated go to each thinking request's probe; the
  // router forces when the probe says so (as the replay engine does).
  void observe_signals() {
    for (RequestId id : ids_step_) {
      auto it = live_.find(id);
      if (it == live_.end()) continue;
      Live& r = it->second;
      if (!r.in_think || !r.probe || r.think_emitted == 0) continue;
      const std::uint32_t t = r.think_emitted;
      ThinkTokenObservation obs;
      obs.think_tokens = t;
      obs.token_entropy = signals_.token_entropy(r.signals, t - 1);
      if (r.probe->eat_due(t)) {
        obs.eat = EatSample{signals_.eat(r.signals, t - 1), EatSource::kProbePass};
        ++probe_tokens_;  // the probe pass rides on the next step
        probe_kv_tokens_ += std::uint64_t{r.spec.prompt_tokens} + t;
        ++result_.probe_passes;
      }
      const EntropySignal sig = r.probe->observe(obs);
      if (sig.force && *sig.force != ForceReason::kHardCap) router_.request_force(id, *sig.force);
    }
  }

  // The request leaves every component. The scheduler has already dropped
  // it (finish() or its own abort); the router has (EOS, or end() here).
  void retire(RequestId id, Retire why) {
    auto it = live_.find(id);
    if (it == live_.end()) throw Error(fmt::format("soak: request {} retired twice", id));
    Live& r = it->second;
    kv_.release(id, why == Retire::kCompleted ? ReleaseKind::kFinished : ReleaseKind::kAbort);
    if (why == Retire::kAborted) router_.end(id);
    if (ids_.release(r.external_id) != id) throw Error(fmt::format("soak: {} lost its id", r.external_id));
    switch (why) {
      case Retire::kCompleted: {
        ++result_.completed;
        auto next = follow_ups_.find(r.spec.id);
        if (next != follow_ups_.end()) {
          arrivals_.push({now_ns_ + std::llround(next->second.delay_s * kNsPerS), next->second});
          follow_ups_.erase(next);
        }
        break;
      }
      case Retire::kCancelled:
        ++result_.cancelled;
        drop_follow_ups(r.spec.id);
        break;
      case Retire::kAborted:
        ++result_.aborted;
        drop_follow_ups(r.spec.id);
        break;
    }
    live_.erase(it);
    const std::uint64_t retired = result_.completed + result_.cancelled + result_.aborted;
    // Checkpoints 1 .. n-1 as the share of retired requests passes k/n; the last one when all are done.
    while (next_checkpoint_ + 1 < o_.checkpoints &&
           retired * o_.checkpoints >= (next_checkpoint_ + 1) * o_.requests) {
      take_checkpoint(static_cast<double>(next_checkpoint_ + 1) / o_.checkpoints);
    }
  }

  // A conversation whose turn ended early has no later turns.
  void drop_follow_ups(std::uint64_t spec_id) {
    for (auto it = follow_ups_.find(spec_id); it != follow_ups_.end(); it = follow_ups_.find(spec_id)) {
      spec_id = it->second.id;
      follow_ups_.erase(it);
      ++result_.dropped_follow_ups;
    }
  }

  void take_checkpoint(double fraction) {
    Checkpoint c;
    c.fraction = fraction;
    c.retired = result_.completed + result_.cancelled + result_.aborted;
    c.sim_s = static_cast<double>(now_ns_) / kNsPerS;
    c.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start_).count();
    c.rss_bytes = current_rss_bytes();
    c.live = live_.size();
    c.router_tracked = router_.tracked();
    c.scheduled = scheduler_.size();
    c.mapped_ids = ids_.size();
    c.kv_live_blocks = live_blocks();
    result_.checkpoints.push_back(c);
    fmt::print(stderr, "soak: {:.0f}% ({} retired, {:.0f} s simulated, {:.1f} s, {} live)\n", fraction * 100,
               c.retired, c.sim_s, c.wall_s, c.live);
    ++next_checkpoint_;
  }

  [[nodiscard]] std::uint64_t live_blocks() const {
    std::uint64_t live = 0;
    for (std::uint32_t b : kv_.usage().live_blocks) live += b;
    return live;
  }

  SoakResult finish(std::chrono::steady_clock::time_point wall_start) {
    SoakResult& r = result_;
    r.generated = generated_;
    r.sim_s = static_cast<double>(now_ns_) / kNsPerS;
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    r.peak_rss_bytes = peak_rss_bytes();
    r.router = router_.counters();
    r.live = live_.size();
    r.pending_follow_ups = follow_ups_.size();
    r.router_tracked = router_.tracked();
    r.scheduled = scheduler_.size();
    r.mapped_ids = ids_.size();
    const KvBlockUsage u = kv_.usage();
    r.kv_live_blocks = live_blocks();
    r.kv_allocatable_blocks = u.allocatable_blocks;
    r.kv_total_blocks = u.total_blocks;
    r.kv_invariants = kv_.check_invariants();
    return r;
  }

  const SoakOptions& o_;
  MeridianConfig config_;
  sim::WorkloadParams params_;
  sim::RooflineCostModel cost_;
  sim::SignalModel signals_;
  RequestIdMap ids_;
  PhaseRouter router_;
  KvBlockManager kv_;
  DualQueueScheduler scheduler_;
  StepDriver driver_;
  ProbeSettings probe_settings_;
  StepLimits limits_;

  absl::flat_hash_map<RequestId, Live> live_;
  absl::flat_hash_map<std::uint64_t, sim::RequestSpec> follow_ups_;  // by the turn they follow
  std::priority_queue<Arrival, std::vector<Arrival>, std::greater<>> arrivals_;
  std::vector<RequestId> sampled_;
  std::vector<RequestId> ids_step_;
  std::vector<TokenId> tokens_;
  std::vector<PhaseEvent> events_;
  std::vector<RequestId> cancels_;
  std::vector<std::uint64_t> hashes_;
  std::size_t ran_ = 0;  // items of the last plan that got their blocks

  std::int64_t now_ns_ = 0;
  std::int64_t next_window_ns_ = 0;
  std::uint64_t windows_ = 0;
  std::uint64_t generated_ = 0;
  std::uint64_t conversations_ = 0;
  std::uint64_t probe_tokens_ = 0;
  std::uint64_t probe_kv_tokens_ = 0;
  std::uint32_t next_checkpoint_ = 0;
  std::chrono::steady_clock::time_point wall_start_;
  SoakResult result_;
};

std::uint64_t status_kib(std::string_view field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with(field)) return std::stoull(line.substr(field.size())) * 1024;
  }
  return 0;
}

}  // namespace

SoakResult run_soak(const SoakOptions& options) {
  SoakEngine engine(options);
  return engine.run();
}

std::uint64_t current_rss_bytes() { return status_kib("VmRSS:"); }
std::uint64_t peak_rss_bytes() { return status_kib("VmHWM:"); }

}  // namespace meridian::soak
