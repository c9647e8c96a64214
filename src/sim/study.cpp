// Multi-seed runs, the goodput search and the forcing Pareto sweep
// (replay_study.h). Runs are independent, so they go to worker threads; each
// result lands in its own slot, so the output never depends on the order in
// which threads finish.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "meridian/replay_study.h"
#include "sync/mutex.h"

namespace meridian::sim {
namespace {

// The first exception any worker threw.
class FirstError {
 public:
  void record(std::exception_ptr error) {
    const sync::Lock lock(mu_);
    if (!error_) error_ = std::move(error);
  }
  void rethrow() {
    const sync::Lock lock(mu_);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  sync::Mutex mu_;
  std::exception_ptr error_ ABSL_GUARDED_BY(mu_);
};

// Runs fn(i) for i in [0, count) on `threads` workers; rethrows the first exception.
template <typename Fn>
void parallel_for(std::size_t count, unsigned threads, Fn&& fn) {
  if (threads == 0) threads = std::max(1U, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, std::max<std::size_t>(count, 1)));
  std::atomic<std::size_t> next{0};
  FirstError error;
  auto worker = [&] {
    for (std::size_t i = next++; i < count; i = next++) {
      try {
        fn(i);
      } catch (...) {
        error.record(std::current_exception());
        next = count;  // stop handing out work
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  error.rethrow();
}

// Serialised progress reporting from worker threads.
class Progress {
 public:
  Progress(const std::function<void(double)>& fn, std::size_t total) : fn_(fn), total_(total) {}
  void tick() {
    if (!fn_) return;
    const sync::Lock lock(mutex_);
    ++done_;
    fn_(total_ == 0 ? 1.0 : std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_)));
  }

 private:
  const std::function<void(double)>& fn_;
  std::size_t total_;
  sync::Mutex mutex_;
  std::size_t done_ ABSL_GUARDED_BY(mutex_) = 0;
};

// One workload per seed (the trace, when there is one), made in parallel and
// shared read-only by that seed's runs.
std::vector<Workload> seed_workloads(const StudyOptions& o) {
  std::vector<Workload> workloads(o.seeds.size());
  parallel_for(workloads.size(), o.threads, [&](std::size_t s) {
    workloads[s] = o.trace ? *o.trace : generate_workload(o.params.workload, o.seeds[s]);
  });
  return workloads;
}

// The run behind `policy`: vllm-best is its chosen setting's vLLM policy with that setting's [engine] values.
ReplayOptions replay_options(const StudyOptions& o, PolicyKind policy, const ReplayParams& params,
                             std::uint64_t seed) {
  ReplayOptions ro;
  ro.policy = policy;
  ro.config = o.config;
  ro.model = o.model;
  ro.params = params;
  ro.seed = seed;
  if (policy == PolicyKind::kVllmBest) {
    if (!o.vllm_best) {
      throw InvalidArgument(
          "vllm-best has no setting yet: the goodput search picks it (find_goodput() with vllm-best, "
          "`meridian replay --goodput`)");
    }
    ro.policy = o.vllm_best->policy();
    ro.params = o.vllm_best->apply(params);
  }
  return ro;
}

// Only the first seed's samples, series and outcomes make it into a report
// (report.json's CDFs and time series); the other seeds keep their metrics,
// so a study's memory does not grow with its seeds x per-token samples.
void drop_samples(ReplayResult& r) {
  r.series = {};
  r.ttft_ms = {};
  r.ttot_ms = {};
  r.ttfv_ms = {};
  r.output_itl_ms = {};
  r.think_tpot_ms = {};
  r.e2e_ms = {};
  r.outcomes = {};
}

double elapsed_s(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

double t_quantile_95(std::size_t dof) noexcept {
  // Two-sided 95% (0.975 quantile) of Student's t.
  static constexpr double kTable[] = {0,     12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365,
                                      2.306, 2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
                                      2.120, 2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069,
                                      2.064, 2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  constexpr std::size_t kRows = sizeof(kTable) / sizeof(kTable[0]);
  if (dof == 0) return 0;
  if (dof < kRows) return kTable[dof];
  if (dof < 60) return 2.000;
  if (dof < 120) return 1.980;
  return 1.960;
}

SeedStat seed_stat(std::vector<double> values) {
  SeedStat s;
  s.per_seed = std::move(values);
  const auto n = s.per_seed.size();
  if (n == 0) return s;
  double sum = 0;
  for (double v : s.per_seed) sum += v;
  s.mean = sum / static_cast<double>(n);
  double half = 0;
  if (n > 1) {
    double ss = 0;
    for (double v : s.per_seed) ss += (v - s.mean) * (v - s.mean);
    const double sd = std::sqrt(ss / static_cast<double>(n - 1));
    half = t_quantile_95(n - 1) * sd / std::sqrt(static_cast<double>(n));
  }
  s.ci_low = s.mean - half;
  s.ci_high = s.mean + half;
  return s;
}

std::vector<PolicyRuns> run_seeds(const std::vector<PolicyKind>& policies, const StudyOptions& o) {
  validate(o.params);
  const std::size_t seeds = o.seeds.size();
  std::vector<PolicyRuns> out(policies.size());
  for (std::size_t p = 0; p < policies.size(); ++p) {
    out[p].policy = policies[p];
    out[p].seeds.resize(seeds);
  }
  const std::vector<Workload> workloads = seed_workloads(o);
  Progress progress(o.progress, policies.size() * seeds);
  parallel_for(policies.size() * seeds, o.threads, [&](std::size_t i) {
    const std::size_t p = i / seeds;
    const std::size_t s = i % seeds;
    ReplayOptions ro = replay_options(o, policies[p], o.params, o.seeds[s]);
    if (s == 0 && policies[p] == o.observed_policy) {
      ro.metrics = o.metrics;
      ro.on_time = o.on_time;
    }
    ReplayResult r = run_replay(workloads[s], ro);
    r.policy = policies[p];  // vllm-best ran as its setting's policy
    if (s > 0) drop_samples(r);
    out[p].seeds[s] = std::move(r);
    progress.tick();
  });
  return out;
}

SeedStat metric_stat(const PolicyRuns& runs, std::string_view metric) {
  std::vector<double> v;
  v.reserve(runs.seeds.size());
  for (const ReplayResult& r : runs.seeds) v.push_back(r.metric(metric));
  return seed_stat(std::move(v));
}

SeedStat delta_stat(const PolicyRuns& candidate, const PolicyRuns& baseline, std::string_view metric) {
  std::vector<double> v;
  const std::size_t n = std::min(candidate.seeds.size(), baseline.seeds.size());
  for (std::size_t s = 0; s < n; ++s) {
    // A baseline of 0 makes the seed's delta infinite; it stays in, so the
    // mean says "undefined" instead of quietly averaging the other seeds.
    v.push_back(delta_pct(candidate.seeds[s].metric(metric), baseline.seeds[s].metric(metric)));
  }
  return seed_stat(std::move(v));
}

// ---- Goodput ----------------------------------------------------------------

double search_goodput(const std::function<AttainmentPoint(double, bool)>& attainment, double base_rate,
                      double target_pct, const GoodputOptions& search, std::vector<AttainmentPoint>& points,
                      bool* at_least) {
  double lo = 0;                                        // highest rate that met the target before hi
  double hi = std::numeric_limits<double>::infinity();  // lowest rate that did not
  for (double factor : search.grid) {
    const double rate = base_rate * factor;
    AttainmentPoint p = attainment(rate, true);
    p.scan = true;
    points.push_back(p);
    if (p.attainment_pct >= target_pct) {
      if (!std::isfinite(hi)) lo = rate;
    } else if (!std::isfinite(hi)) {
      hi = rate;
    }
    if (p.attainment_pct < search.plot_floor_pct) break;
  }
  // Never failed on the grid: keep doubling (a few times) to bracket the knee.
  constexpr int kMaxDoublings = 5;
  for (int i = 0; i < kMaxDoublings && !std::isfinite(hi) && !points.empty(); ++i) {
    const double rate = 2 * points.back().rate;
    AttainmentPoint p = attainment(rate, true);
    p.scan = true;
    points.push_back(p);
    (p.attainment_pct >= target_pct ? lo : hi) = rate;
  }
  if (at_least != nullptr) *at_least = !std::isfinite(hi);
  if (!std::isfinite(hi)) return lo;
  constexpr int kMaxBisections = 30;
  for (int i = 0; i < kMaxBisections && hi - lo > search.rel_tolerance * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    const AttainmentPoint p = attainment(mid, false);
    points.push_back(p);
    (p.attainment_pct >= target_pct ? lo : hi) = mid;
  }
  return lo;
}

const PolicyGoodput* GoodputResult::find(PolicyKind policy) const noexcept {
  for (const PolicyGoodput& p : policies) {
    if (p.policy == policy) return &p;
  }
  return nullptr;
}

std::optional<SeedStat> GoodputResult::ratio(PolicyKind candidate, PolicyKind baseline) const {
  const PolicyGoodput* c = find(candidate);
  const PolicyGoodput* b = find(baseline);
  if (c == nullptr || b == nullptr) return std::nullopt;
  std::vector<double> v;
  const std::size_t n = std::min(c->goodput_rps.per_seed.size(), b->goodput_rps.per_seed.size());
  for (std::size_t s = 0; s < n; ++s) {
    if (b->goodput_rps.per_seed[s] > 0) v.push_back(c->goodput_rps.per_seed[s] / b->goodput_rps.per_seed[s]);
  }
  if (v.empty()) return std::nullopt;
  return seed_stat(std::move(v));
}

std::string VllmSetting::label() const {
  return fmt::format("max_num_batched_tokens={} long_prefill_token_threshold={} {}", max_num_batched_tokens,
                     long_prefill_token_threshold, priority ? "priority" : "fcfs");
}

ReplayParams VllmSetting::apply(ReplayParams params) const {
  params.engine.max_num_batched_tokens = max_num_batched_tokens;
  params.engine.long_prefill_token_threshold = long_prefill_token_threshold;
  // vLLM refuses max_num_batched_tokens < max_num_seqs ("must be greater than or equal to
  // max_num_seqs"): a deployment with a smaller token budget runs at most that many sequences.
  params.engine.max_num_seqs = std::min(params.engine.max_num_seqs, max_num_batched_tokens);
  return params;
}

double seeded_search(const std::function<AttainmentPoint(double, bool)>& attainment, double base_rate,
                     double target_pct, const GoodputOptions& search, std::vector<AttainmentPoint>& points,
                     bool* at_least) {
  // Each rate runs once: the probes below are read again when the scan reaches them.
  std::vector<AttainmentPoint> seen;
  auto measure = [&](double rate, bool for_plot) {
    for (const AttainmentPoint& p : seen) {
      if (p.rate == rate) return p;
    }
    seen.push_back(attainment(rate, for_plot));
    return seen.back();
  };
  GoodputOptions scan = search;
  scan.grid.assign(kSeededScanUp.begin(), kSeededScanUp.end());
  if (measure(base_rate, false).attainment_pct < target_pct) {
    // Down to the first factor that meets the target; the scan then brackets the knee.
    double above = 1.0;
    scan.grid = {kSeededScanDown.back()};
    for (double f : kSeededScanDown) {
      if (measure(base_rate * f, false).attainment_pct >= target_pct) {
        scan.grid = {f, above};
        break;
      }
      above = f;
    }
  }
  return search_goodput(measure, base_rate, target_pct, scan, points, at_least);
}

std::vector<VllmSetting> vllm_best_settings() {
  std::vector<VllmSetting> out;
  for (bool priority : {false, true}) {
    for (std::uint32_t budget : {512U, 1024U, 2048U, 4096U, 8192U}) {
      for (std::uint32_t threshold : {0U, 256U, 1024U}) {
        if (threshold >= budget) continue;  // cannot cut a chunk: the schedule of threshold 0
        out.push_back({budget, threshold, priority});
      }
    }
  }
  return out;
}

GoodputResult find_goodput(const std::vector<PolicyKind>& policies, const StudyOptions& o,
                           const GoodputOptions& search) {
  validate(o.params);
  if (o.trace) {
    throw InvalidArgument("the goodput search varies the synthetic arrival rate; it cannot use a trace");
  }
  if (search.grid.empty() || !std::is_sorted(search.grid.begin(), search.grid.end()) ||
      search.grid.front() <= 0 || !(search.rel_tolerance > 0)) {
    throw InvalidArgument("goodput search: the grid must be ascending and positive, the tolerance > 0");
  }
  const auto start = std::chrono::steady_clock::now();
  GoodputResult out;
  out.slo = o.params.slo;
  out.base_rate = o.params.workload.arrival_rate;
  out.seeds = o.seeds;
  out.search = search;
  // Every search: one per policy, and one per setting for vllm-best. The sweep's settings
  // run only down to the target (their points are not plotted), and all but its reference
  // (vLLM's default setting) start from the reference's goodput per seed: they are near it.
  struct Search {
    PolicyKind policy;
    ReplayParams params;
    GoodputOptions options;
    PolicyGoodput result;
    bool seeded = false;  // phase 2: scans from the reference's goodput (seeded_search)
  };
  std::vector<Search> searches;
  const std::vector<VllmSetting> settings = vllm_best_settings();
  std::size_t sweep_first = 0;
  bool sweep = false;
  for (PolicyKind p : policies) {
    if (p != PolicyKind::kVllmBest) {
      searches.push_back({p, o.params, search, {}});
      continue;
    }
    if (sweep) continue;  // named twice: one sweep
    sweep = true;
    sweep_first = searches.size();
    GoodputOptions quick = search;
    quick.plot_floor_pct = o.params.slo.attainment_pct;
    for (const VllmSetting& v : settings) {
      searches.push_back({v.policy(), v.apply(o.params), quick, {}, !(v == VllmSetting{})});
    }
  }
  const std::size_t seeds = o.seeds.size();
  for (Search& q : searches) {
    q.result.policy = q.policy;
    q.result.at_least.assign(seeds, false);
    q.result.points.resize(seeds);
  }
  // The reference: vLLM's default setting, the same runs as vllm-fcfs when that is searched
  // on the same [engine] values (then its search is shared, not run twice).
  std::size_t reference = searches.size();
  std::size_t same_as_reference = searches.size();
  if (sweep) {
    for (std::size_t k = 0; k < settings.size(); ++k) {
      if (settings[k] == VllmSetting{}) reference = sweep_first + k;
    }
    const EngineParams& e = o.params.engine;
    for (std::size_t q = 0; q < sweep_first; ++q) {
      if (searches[q].policy == PolicyKind::kVllmFcfs &&
          e.max_num_batched_tokens == VllmSetting{}.max_num_batched_tokens &&
          e.long_prefill_token_threshold == 0) {
        same_as_reference = q;
      }
    }
  }
  std::vector<std::vector<double>> goodput(searches.size(), std::vector<double>(seeds, 0));
  // Not vector<bool>: workers write neighbouring seeds at once, and its bits share words.
  std::vector<std::vector<char>> at_least(searches.size(), std::vector<char>(seeds, 0));
  std::atomic<std::uint64_t> runs{0};
  // Progress counts (search, seed) pairs.
  Progress progress(o.progress, searches.size() * seeds);
  const double target = o.params.slo.attainment_pct;
  auto run_search = [&](std::size_t index, std::size_t s) {
    Search& q = searches[index];
    auto attainment = [&](double rate, bool for_plot) {
      ReplayParams params = q.params;
      params.workload.arrival_rate = rate;
      const Workload w = generate_workload(params.workload, o.seeds[s]);
      ReplayOptions ro = replay_options(o, q.policy, params, o.seeds[s]);
      // Stop once the threshold is out of reach: every unresolved request
      // would have to meet its SLO, and more than the allowed share already missed.
      const double threshold = for_plot ? std::min(q.options.plot_floor_pct, target) : target;
      ro.stop_after_slo_misses = static_cast<std::uint64_t>(
          std::floor(static_cast<double>(w.requests.size()) * (100.0 - threshold) / 100.0));
      const ReplayResult r = run_replay(w, ro);
      ++runs;
      return AttainmentPoint{rate, r.metric("slo_attainment_pct"), r.metric("slo_attainment_chat_pct"),
                             r.metric("slo_attainment_reasoning_pct"), r.stopped_early};
    };
    bool reached = false;
    const double seed_base = q.seeded ? goodput[reference][s] : 0;
    goodput[index][s] =
        seed_base > 0
            ? seeded_search(attainment, seed_base, target, q.options, q.result.points[s], &reached)
            : search_goodput(attainment, out.base_rate, target, q.options, q.result.points[s], &reached);
    at_least[index][s] = reached ? 1 : 0;
    progress.tick();
  };
  // Phase 1: every unseeded search (the reference's own only if vllm-fcfs does not stand for it).
  std::vector<std::size_t> first;
  std::vector<std::size_t> second;
  for (std::size_t q = 0; q < searches.size(); ++q) {
    if (q == reference && same_as_reference < searches.size()) continue;
    (searches[q].seeded ? second : first).push_back(q);
  }
  parallel_for(first.size() * seeds, o.threads,
               [&](std::size_t i) { run_search(first[i / seeds], i % seeds); });
  if (reference < searches.size() && same_as_reference < searches.size()) {
    goodput[reference] = goodput[same_as_reference];
    at_least[reference] = at_least[same_as_reference];
    searches[reference].result.points = searches[same_as_reference].result.points;
    for (std::size_t s = 0; s < seeds; ++s) progress.tick();
  }
  parallel_for(second.size() * seeds, o.threads,
               [&](std::size_t i) { run_search(second[i / seeds], i % seeds); });
  for (std::size_t q = 0; q < searches.size(); ++q) {
    searches[q].result.goodput_rps = seed_stat(goodput[q]);
    for (std::size_t s = 0; s < seeds; ++s) searches[q].result.at_least[s] = at_least[q][s] != 0;
  }
  if (sweep) {
    VllmBestSweep best;
    for (std::size_t k = 0; k < settings.size(); ++k) {
      best.settings.push_back({settings[k], searches[sweep_first + k].result});
      if (best.settings[k].goodput.goodput_rps.mean > best.settings[best.winner].goodput.goodput_rps.mean) {
        best.winner = k;
      }
    }
    out.vllm_best = std::move(best);
  }
  for (std::size_t q = 0; q < searches.size();) {
    if (sweep && q == sweep_first) {
      PolicyGoodput winner = out.vllm_best->settings[out.vllm_best->winner].goodput;
      winner.policy = PolicyKind::kVllmBest;
      out.policies.push_back(std::move(winner));
      q += settings.size();
      continue;
    }
    out.policies.push_back(std::move(searches[q].result));
    ++q;
  }
  out.runs = runs;
  out.wall_s = elapsed_s(start);
  return out;
}

// ---- Pareto -----------------------------------------------------------------

std::vector<ParetoSetting> default_pareto_settings(const MeridianConfig& config) {
  std::vector<ParetoSetting> out;
  for (std::uint32_t budget : {1024U, 1536U, 2048U, 3072U, 4096U, 6144U, 8192U, 12288U, 16384U}) {
    ParetoSetting s;
    s.policy = PolicyKind::kStaticBudget;
    s.label = fmt::format("budget {}", budget);
    s.thinking_budget = budget;
    out.push_back(s);
  }
  auto meridian = [&](std::string label, auto&& tweak) {
    ParetoSetting s;
    s.policy = PolicyKind::kMeridian;
    s.label = std::move(label);
    s.entropy = config.entropy;
    tweak(s.entropy);
    out.push_back(s);
  };
  const EntropyConfig& e = config.entropy;
  meridian(fmt::format("configured (rpdi {}, alpha {}, probe {})", e.rpdi_threshold, e.ema_alpha,
                       e.eat_probe_interval_tokens),
           [](EntropyConfig&) {});
  // The original Meridian's thresholds (ADR-0016 changed them), and each change alone.
  meridian("seeds' (rpdi 3, alpha 0.05, probe 32)", [](EntropyConfig& c) {
    c.rpdi_threshold = 3.0;
    c.ema_alpha = 0.05;
    c.eat_probe_interval_tokens = 32;
  });
  meridian("rpdi 3 (the paper's)", [](EntropyConfig& c) { c.rpdi_threshold = 3.0; });
  meridian("rpdi 4", [](EntropyConfig& c) { c.rpdi_threshold = 4.0; });
  meridian("slow EAT (alpha 0.05, probe 32)", [](EntropyConfig& c) {
    c.ema_alpha = 0.05;
    c.eat_probe_interval_tokens = 32;
  });
  return out;
}

std::optional<double> ParetoResult::static_curve_at(double saved_pct) const {
  std::vector<std::pair<double, double>> curve;  // (saved, forced before answer)
  for (const ParetoPoint& p : points) {
    if (p.setting.policy == PolicyKind::kStaticBudget) {
      curve.emplace_back(p.think_tokens_saved_pct.mean, p.forced_before_answer_pct.mean);
    }
  }
  std::sort(curve.begin(), curve.end());
  for (std::size_t i = 1; i < curve.size(); ++i) {
    const auto [x0, y0] = curve[i - 1];
    const auto [x1, y1] = curve[i];
    if (saved_pct >= x0 && saved_pct <= x1) {
      return x1 > x0 ? y0 + (y1 - y0) * (saved_pct - x0) / (x1 - x0) : std::min(y0, y1);
    }
  }
  return std::nullopt;
}

ParetoResult run_pareto(const std::vector<ParetoSetting>& settings, const StudyOptions& o) {
  validate(o.params);
  const auto start = std::chrono::steady_clock::now();
  const std::size_t seeds = o.seeds.size();
  const std::vector<Workload> workloads = seed_workloads(o);
  std::vector<std::vector<ReplayResult>> results(settings.size(), std::vector<ReplayResult>(seeds));
  Progress progress(o.progress, settings.size() * seeds);
  parallel_for(settings.size() * seeds, o.threads, [&](std::size_t i) {
    const ParetoSetting& setting = settings[i / seeds];
    const std::size_t s = i % seeds;
    ReplayParams params = o.params;
    if (setting.policy == PolicyKind::kStaticBudget) {
      params.engine.thinking_token_budget = setting.thinking_budget;
    }
    ReplayOptions ro = replay_options(o, setting.policy, params, o.seeds[s]);
    if (setting.policy == PolicyKind::kMeridian) ro.config.entropy = setting.entropy;
    results[i / seeds][s] = run_replay(workloads[s], ro);
    progress.tick();
  });
  ParetoResult out;
  out.seeds = o.seeds;
  for (std::size_t k = 0; k < settings.size(); ++k) {
    PolicyRuns runs{settings[k].policy, std::move(results[k])};
    out.points.push_back({settings[k], metric_stat(runs, "think_tokens_saved_pct"),
                          metric_stat(runs, "forced_before_answer_pct"), metric_stat(runs, "forced_pct")});
  }
  out.runs = settings.size() * seeds;
  out.wall_s = elapsed_s(start);
  return out;
}

}  // namespace meridian::sim
