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
#include "sim/study_util.h"

namespace meridian::sim {
namespace {

using detail::elapsed_s;
using detail::parallel_for;
using detail::Progress;
using detail::replay_options;

// One workload per seed (the trace, when there is one), made in parallel and
// shared read-only by that seed's runs.
std::vector<Workload> seed_workloads(const StudyOptions& o) {
  std::vector<Workload> workloads(o.seeds.size());
  parallel_for(workloads.size(), o.threads, [&](std::size_t s) {
    workloads[s] = o.trace ? *o.trace : generate_workload(o.params.workload, o.seeds[s]);
  });
  return workloads;
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
