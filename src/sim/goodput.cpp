// The goodput search (replay_study.h): per policy and seed, the highest
// arrival rate whose run meets the ruler (sustainable_ruler.h), the vllm-best
// sweep over vLLM's settings, and each policy's physical upper bound
// (capacity_bound.h). Runs are independent, so searches go to worker threads;
// each result lands in its own slot.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <tuple>
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

// The vLLM setting whose runs are exactly `policy`'s runs on `engine` (the
// tuned and priority baselines are settings of the vllm-best grid), if any.
std::optional<VllmSetting> setting_of(PolicyKind policy, const EngineParams& engine) {
  VllmSetting v;
  v.long_prefill_token_threshold = engine.long_prefill_token_threshold;
  switch (policy) {
    case PolicyKind::kVllmFcfs: v.max_num_batched_tokens = engine.max_num_batched_tokens; break;
    case PolicyKind::kVllmFcfsTuned: v.max_num_batched_tokens = engine.tuned_max_num_batched_tokens; break;
    case PolicyKind::kVllmPriority:
      v.max_num_batched_tokens = engine.max_num_batched_tokens;
      v.priority = true;
      break;
    default: return std::nullopt;
  }
  // The setting caps max_num_seqs at its token budget (VllmSetting::apply); the run is the same
  // only where the engine's cap already holds.
  if (engine.max_num_seqs > v.max_num_batched_tokens) return std::nullopt;
  return v;
}

// vllm-best's screen runs every setting once at this multiple of vLLM's default goodput.
constexpr double kScreenAboveReference = 1.05;
// GoodputOptions::start_from_bound: the first seed's search starts at this share of the bound.
constexpr double kBoundStart = 0.75;

// How well a setting fared in the screen, for ranking: meeting the ruler first, then the worst
// class's attainment, then the least backlog growth.
std::tuple<int, double, double> screen_score(const std::optional<AttainmentPoint>& p) {
  if (!p) return {-1, 0, 0};
  return {p->meets ? 1 : 0, std::min(p->chat_pct, p->reasoning_pct), p->backlog_mid - p->backlog_end};
}

void set_bounds(PolicyGoodput& g, const ReplayParams& params) {
  g.bounds.clear();
  std::vector<double> rates;
  std::vector<double> fractions;
  for (std::size_t s = 0; s < g.points.size(); ++s) {
    const double goodput = s < g.goodput_rps.per_seed.size() ? g.goodput_rps.per_seed[s] : 0.0;
    // The run at the goodput, else (no rate met the ruler) the lowest rate run.
    const AttainmentPoint* p = g.at_goodput(s);
    if (p == nullptr && !g.points[s].empty()) {
      p = &*std::ranges::min_element(g.points[s], {}, &AttainmentPoint::rate);
    }
    const CapacityBound b =
        p != nullptr ? capacity_bound(params.cost_model, params.slo, p->work) : CapacityBound{};
    g.bounds.push_back(b);
    rates.push_back(b.rate);
    fractions.push_back(b.rate > 0 ? goodput / b.rate : 0.0);
  }
  g.upper_bound_rps = seed_stat(std::move(rates));
  g.fraction_of_bound = seed_stat(std::move(fractions));
}

}  // namespace

bool PolicyGoodput::above_bound() const noexcept {
  for (std::size_t s = 0; s < bounds.size() && s < goodput_rps.per_seed.size(); ++s) {
    if (bounds[s].rate > 0 && goodput_rps.per_seed[s] > bounds[s].rate) return true;
  }
  return false;
}

const AttainmentPoint* PolicyGoodput::at_goodput(std::size_t seed) const noexcept {
  if (seed >= points.size() || seed >= goodput_rps.per_seed.size()) return nullptr;
  const double goodput = goodput_rps.per_seed[seed];
  if (goodput <= 0) return nullptr;
  for (const AttainmentPoint& p : points[seed]) {
    if (p.meets && p.rate == goodput) return &p;
  }
  return nullptr;
}

AttainmentPoint attainment_point(double rate, const ReplayResult& run, const Workload& workload) {
  const RunVerdict& v = run.verdict;
  AttainmentPoint p;
  p.rate = rate;
  p.attainment_pct = v.attainment_pct;
  p.chat_pct = v.chat.pct();
  p.reasoning_pct = v.reasoning.pct();
  p.stopped_early = run.stopped_early;
  p.meets = v.meets;
  p.sustainable = v.sustainable();
  p.reason = v.reason;
  p.backlog_mid = v.backlog.mid;
  p.backlog_end = v.backlog.end;
  p.backlog_work_mid = v.backlog.work_mid;
  p.backlog_work_end = v.backlog.work_end;
  p.work = conversation_work(workload, run.think_tokens);
  return p;
}

double search_goodput(const std::function<AttainmentPoint(double, bool)>& attainment, double base_rate,
                      const GoodputOptions& search, std::vector<AttainmentPoint>& points, bool* at_least) {
  double lo = 0;                                        // highest rate that met the ruler before hi
  double hi = std::numeric_limits<double>::infinity();  // lowest rate that did not
  for (double factor : search.grid) {
    const double rate = base_rate * factor;
    AttainmentPoint p = attainment(rate, true);
    p.scan = true;
    points.push_back(p);
    if (p.meets) {
      if (!std::isfinite(hi)) lo = rate;
    } else if (!std::isfinite(hi)) {
      hi = rate;
    }
    if (!p.meets && p.attainment_pct < search.plot_floor_pct) break;
  }
  // Never failed on the grid: keep doubling (a few times) to bracket the knee.
  constexpr int kMaxDoublings = 5;
  for (int i = 0; i < kMaxDoublings && !std::isfinite(hi) && !points.empty(); ++i) {
    const double rate = 2 * points.back().rate;
    AttainmentPoint p = attainment(rate, true);
    p.scan = true;
    points.push_back(p);
    (p.meets ? lo : hi) = rate;
  }
  if (at_least != nullptr) *at_least = !std::isfinite(hi);
  if (!std::isfinite(hi)) return lo;
  constexpr int kMaxBisections = 30;
  for (int i = 0; i < kMaxBisections && hi - lo > search.rel_tolerance * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    const AttainmentPoint p = attainment(mid, false);
    points.push_back(p);
    (p.meets ? lo : hi) = mid;
  }
  return lo;
}

double seeded_search(const std::function<AttainmentPoint(double, bool)>& attainment, double base_rate,
                     const GoodputOptions& search, std::vector<AttainmentPoint>& points, bool* at_least) {
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
  if (!measure(base_rate, false).meets) {
    // Down to the first factor that meets the ruler; the scan then brackets the knee.
    double above = 1.0;
    scan.grid = {kSeededScanDown.back()};
    for (double f : kSeededScanDown) {
      if (measure(base_rate * f, false).meets) {
        scan.grid = {f, above};
        break;
      }
      above = f;
    }
  }
  return search_goodput(measure, base_rate, scan, points, at_least);
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
  out.window_s = o.params.workload.duration_s;
  out.seeds = o.seeds;
  out.search = search;
  // Every search: one per policy, and one per setting for vllm-best. The sweep's settings' scans
  // stop at their first failure (their points are not plotted), and all but its reference (vLLM's
  // default setting) start from the reference's goodput per seed: they are near it. A policy
  // whose runs are a setting's runs (vllm-fcfs, vllm-fcfs-tuned, vllm-priority on the default
  // [engine]) shares that setting's search instead of running its own.
  struct Search {
    PolicyKind policy;
    ReplayParams params;
    GoodputOptions options;
    PolicyGoodput result;
    bool seeded = false;                   // phase 2: scans from the reference's goodput (seeded_search)
    std::optional<std::size_t> same_as{};  // the sweep entry whose search this one is
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
    quick.plot_floor_pct = 100;  // not plotted: a scan stops at its first failure
    for (const VllmSetting& v : settings) {
      searches.push_back({v.policy(), v.apply(o.params), quick, {}, !(v == VllmSetting{})});
    }
  }
  // The reference: vLLM's default setting. When vllm-fcfs's runs are its runs, vllm-fcfs's
  // (plotted) search stands for it; the other shared baselines read their setting's search.
  std::size_t reference = searches.size();
  std::size_t reference_from = searches.size();
  if (sweep) {
    for (std::size_t k = 0; k < settings.size(); ++k) {
      if (settings[k] == VllmSetting{}) reference = sweep_first + k;
    }
    for (std::size_t q = 0; q < searches.size(); ++q) {
      if (q >= sweep_first && q < sweep_first + settings.size()) continue;
      const auto v = setting_of(searches[q].policy, o.params.engine);
      if (!v) continue;
      const auto it = std::find(settings.begin(), settings.end(), *v);
      if (it == settings.end()) continue;
      const std::size_t entry = sweep_first + static_cast<std::size_t>(it - settings.begin());
      if (entry == reference && searches[q].policy == PolicyKind::kVllmFcfs) {
        reference_from = q;
      } else {
        searches[q].same_as = entry;
      }
    }
  }
  const std::size_t seeds = o.seeds.size();
  for (Search& q : searches) {
    q.result.policy = q.policy;
    q.result.at_least.assign(seeds, false);
    q.result.points.resize(seeds);
  }
  std::vector<std::vector<double>> goodput(searches.size(), std::vector<double>(seeds, 0));
  // Not vector<bool>: workers write neighbouring seeds at once, and its bits share words.
  std::vector<std::vector<char>> at_least(searches.size(), std::vector<char>(seeds, 0));
  std::vector<std::vector<char>> measured(searches.size(), std::vector<char>(seeds, 0));
  std::atomic<std::uint64_t> runs{0};
  Progress progress(o.progress, searches.size() * seeds);  // counts (search, seed) pairs
  // One search of one seed, from `base`: seeded_search() when base > 0 (a scan from where the
  // goodput is expected), else the grid scan from the base rate.
  auto run_search = [&](std::size_t index, std::size_t s, double base) {
    Search& q = searches[index];
    auto attainment = [&](double rate, bool /*for_plot*/) {
      ReplayParams params = q.params;
      params.workload.arrival_rate = rate;
      const Workload w = generate_workload(params.workload, o.seeds[s]);
      ReplayOptions ro = replay_options(o, q.policy, params, o.seeds[s]);
      ro.ruler = q.options.ruler;
      ro.stop_when_decided = true;  // the search needs only the verdict
      const ReplayResult r = run_replay(w, ro);
      ++runs;
      return attainment_point(rate, r, w);
    };
    bool reached = false;
    std::vector<AttainmentPoint>& points = q.result.points[s];
    if (base > 0) {
      goodput[index][s] = seeded_search(attainment, base, q.options, points, &reached);
      for (AttainmentPoint& p : points) p.scan = false;  // its rates are not the grid's
    } else {  // the grid scan's points are at the same rates for every policy: the plotted ones
      goodput[index][s] = search_goodput(attainment, out.base_rate, q.options, points, &reached);
    }
    at_least[index][s] = reached ? 1 : 0;
    measured[index][s] = 1;
    progress.tick();
  };
  auto run_all = [&](const std::vector<std::pair<std::size_t, std::size_t>>& jobs, auto&& base_of) {
    parallel_for(jobs.size(), o.threads, [&](std::size_t i) {
      run_search(jobs[i].first, jobs[i].second, base_of(jobs[i].first, jobs[i].second));
    });
  };
  // Phase 1: the first seed of every unseeded search, by the grid scan (the reference's own only if
  // vllm-fcfs does not stand for it). Phase 2: its other seeds, each seeded from that first seed's
  // goodput: seeds move a policy's goodput by a few percent, so a few runs find it there. Shared
  // searches run in neither; vllm-best's finalists run in phase 3.
  std::vector<std::size_t> unseeded;
  std::vector<std::size_t> sweep_rest;
  for (std::size_t q = 0; q < searches.size(); ++q) {
    if (searches[q].same_as || (q == reference && reference_from < searches.size())) continue;
    (searches[q].seeded ? sweep_rest : unseeded).push_back(q);
  }
  std::vector<std::pair<std::size_t, std::size_t>> jobs;
  jobs.reserve(unseeded.size());
  for (std::size_t q : unseeded) jobs.emplace_back(q, 0);
  // The first seed starts near where the answer is expected: a share of the physical bound for
  // the workload's natural work (policies' goodputs on record sit at 0.7-0.9 of their bound),
  // or, without it, the grid scan from the base rate.
  double first_base = 0;
  if (search.start_from_bound) {
    const Workload w = generate_workload(o.params.workload, o.seeds[0]);
    first_base = kBoundStart * capacity_bound(o.params.cost_model, o.params.slo, conversation_work(w)).rate;
  }
  run_all(jobs, [&](std::size_t, std::size_t) { return first_base; });
  // vllm-best: every other setting is screened by one run on the first seed, just above the
  // reference's goodput there (where vLLM's default stops meeting the ruler), while phase 2 runs;
  // the settings that fare best go on (phase 3) to a full search on every seed, seeded from the
  // reference's goodput. vllm_best_finalists = 0: every setting, full search, every seed.
  std::vector<std::optional<AttainmentPoint>> screen(searches.size());
  const bool screening =
      sweep && search.vllm_best_finalists > 0 && settings.size() > search.vllm_best_finalists;
  std::vector<std::function<void()>> tasks;
  for (std::size_t q : unseeded) {
    for (std::size_t s = 1; s < seeds; ++s) {
      tasks.emplace_back([&, q, s] { run_search(q, s, goodput[q][0]); });
    }
  }
  if (screening) {
    const std::size_t ref = reference_from < searches.size() ? reference_from : reference;
    const double screen_rate =
        (goodput[ref][0] > 0 ? goodput[ref][0] : out.base_rate) * kScreenAboveReference;
    for (std::size_t index : sweep_rest) {
      tasks.emplace_back([&, index, screen_rate] {
        Search& q = searches[index];
        ReplayParams params = q.params;
        params.workload.arrival_rate = screen_rate;
        const Workload w = generate_workload(params.workload, o.seeds[0]);
        ReplayOptions ro = replay_options(o, q.policy, params, o.seeds[0]);
        ro.ruler = q.options.ruler;
        const ReplayResult r = run_replay(w, ro);  // to the end: the screen ranks, it does not stop
        ++runs;
        screen[index] = attainment_point(screen_rate, r, w);
      });
    }
  }
  parallel_for(tasks.size(), o.threads, [&](std::size_t i) { tasks[i](); });
  auto share = [&](std::size_t to, std::size_t from) {
    goodput[to] = goodput[from];
    at_least[to] = at_least[from];
    measured[to] = measured[from];
    searches[to].result.points = searches[from].result.points;
    for (std::size_t s = 0; s < seeds; ++s) progress.tick();
  };
  if (reference < searches.size() && reference_from < searches.size()) share(reference, reference_from);
  std::vector<std::size_t> finalists;
  if (sweep) {
    for (std::size_t k = 0; k < settings.size(); ++k) finalists.push_back(sweep_first + k);
    if (screening) {
      std::erase_if(finalists, [&](std::size_t q) { return q == reference; });
      std::stable_sort(finalists.begin(), finalists.end(), [&](std::size_t x, std::size_t y) {
        return screen_score(screen[x]) > screen_score(screen[y]);
      });
      finalists.resize(search.vllm_best_finalists);
    }
    // The reference stays (vllm-fcfs's own search), and so does every setting another baseline
    // reads (vllm-fcfs-tuned, vllm-priority): their goodput is over every seed.
    auto keep = [&](std::size_t q) {
      if (std::find(finalists.begin(), finalists.end(), q) == finalists.end()) finalists.push_back(q);
    };
    keep(reference);
    for (const Search& q : searches) {
      if (q.same_as) keep(*q.same_as);
    }
    for (std::size_t k = 0; k < settings.size(); ++k) {  // screened out: their share of the progress
      if (std::find(finalists.begin(), finalists.end(), sweep_first + k) != finalists.end()) continue;
      for (std::size_t s = 0; s < seeds; ++s) progress.tick();
    }
  }
  jobs.clear();
  for (std::size_t q : finalists) {
    for (std::size_t s = 0; s < seeds; ++s) {
      if (!measured[q][s]) jobs.emplace_back(q, s);
    }
  }
  run_all(jobs, [&](std::size_t, std::size_t s) { return goodput[reference][s]; });
  for (std::size_t q = 0; q < searches.size(); ++q) {
    if (searches[q].same_as) share(q, *searches[q].same_as);
  }
  for (Search& q : searches) {
    const auto index = static_cast<std::size_t>(&q - searches.data());
    std::vector<double> values;
    for (std::size_t s = 0; s < seeds; ++s) {
      if (measured[index][s]) values.push_back(goodput[index][s]);
      q.result.at_least[s] = at_least[index][s] != 0;
    }
    if (values.size() < seeds) {  // screened out of the vllm-best finals: no search
      q.result.points.clear();
      q.result.at_least.clear();
    }
    q.result.goodput_rps = seed_stat(std::move(values));
    set_bounds(q.result, o.params);
  }
  if (sweep) {
    VllmBestSweep best;
    std::size_t winner = finalists.empty() ? 0 : finalists.front() - sweep_first;
    for (std::size_t k = 0; k < settings.size(); ++k) {
      const std::size_t q = sweep_first + k;
      const bool finalist = std::find(finalists.begin(), finalists.end(), q) != finalists.end();
      best.settings.push_back({settings[k], searches[q].result, finalist, screen[q]});
      // The winner: the finalist with the highest mean goodput over every seed (the first on a tie).
      if (finalist && (best.settings[k].goodput.goodput_rps.mean >
                           searches[sweep_first + winner].result.goodput_rps.mean ||
                       (best.settings[k].goodput.goodput_rps.mean ==
                            searches[sweep_first + winner].result.goodput_rps.mean &&
                        k < winner))) {
        winner = k;
      }
    }
    best.winner = winner;
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

}  // namespace meridian::sim
