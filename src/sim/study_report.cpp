// Reports of multi-seed studies: ab-report.{json,md}, goodput.{json,md},
// pareto.{json,md}, and the SPEC §5 target checks.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "meridian/replay_study.h"
#include "sim/report_util.h"

namespace meridian::sim {
namespace {

using detail::finite;
using detail::fmt_value;
using nlohmann::ordered_json;

using detail::number;
using detail::stat_json;

ordered_json targets_json(const std::vector<TargetCheck>& checks) {
  ordered_json targets = ordered_json::array();
  for (const TargetCheck& t : checks) {
    targets.push_back({{"name", t.name},
                       {"goal", t.goal},
                       {"value", t.available ? number(t.value.mean) : ordered_json(nullptr)},
                       {"ci95", t.available ? ordered_json({number(t.value.ci_low), number(t.value.ci_high)})
                                            : ordered_json(nullptr)},
                       {"met", t.met},
                       {"available", t.available}});
  }
  return targets;
}

const PolicyRuns* find_runs(const std::vector<PolicyRuns>& runs, PolicyKind p) {
  for (const PolicyRuns& r : runs) {
    if (r.policy == p) return &r;
  }
  return nullptr;
}

const MetricInfo& info_of(std::string_view name) {
  for (const MetricInfo& m : metric_catalog()) {
    if (m.name == name) return m;
  }
  throw NotFound(fmt::format("no metric \"{}\"", name));
}

// Only Meridian has ThinkComplete / ThinkActive tiers; a baseline's value is not a measurement.
bool metric_applies(PolicyKind policy, std::string_view metric) {
  return is_meridian(policy) || (metric != "evictions_think_complete" && metric != "evictions_think_active");
}

std::size_t seed_count(const std::vector<PolicyRuns>& runs) {
  return runs.empty() ? 0 : runs.front().seeds.size();
}

// "12.3 ±0.4" (mean and half-width of the 95% interval), or just the mean for one seed.
std::string cell(const SeedStat& s) {
  if (s.per_seed.size() < 2) return fmt_value(s.mean);
  return fmt::format("{} ±{}", fmt_value(s.mean), fmt_value(0.5 * (s.ci_high - s.ci_low)));
}

std::string delta_cell(const SeedStat& d, Better better) {
  if (d.per_seed.empty()) return "n/a";
  if (!std::isfinite(d.mean)) {
    const auto zero =
        std::count_if(d.per_seed.begin(), d.per_seed.end(), [](double v) { return !std::isfinite(v); });
    return fmt::format("n/a: baseline 0 in {} of {} seeds {}", zero, d.per_seed.size(),
                       delta_flag(d.mean, better));
  }
  std::string out = fmt::format("{:+.1f}%", d.mean);
  if (d.per_seed.size() > 1) out += fmt::format(" ±{:.1f}", 0.5 * (d.ci_high - d.ci_low));
  out += fmt::format(" {}", delta_flag(d.mean, better));
  // A flagged change whose interval includes no change is not a result.
  if (d.per_seed.size() > 1 && d.crosses_zero() && std::fabs(d.mean) >= detail::kFlatPct) out += " †";
  return out;
}

// The rows printed first: what an operator decides on.
constexpr std::string_view kHeadline[] = {
    "slo_attainment_pct",
    "slo_attainment_chat_pct",
    "slo_attainment_reasoning_pct",
    "ttft_p95_ms",
    "ttfv_chat_p95_ms",
    "ttfv_reasoning_p95_ms",
    "ttot_p95_ms",
    "output_tpot_p95_ms",
    "output_itl_p99_ms",
    "think_tpot_p99_ms",
    "preemptions",
    "preempted_answer_phase",
    "think_tokens_saved_pct",
    "forced_before_answer_pct",
    "prefix_hit_rate",
};

struct DeltaColumn {
  PolicyKind candidate;
  PolicyKind baseline;
};

std::string table(const std::vector<PolicyRuns>& runs, const std::vector<std::string_view>& metrics) {
  std::vector<DeltaColumn> columns;
  for (PolicyKind cand : {PolicyKind::kMeridian, PolicyKind::kMeridianNoForcing}) {
    for (PolicyKind base : {PolicyKind::kVllmFcfs, PolicyKind::kVllmFcfsTuned}) {
      if (find_runs(runs, cand) != nullptr && find_runs(runs, base) != nullptr) {
        columns.push_back({cand, base});
      }
    }
  }
  std::string out = "| metric |";
  for (const PolicyRuns& r : runs) out += fmt::format(" {} |", to_string(r.policy));
  for (const DeltaColumn& c : columns) {
    out += fmt::format(" {} Δ% vs {} |", to_string(c.candidate), to_string(c.baseline));
  }
  out += "\n|---|";
  for (std::size_t i = 0; i < runs.size() + columns.size(); ++i) out += "---:|";
  out += "\n";
  for (std::string_view name : metrics) {
    const MetricInfo& info = info_of(name);
    out += fmt::format("| {} |", info.label);
    for (const PolicyRuns& r : runs) {
      out += metric_applies(r.policy, name) ? fmt::format(" {} |", cell(metric_stat(r, name))) : " — |";
    }
    for (const DeltaColumn& c : columns) {
      if (info.better == Better::kNeither) {
        out += " |";
        continue;
      }
      out += fmt::format(
          " {} |", delta_cell(delta_stat(*find_runs(runs, c.candidate), *find_runs(runs, c.baseline), name),
                              info.better));
    }
    out += "\n";
  }
  return out;
}

std::string seeds_text(const std::vector<std::uint64_t>& seeds) {
  std::string out;
  for (std::uint64_t s : seeds) out += fmt::format("{}{}", out.empty() ? "" : ", ", s);
  return out;
}

std::string slo_text(const SloParams& slo) {
  const std::string ttfv =
      slo.ttfv_ms > 0 ? fmt::format(", TTFV ≤ {} ms (reasoning requests)", slo.ttfv_ms) : "";
  return fmt::format("TTFT ≤ {} ms{}, output TPOT ≤ {} ms, think TPOT ≤ {} ms; target {}% of requests",
                     slo.ttft_ms, ttfv, slo.output_tpot_ms, slo.think_tpot_ms, slo.attainment_pct);
}

std::string target_row(const TargetCheck& t) {
  if (!t.available) return fmt::format("| {} | {} | (runs missing) | - |\n", t.name, t.goal);
  if (!std::isfinite(t.value.mean)) {
    return fmt::format("| {} | {} | n/a: the baseline is 0 on some seed | {} |\n", t.name, t.goal,
                       t.met ? "yes" : "**no**");
  }
  const std::string unit = t.percent ? "%" : "";
  std::string measured = t.percent ? fmt::format("{:+.1f}%", t.value.mean) : fmt_value(t.value.mean);
  if (t.value.per_seed.size() > 1) {
    measured +=
        fmt::format(" [{}{}, {}{}]", fmt_value(t.value.ci_low), unit, fmt_value(t.value.ci_high), unit);
  }
  return fmt::format("| {} | {} | {} | {} |\n", t.name, t.goal, measured, t.met ? "yes" : "**no**");
}

}  // namespace

std::vector<TargetCheck> check_targets(const std::vector<PolicyRuns>& runs) {
  std::vector<TargetCheck> out;
  const PolicyRuns* fcfs = find_runs(runs, PolicyKind::kVllmFcfs);
  const PolicyRuns* mer = find_runs(runs, PolicyKind::kMeridian);
  const PolicyRuns* nof = find_runs(runs, PolicyKind::kMeridianNoForcing);
  // delta_pct(candidate, vllm-fcfs) of `metric` compared with `goal` by `cmp`.
  auto vs_fcfs = [&](std::string name, const PolicyRuns* cand, std::string_view metric, std::string goal,
                     auto&& met) {
    TargetCheck t{std::move(name), std::move(goal), {}, false, fcfs != nullptr && cand != nullptr, true};
    if (t.available) {
      t.value = delta_stat(*cand, *fcfs, metric);
      t.met = met(t.value.mean);
    }
    out.push_back(std::move(t));
  };
  auto own = [&](std::string name, const PolicyRuns* cand, std::string_view metric, std::string goal,
                 bool pct, auto&& met) {
    TargetCheck t{std::move(name), std::move(goal), {}, false, cand != nullptr, pct};
    if (t.available) {
      t.value = metric_stat(*cand, metric);
      t.met = met(t.value.mean);
    }
    out.push_back(std::move(t));
  };
  // The seeds' latency targets for Meridian with forcing.
  vs_fcfs("ttot_p95_vs_vllm_fcfs", mer, "ttot_p95_ms", "<= -60%", [](double v) { return v <= -60; });
  vs_fcfs("output_itl_p99_vs_vllm_fcfs", mer, "output_itl_p99_ms", "<= -50%",
          [](double v) { return v <= -50; });
  // Scheduling alone (SPEC §5): meridian-no-forcing at the A/B rate.
  vs_fcfs("ttft_p95_no_forcing_vs_vllm_fcfs", nof, "ttft_p95_ms", "<= +5%", [](double v) { return v <= 5; });
  vs_fcfs("ttfv_p95_no_forcing_vs_vllm_fcfs", nof, "ttfv_p95_ms", "<= +5%", [](double v) { return v <= 5; });
  vs_fcfs("output_itl_p99_no_forcing_vs_vllm_fcfs", nof, "output_itl_p99_ms", "< 0%",
          [](double v) { return v < 0; });
  {
    TargetCheck t{"preemptions_no_forcing_vs_vllm_fcfs", "<= vllm-fcfs", {}, false,
                  fcfs != nullptr && nof != nullptr,     false};
    if (t.available) {
      std::vector<double> diff;
      for (std::size_t s = 0; s < std::min(nof->seeds.size(), fcfs->seeds.size()); ++s) {
        diff.push_back(nof->seeds[s].metric("preemptions") - fcfs->seeds[s].metric("preemptions"));
      }
      t.value = seed_stat(diff);
      t.met = t.value.mean <= 0;
    }
    out.push_back(std::move(t));
  }
  own("answer_phase_preemptions_no_forcing", nof, "preempted_answer_phase", "== 0", false,
      [](double v) { return v == 0; });
  vs_fcfs("think_throughput_cost_vs_vllm_fcfs", nof, "think_throughput_tokens_per_s", ">= -5%",
          [](double v) { return v >= -5; });
  own("output_critical_eviction_events", mer, "output_critical_eviction_events", "== 0", false,
      [](double v) { return v == 0; });
  own("think_tokens_saved_by_forcing", mer, "think_tokens_saved_pct", ">= 15%", true,
      [](double v) { return v >= 15; });
  own("forced_before_answer", mer, "forced_before_answer_pct", "<= 1%", true,
      [](double v) { return v <= 1; });
  return out;
}

std::vector<TargetCheck> check_goodput_targets(const GoodputResult& result) {
  std::vector<TargetCheck> out;
  {
    // The ruler's own check: a policy above its physical bound is a bug in the ruler or the bound.
    std::vector<double> above;
    for (const PolicyGoodput& p : result.policies) above.push_back(p.above_bound() ? 1.0 : 0.0);
    TargetCheck t{"policies_above_physical_bound", "== 0", seed_stat({0}), false,
                  !result.policies.empty(),        false};
    double count = 0;
    for (double v : above) count += v;
    t.value = seed_stat({count});
    t.met = count == 0;
    out.push_back(std::move(t));
  }
  auto ratio = [&](std::string name, PolicyKind base, double goal) {
    if (result.find(base) == nullptr) return;
    const auto r = result.ratio(PolicyKind::kMeridianNoForcing, base);
    TargetCheck t{std::move(name), fmt::format(">= {}x", goal), {}, false, r.has_value(), false};
    if (r) {
      t.value = *r;
      t.met = r->mean >= goal;
    }
    out.push_back(std::move(t));
  };
  ratio("goodput_no_forcing_vs_vllm_fcfs", PolicyKind::kVllmFcfs, 1.0);
  ratio("goodput_no_forcing_vs_vllm_best", PolicyKind::kVllmBest, 1.0);
  ratio("goodput_no_forcing_vs_pascal", PolicyKind::kPascal, 1.0);
  if (const PolicyGoodput* nof = result.find(PolicyKind::kMeridianNoForcing)) {
    TargetCheck t{
        "goodput_no_forcing_share_of_physical_bound", ">= 0.9", nof->fraction_of_bound, false, true, false};
    t.met = nof->fraction_of_bound.mean >= 0.9;
    out.push_back(std::move(t));
  }
  return out;
}

bool WindowAgreement::agree() const noexcept {
  return std::fabs(ratio - 1.0) * 100.0 <= kWindowAgreementPct + 1e-9;
}

std::vector<WindowAgreement> window_agreement(const GoodputResult& window, const GoodputResult& doubled) {
  std::vector<WindowAgreement> out;
  for (const PolicyGoodput& p : window.policies) {
    const PolicyGoodput* d = doubled.find(p.policy);
    if (d == nullptr) continue;
    WindowAgreement a{p.policy, p.goodput_rps.mean, d->goodput_rps.mean, 1.0, {}};
    std::vector<double> paired;
    for (std::size_t s = 0; s < p.goodput_rps.per_seed.size() && s < d->goodput_rps.per_seed.size(); ++s) {
      if (p.goodput_rps.per_seed[s] > 0) {
        paired.push_back(d->goodput_rps.per_seed[s] / p.goodput_rps.per_seed[s]);
      }
    }
    a.per_seed = seed_stat(std::move(paired));
    if (a.at_window > 0) {
      a.ratio = a.at_double / a.at_window;
    } else if (a.at_double > 0) {
      a.ratio = std::numeric_limits<double>::infinity();
    }
    out.push_back(a);
  }
  return out;
}

std::string ab_report_json(const std::vector<PolicyRuns>& runs, const ReportContext& context) {
  ordered_json j;
  j["schema_version"] = 2;
  j["context"] = detail::context_json(context);
  ordered_json means;
  ordered_json intervals;
  for (const PolicyRuns& r : runs) {
    ordered_json m;
    ordered_json iv;
    for (const MetricInfo& info : metric_catalog()) {
      const SeedStat s = metric_stat(r, info.name);
      m[std::string(info.name)] = finite(s.mean);
      iv[std::string(info.name)] = stat_json(s);
    }
    means[std::string(to_string(r.policy))] = m;
    intervals[std::string(to_string(r.policy))] = iv;
  }
  j["runs"] = means;
  j["intervals"] = intervals;
  ordered_json deltas;
  for (const PolicyRuns& base : runs) {
    if (is_meridian(base.policy)) continue;
    ordered_json per;
    for (const PolicyRuns& cand : runs) {
      if (cand.policy == base.policy) continue;
      ordered_json m;
      for (const MetricInfo& info : metric_catalog()) {
        if (info.better == Better::kNeither) continue;
        const SeedStat d = delta_stat(cand, base, info.name);
        ordered_json entry = stat_json(d);
        entry["delta_pct"] = d.per_seed.empty() ? ordered_json(nullptr) : number(d.mean);
        entry["flag"] = delta_flag(d.mean, info.better);
        entry["crosses_zero"] = d.per_seed.size() > 1 && d.crosses_zero();
        m[std::string(info.name)] = entry;
      }
      per[std::string(to_string(cand.policy))] = m;
    }
    deltas[std::string(to_string(base.policy))] = per;
  }
  j["deltas"] = deltas;
  j["targets"] = targets_json(check_targets(runs));
  return j.dump(1) + "\n";
}

std::string ab_report_markdown(const std::vector<PolicyRuns>& runs, const ReportContext& context) {
  const std::size_t seeds = seed_count(runs);
  std::string out = "# Meridian A/B replay\n\n";
  out += fmt::format(
      "Workload `{}`: {} requests (first seed), arrival rate {} conversations/s, reasoning ratio {}, "
      "{} seed{} ({}).  \n",
      context.workload, context.requests, context.params.workload.arrival_rate,
      context.params.workload.reasoning_ratio, seeds, seeds == 1 ? "" : "s",
      seeds_text(context.seeds.empty() ? std::vector<std::uint64_t>{context.seed} : context.seeds));
  out += fmt::format("SLO: {}.  \n", slo_text(context.params.slo));
  out +=
      "Simulated: a roofline model of Qwen3-8B-class bf16 on one H100 (docs/replay.md); not a measurement. "
      "Cells are the mean over seeds ± the half-width of its 95% interval; Δ% is the paired per-seed delta. "
      "TTOT is one engine step after `</think>` (an ITL sample); TTFV is what a person waits for. "
      "Forced-before-answer is a proxy from the signal model, not a measured accuracy.\n\n";
  out += "## Headline\n\n";
  out += table(runs, {std::begin(kHeadline), std::end(kHeadline)});
  out +=
      "\n## SPEC §5 targets at this rate\n\n| target | goal | measured [95% interval] | met "
      "|\n|---|---|---:|---|\n";
  for (const TargetCheck& t : check_targets(runs)) out += target_row(t);
  out += fmt::format(
      "\nFlags: WIN/LOSS at >= {:.0f}% change, win/loss at >= {:.0f}%, FLAT below. † the 95% interval of the "
      "paired per-seed delta crosses zero: the sign is not established. — not applicable (a baseline has one "
      "KV "
      "tier).\n",
      detail::kWinPct, detail::kFlatPct);
  out += "\n## All metrics\n\n";
  std::vector<std::string_view> all;
  for (const MetricInfo& m : metric_catalog()) all.push_back(m.name);
  out += table(runs, all);
  return out;
}

namespace {
ordered_json setting_json(const VllmSetting& v) {
  return {{"label", v.label()},
          {"max_num_batched_tokens", v.max_num_batched_tokens},
          {"long_prefill_token_threshold", v.long_prefill_token_threshold},
          {"scheduling_policy", v.priority ? "priority" : "fcfs"}};
}
}  // namespace

std::string goodput_json(const GoodputResult& g, const ReportContext& context, const GoodputResult* doubled) {
  ordered_json j;
  j["schema_version"] = 2;
  j["context"] = detail::context_json(context);
  j["slo"] = {{"ttft_ms", g.slo.ttft_ms},
              {"ttfv_ms", g.slo.ttfv_ms},
              {"output_tpot_ms", g.slo.output_tpot_ms},
              {"think_tpot_ms", g.slo.think_tpot_ms}};
  j["attainment_target_pct"] = g.slo.attainment_pct;
  j["ruler"] = detail::ruler_json(g.search.ruler);
  j["rate_unit"] = "new conversations per second (the --arrival-rate unit)";
  j["window_s"] = g.window_s;
  j["seeds"] = g.seeds;
  j["search"] = {
      {"start", g.search.start_from_bound ? "0.75 of the physical bound (first seed), then the first "
                                            "seed's goodput"
                                          : "grid scan from base_rate (first seed), then the first "
                                            "seed's goodput"},
      {"base_rate", g.base_rate},
      {"grid_factors", g.search.grid},
      {"rel_tolerance", g.search.rel_tolerance},
      {"plot_floor_pct", g.search.plot_floor_pct},
      {"vllm_best_finalists", g.search.vllm_best_finalists},
      {"runs", g.runs},
      {"wall_s", g.wall_s}};
  j["physical_bound"] =
      "the highest rate whose work (the policy's own, per conversation) the cost model's GPU could serve at "
      "step times the SLO allows with perfect packing and no queueing (docs/replay.md#the-physical-bound)";
  ordered_json policies;
  for (const PolicyGoodput& p : g.policies) {
    ordered_json e = detail::policy_goodput_json(p, g.seeds, true);
    if (p.policy == PolicyKind::kVllmBest && g.vllm_best) e["setting"] = setting_json(g.vllm_best->best());
    policies[std::string(to_string(p.policy))] = e;
  }
  j["policies"] = policies;
  if (g.vllm_best) {
    ordered_json sweep = ordered_json::array();
    for (const VllmBestSweep::Entry& entry : g.vllm_best->settings) {
      ordered_json e = setting_json(entry.setting);
      e["finalist"] = entry.finalist;
      e["goodput_rps"] =
          entry.finalist ? ordered_json(finite(entry.goodput.goodput_rps.mean)) : ordered_json(nullptr);
      e["per_seed"] = entry.goodput.goodput_rps.per_seed;
      e["at_least"] = entry.goodput.at_least;
      if (entry.screen) {
        e["screen"] = {{"rate", entry.screen->rate},
                       {"meets", entry.screen->meets},
                       {"chat_pct", entry.screen->chat_pct},
                       {"reasoning_pct", entry.screen->reasoning_pct},
                       {"backlog_mid", entry.screen->backlog_mid},
                       {"backlog_end", entry.screen->backlog_end}};
      }
      sweep.push_back(e);
    }
    j["vllm_best"] = {
        {"winner", setting_json(g.vllm_best->best())},
        {"rule", fmt::format("every setting screened by one run on the first seed at 1.05x vLLM's default "
                             "goodput there; the {} that fared best and vLLM's default searched on every "
                             "seed; the winner: the highest mean goodput of those",
                             g.search.vllm_best_finalists)},
        {"settings", sweep}};
  }
  ordered_json ratios;
  for (PolicyKind cand : {PolicyKind::kMeridian, PolicyKind::kMeridianNoForcing}) {
    ordered_json per;
    for (PolicyKind base : {PolicyKind::kVllmFcfs, PolicyKind::kVllmFcfsTuned, PolicyKind::kVllmPriority,
                            PolicyKind::kStaticBudget, PolicyKind::kVllmBest, PolicyKind::kPascal}) {
      if (const auto r = g.ratio(cand, base)) per[std::string(to_string(base))] = stat_json(*r);
    }
    if (!per.empty()) ratios[std::string(to_string(cand))] = per;
  }
  j["ratios"] = ratios;
  if (doubled != nullptr) {
    ordered_json check;
    check["window_s"] = g.window_s;
    check["doubled_window_s"] = doubled->window_s;
    check["agreement_pct"] = kWindowAgreementPct;
    ordered_json per;
    bool all = true;
    for (const WindowAgreement& a : window_agreement(g, *doubled)) {
      per[std::string(to_string(a.policy))] = {{"goodput_rps", finite(a.at_window)},
                                               {"doubled_goodput_rps", finite(a.at_double)},
                                               {"ratio", number(a.ratio)},
                                               {"per_seed_ratio", stat_json(a.per_seed)},
                                               {"agree", a.agree()}};
      all = all && a.agree();
    }
    check["policies"] = per;
    check["all_agree"] = all;
    check["doubled"] = ordered_json::parse(goodput_json(*doubled, context));
    j["window_check"] = check;
  }
  j["targets"] = targets_json(check_goodput_targets(g));
  return j.dump(1) + "\n";
}

std::string goodput_markdown(const GoodputResult& g, const GoodputResult* doubled) {
  std::string out = "# Goodput\n\n";
  const bool sustainable = g.search.ruler == Ruler::kSustainable;
  out += fmt::format(
      "The highest arrival rate (new conversations/s) {} ({}); {} s of first-turn arrivals per run, found "
      "per "
      "seed {} and bisection to {:.0f}%; {} seeds ({}), {} runs in {:.1f} s. "
      "Cells: mean [95% interval]; ratios are paired per seed. The bound is the physical upper bound for the "
      "policy's own work (perfect packing, no queueing, steps no longer than the SLO allows).\n\n",
      sustainable
          ? fmt::format("the server sustains with each class at >= {}% of its requests within the SLO",
                        g.slo.attainment_pct)
          : fmt::format("at which >= {}% of all requests, pooled, meet the SLO (the retired ruler)",
                        g.slo.attainment_pct),
      slo_text(g.slo), g.window_s,
      g.search.start_from_bound
          ? std::string(
                "by a scan from 0.75 of the physical bound (the first seed) or from the first seed's goodput")
          : fmt::format("by a grid scan from {} conversations/s", g.base_rate),
      100 * g.search.rel_tolerance, g.seeds.size(), seeds_text(g.seeds), g.runs, g.wall_s);
  if (sustainable) {
    out +=
        "Sustainable: every request completes; each class meets the target on its own (conversations started "
        "after the window's first quarter, the warm-up); those started in its last quarter meet it too; and "
        "the conversations in progress, and the tokens they have still to generate, are no more over the "
        "last "
        "quarter than over the second, within noise (docs/replay.md#the-ruler).\n\n";
  }
  const bool best = g.find(PolicyKind::kVllmBest) != nullptr;
  out += "| policy | goodput (conv/s) | per seed | × vllm-fcfs |";
  if (best) out += " × vllm-best |";
  out +=
      " physical bound (conv/s) | share of bound | at goodput: chat % / reasoning % / pooled % "
      "|\n|---|---:|---|---:|";
  if (best) out += "---:|";
  out += "---:|---:|---|\n";
  auto ratio_cell = [&](PolicyKind cand, PolicyKind base) -> std::string {
    const auto r = g.ratio(cand, base);
    if (!r) return "n/a";
    std::string c = fmt::format("{:.2f}", r->mean);
    if (r->per_seed.size() > 1) c += fmt::format(" [{:.2f}, {:.2f}]", r->ci_low, r->ci_high);
    return c;
  };
  for (const PolicyGoodput& p : g.policies) {
    std::string per;
    for (std::size_t s = 0; s < p.goodput_rps.per_seed.size(); ++s) {
      per += fmt::format("{}{}{:.3g}", per.empty() ? "" : ", ",
                         s < p.at_least.size() && p.at_least[s] ? "≥" : "", p.goodput_rps.per_seed[s]);
    }
    std::string mean = fmt::format("{:.3g}", p.goodput_rps.mean);
    if (p.goodput_rps.per_seed.size() > 1) {
      mean += fmt::format(" [{:.3g}, {:.3g}]", p.goodput_rps.ci_low, p.goodput_rps.ci_high);
    }
    // The classes at each seed's goodput, averaged over the seeds that have one.
    double chat = 0;
    double reasoning = 0;
    double pooled = 0;
    int n = 0;
    for (std::size_t s = 0; s < p.points.size(); ++s) {
      if (const AttainmentPoint* pt = p.at_goodput(s)) {
        chat += pt->chat_pct;
        reasoning += pt->reasoning_pct;
        pooled += pt->attainment_pct;
        ++n;
      }
    }
    const std::string at = n > 0
                               ? fmt::format("{:.1f} / {:.1f} / {:.1f}", chat / n, reasoning / n, pooled / n)
                               : std::string("no rate met");
    out += fmt::format("| {} | {} | {} | {} |", to_string(p.policy), mean, per,
                       ratio_cell(p.policy, PolicyKind::kVllmFcfs));
    if (best) out += fmt::format(" {} |", ratio_cell(p.policy, PolicyKind::kVllmBest));
    // A bound of 0 means a seed's goodput run had no conversation to take the work from (a
    // policy that met the ruler only at a rate with next to no arrivals): no bound, not zero.
    const bool unbounded = std::ranges::any_of(p.bounds, [](const CapacityBound& b) { return b.rate <= 0; });
    if (unbounded) {
      out += fmt::format(" n/a | n/a | {} |\n", at);
    } else {
      out += fmt::format(" {:.3g} | {:.2f}{} | {} |\n", p.upper_bound_rps.mean, p.fraction_of_bound.mean,
                         p.above_bound() ? " **above the bound: a ruler bug**" : "", at);
    }
  }
  if (g.vllm_best) {
    out += fmt::format(
        "\nvllm-best is vLLM at `{}`: of {} settings (max_num_batched_tokens x long_prefill_token_threshold "
        "x "
        "fcfs/priority), each screened by one run on the first seed at 1.05x vLLM's default goodput there, "
        "the "
        "{} that fared best and vLLM's default were searched on every seed; the winner has the highest mean "
        "goodput of those:\n\n",
        g.vllm_best->best().label(), g.vllm_best->settings.size(), g.search.vllm_best_finalists);
    out +=
        "| max_num_batched_tokens | long_prefill_token_threshold | policy | screen: worst class % (meets) | "
        "goodput (conv/s) |\n|---:|---:|---|---:|---:|\n";
    for (const VllmBestSweep::Entry& e : g.vllm_best->settings) {
      const std::string screen =
          e.screen ? fmt::format("{:.1f} ({})", std::min(e.screen->chat_pct, e.screen->reasoning_pct),
                                 e.screen->meets ? "yes" : "no")
                   : std::string("-");
      const std::string value =
          e.finalist ? fmt::format("{:.3g}", e.goodput.goodput_rps.mean) : "screened out";
      out += fmt::format("| {} | {} | {} | {} | {}{} |\n", e.setting.max_num_batched_tokens,
                         e.setting.long_prefill_token_threshold, e.setting.priority ? "priority" : "fcfs",
                         screen, value, e.setting == g.vllm_best->best() ? " (best)" : "");
    }
  }
  if (doubled != nullptr) {
    out += fmt::format(
        "\n## Window check: {} s against {} s of arrivals\n\n| policy | goodput at {} s | at {} s | ratio | "
        "paired per seed [95% interval] | within {:.0f}% |\n|---|---:|---:|---:|---:|---|\n",
        g.window_s, doubled->window_s, g.window_s, doubled->window_s, kWindowAgreementPct);
    for (const WindowAgreement& a : window_agreement(g, *doubled)) {
      std::string paired = "n/a";
      if (a.per_seed.per_seed.size() > 1) {
        paired =
            fmt::format("{:.3f} [{:.3f}, {:.3f}]", a.per_seed.mean, a.per_seed.ci_low, a.per_seed.ci_high);
      } else if (!a.per_seed.per_seed.empty()) {
        paired = fmt::format("{:.3f}", a.per_seed.mean);
      }
      out += fmt::format("| {} | {:.3g} | {:.3g} | {:.3f} | {} | {} |\n", to_string(a.policy), a.at_window,
                         a.at_double, a.ratio, paired, a.agree() ? "yes" : "**no**");
    }
    out +=
        "\nThe ratio of the means is judged; the paired interval says how finely the seeds resolve it (an "
        "interval wider than the band means more seeds, not a verdict).\n";
  }
  out += "\n| target | goal | measured [95% interval] | met |\n|---|---|---:|---|\n";
  for (const TargetCheck& t : check_goodput_targets(g)) out += target_row(t);
  out += "\n≥: even the highest rate tried met the ruler; the value is a lower bound.\n";
  return out;
}

std::string pareto_json(const ParetoResult& r, const ReportContext& context) {
  ordered_json j;
  j["schema_version"] = 1;
  j["context"] = detail::context_json(context);
  j["forced_before_answer_is"] = "a proxy from the replay's signal model, not a measured accuracy";
  j["seeds"] = r.seeds;
  j["runs"] = r.runs;
  j["wall_s"] = r.wall_s;
  ordered_json points = ordered_json::array();
  for (const ParetoPoint& p : r.points) {
    ordered_json e;
    e["policy"] = to_string(p.setting.policy);
    e["setting"] = p.setting.label;
    if (p.setting.policy == PolicyKind::kStaticBudget) {
      e["thinking_token_budget"] = p.setting.thinking_budget;
    } else {
      e["entropy"] = {{"ema_alpha", p.setting.entropy.ema_alpha},
                      {"rpdi_threshold", p.setting.entropy.rpdi_threshold},
                      {"eat_ema_variance_threshold", p.setting.entropy.eat_ema_variance_threshold},
                      {"eat_probe_interval_tokens", p.setting.entropy.eat_probe_interval_tokens}};
      const auto curve = r.static_curve_at(p.think_tokens_saved_pct.mean);
      e["static_curve_forced_before_answer_pct"] = curve ? ordered_json(*curve) : ordered_json(nullptr);
      e["on_or_above_static_curve"] =
          curve ? ordered_json(p.forced_before_answer_pct.mean <= *curve) : ordered_json(nullptr);
    }
    e["think_tokens_saved_pct"] = stat_json(p.think_tokens_saved_pct);
    e["forced_before_answer_pct"] = stat_json(p.forced_before_answer_pct);
    e["forced_pct"] = stat_json(p.forced_pct);
    points.push_back(e);
  }
  j["points"] = points;
  return j.dump(1) + "\n";
}

std::string pareto_markdown(const ParetoResult& r) {
  std::string out = "# Forcing: work saved against answers cut short\n\n";
  out += fmt::format(
      "Think tokens saved (against each request's natural length) and forced-before-answer (`</think>` "
      "forced "
      "before the answer point of the signal model: a proxy for the accuracy risk, not a measured accuracy), "
      "for static `thinking_token_budget`s and Meridian's entropy forcing; {} seeds ({}), {} runs in {:.1f} "
      "s. "
      "Lower-right is better: more saved, fewer cut short.\n\n",
      r.seeds.size(), seeds_text(r.seeds), r.runs, r.wall_s);
  out +=
      "| policy | setting | think tokens saved % | forced before answer % (proxy) | forced % | static curve "
      "at "
      "the same saving | on/above the curve |\n|---|---|---:|---:|---:|---:|---|\n";
  for (const ParetoPoint& p : r.points) {
    std::string curve;
    std::string verdict;
    if (p.setting.policy != PolicyKind::kStaticBudget) {
      const auto c = r.static_curve_at(p.think_tokens_saved_pct.mean);
      curve = c ? fmt::format("{:.2f}", *c) : "outside";
      verdict = c ? (p.forced_before_answer_pct.mean <= *c ? "yes" : "**no**") : "n/a";
    }
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", to_string(p.setting.policy), p.setting.label,
                       cell(p.think_tokens_saved_pct), cell(p.forced_before_answer_pct), cell(p.forced_pct),
                       curve, verdict);
  }
  return out;
}

}  // namespace meridian::sim
