// One scheduling step (schedule() + complete_step() + the step's phase
// changes, finishes and arrivals) for N running requests, against a naive
// baseline driven by the identical event stream in the same binary
// (docs/benchmarks.md):
//   * NaiveSortScheduler - the obvious design: every request in a
//     std::unordered_map; each step copies them into a vector, stable_sorts it
//     by (phase, last token time), walks it under the same SLO-derived caps and
//     writes progress back through the map.
//   * DualQueueScheduler - Meridian: persistent intrusive queues, work
//     proportional to what the step schedules.
// Each step is timed on its own; p50_us / p99_us counters are per-step
// percentiles (the SPEC target is P99 <= 10 us at 1,024 running requests).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include <benchmark/benchmark.h>

#include "meridian/scheduler.h"
#include "meridian/step_cost_model.h"

namespace {

using meridian::DualQueueScheduler;
using meridian::NewRequest;
using meridian::Phase;
using meridian::RequestId;
using meridian::SchedulerOptions;
using meridian::StepCostCoefficients;
using meridian::StepCostModel;
using meridian::StepLimits;

constexpr std::uint32_t kPromptTokens = 512;
constexpr std::uint32_t kCachedPromptTokens = 496;  // one 16-token chunk left to prefill

StepCostModel cost_model() { return StepCostModel(StepCostCoefficients{}, true, 0.98); }

StepLimits limits_for(std::size_t running) {
  StepLimits limits;
  limits.max_sequences = static_cast<std::uint32_t>(running);
  limits.token_budget = std::max<std::uint32_t>(8192, static_cast<std::uint32_t>(running) + 512);
  return limits;
}

// --- naive baseline --------------------------------------------------------
class NaiveSortScheduler {
 public:
  struct Request {
    RequestId id = 0;
    Phase phase = Phase::kThinkDecode;
    bool running = false;
    std::uint32_t prompt = 0;
    std::uint32_t context = 0;
    std::int64_t arrival_ns = 0;
    std::int64_t last_token_ns = 0;
  };
  struct Work {
    RequestId id = 0;
    std::uint32_t tokens = 0;
  };

  void add(const NewRequest& r) {
    requests_[r.id] = Request{r.id, r.phase, false, r.prompt_tokens, r.cached_prompt_tokens, r.arrival_ns, 0};
  }
  void set_phase(RequestId id, Phase phase) { requests_.at(id).phase = phase; }
  void finish(RequestId id) { requests_.erase(id); }

  // Same policy skeleton as Meridian (answers, due think, capped think,
  // FCFS prefill), without persistent queues.
  double schedule(const StepLimits& limits, std::int64_t now_ns) {
    order_.clear();
    for (auto& [id, r] : requests_) order_.push_back(&r);
    std::stable_sort(order_.begin(), order_.end(), [](const Request* a, const Request* b) {
      const int ra = !a->running ? 2 : a->phase == Phase::kOutputDecode ? 0 : 1;
      const int rb = !b->running ? 2 : b->phase == Phase::kOutputDecode ? 0 : 1;
      if (ra != rb) return ra < rb;
      return ra == 2 ? a->arrival_ns < b->arrival_ns : a->last_token_ns < b->last_token_ns;
    });
    const StepCostCoefficients c = model_.coefficients();
    const double per_decode_ms = c.per_token_ms + c.per_kv_token_us * 1e-3 * kPromptTokens;
    const auto output_budget = static_cast<std::uint32_t>(std::max(1.0, (20.0 - c.base_ms) / per_decode_ms));
    const auto think_cap = static_cast<std::uint32_t>(2.5 * output_budget);
    work_.clear();
    std::uint32_t tokens = 0, think = 0;
    std::uint64_t kv = 0;
    for (Request* r : order_) {
      if (work_.size() >= limits.max_sequences || tokens >= limits.token_budget) break;
      if (!r->running) {
        const std::uint32_t chunk = std::min(r->prompt - r->context, limits.token_budget - tokens);
        work_.push_back({r->id, chunk});
        tokens += chunk;
      } else if (r->phase == Phase::kOutputDecode) {
        work_.push_back({r->id, 1});
        ++tokens;
      } else {
        const bool due = now_ns - r->last_token_ns > 40'000'000;
        if (!due && think >= think_cap) continue;
        work_.push_back({r->id, 1});
        ++tokens;
        ++think;
      }
      kv += r->context;
    }
    predicted_ms_ = model_.predict_ms(tokens, kv);
    batch_ = work_.size();
    tokens_ = tokens;
    kv_ = kv;
    return predicted_ms_;
  }

  void complete_step(double observed_ms, std::int64_t end_ns) {
    model_.observe(tokens_, kv_, observed_ms);
    for (const Work& w : work_) {
      Request& r = requests_.at(w.id);
      r.context += w.tokens;
      if (r.context >= r.prompt) r.running = true;
      r.last_token_ns = end_ns;
    }
  }

 private:
  std::unordered_map<RequestId, Request> requests_;
  std::vector<Request*> order_;
  std::vector<Work> work_;
  StepCostModel model_ = cost_model();
  double predicted_ms_ = 0;
  std::uint64_t tokens_ = 0, kv_ = 0;

 public:
  std::size_t batch_ = 0;
};

// --- Meridian adapter with the same interface ---------------------------------
class MeridianScheduler {
 public:
  MeridianScheduler() : scheduler_(options(), cost_model()) {}

  void add(const NewRequest& r) { scheduler_.add(r); }
  void set_phase(RequestId id, Phase phase) { scheduler_.set_phase(id, phase); }
  void finish(RequestId id) { scheduler_.finish(id); }
  double schedule(const StepLimits& limits, std::int64_t now_ns) {
    const auto& plan = scheduler_.schedule(limits, now_ns);
    batch_ = plan.work.size();
    return plan.stats.predicted_step_ms;
  }
  std::size_t batch_ = 0;
  void complete_step(double observed_ms, std::int64_t end_ns) {
    scheduler_.complete_step(observed_ms, end_ns);
  }

 private:
  static SchedulerOptions options() {
    SchedulerOptions o;
    o.preemption_enabled = false;  // KV is unlimited in this workload
    return o;
  }
  DualQueueScheduler scheduler_;
};

// --- the shared workload ------------------------------------------------------
// N live requests, a quarter answering. Every step ~N/256 think requests reach
// </think> and as many answering requests finish, replaced by new arrivals
// (prefix-cached prompts, one prefill chunk), so the mix stays steady.
template <typename Scheduler>
class Workload {
 public:
  explicit Workload(std::size_t running) : limits_(limits_for(running)), rng_(7) {
    churn_ = std::max<std::size_t>(1, running / 256);
    for (std::size_t i = 0; i < running; ++i) {
      const Phase phase = i % 4 == 0 ? Phase::kOutputDecode : Phase::kThinkDecode;
      add(phase);
    }
    // Warm up: prefill everyone and let the cost model settle.
    for (int i = 0; i < 64; ++i) step();
  }

  void step() {
    for (std::size_t i = 0; i < churn_; ++i) {
      const std::size_t t = pick(think_);
      scheduler_.set_phase(think_[t], Phase::kOutputDecode);
      answer_.push_back(think_[t]);
      remove(think_, t);
      const std::size_t a = pick(answer_);
      scheduler_.finish(answer_[a]);
      remove(answer_, a);
      add(Phase::kThinkDecode);
    }
    const double ms = scheduler_.schedule(limits_, now_ns_);
    now_ns_ += static_cast<std::int64_t>(ms * 1e6);
    scheduler_.complete_step(ms, now_ns_);
    batch_total_ += scheduler_.batch_;
  }
  std::uint64_t batch_total_ = 0;

 private:
  void add(Phase phase) {
    const RequestId id = next_id_++;
    scheduler_.add(NewRequest{id, phase, kPromptTokens, kCachedPromptTokens, now_ns_});
    (phase == Phase::kOutputDecode ? answer_ : think_).push_back(id);
  }
  std::size_t pick(const std::vector<RequestId>& ids) {
    return std::uniform_int_distribution<std::size_t>(0, ids.size() - 1)(rng_);
  }
  static void remove(std::vector<RequestId>& ids, std::size_t i) {
    ids[i] = ids.back();
    ids.pop_back();
  }

  Scheduler scheduler_;
  StepLimits limits_;
  std::mt19937_64 rng_;
  std::size_t churn_ = 1;
  std::vector<RequestId> think_, answer_;
  RequestId next_id_ = 1;
  std::int64_t now_ns_ = 1'000'000;
};

template <typename Scheduler>
void run_steps(benchmark::State& state) {
  Workload<Scheduler> workload(static_cast<std::size_t>(state.range(0)));
  std::vector<double> step_us;
  step_us.reserve(1U << 16U);
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    workload.step();
    const auto end = std::chrono::steady_clock::now();
    step_us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
  }
  std::sort(step_us.begin(), step_us.end());
  const auto at = [&](double q) {
    return step_us[static_cast<std::size_t>(q * static_cast<double>(step_us.size() - 1))];
  };
  state.counters["p50_us"] = at(0.50);
  state.counters["p99_us"] = at(0.99);
  state.counters["batch"] =
      benchmark::Counter(static_cast<double>(workload.batch_total_), benchmark::Counter::kAvgIterations);
  state.SetItemsProcessed(state.iterations());
}

void BM_NaiveSchedulerStep(benchmark::State& state) { run_steps<NaiveSortScheduler>(state); }
BENCHMARK(BM_NaiveSchedulerStep)->Arg(64)->Arg(1024)->Arg(8192);

void BM_SchedulerStep(benchmark::State& state) { run_steps<MeridianScheduler>(state); }
BENCHMARK(BM_SchedulerStep)->Arg(64)->Arg(1024)->Arg(8192);

}  // namespace
