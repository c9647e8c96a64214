// The SLO grid study: find_goodput() over many SLO sets, and its reports.
#include "meridian/slo_grid.h"

#include <chrono>
#include <cmath>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/report_util.h"

namespace meridian::sim {
namespace {

using nlohmann::ordered_json;

// The TTFV bound of the last set: a minute to the first answer token.
constexpr double kGridTtfvMs = 60000;
// MLPerf Inference's LLM server rules judge the 99th percentile of TTFT and TPOT.
constexpr double kMlperfPercentile = 99;
struct MlperfSet {
  std::string_view label;
  double ttft_ms;
  double tpot_ms;
};
constexpr MlperfSet kMlperfSets[] = {{"mlperf deepseek-r1 server", 2000, 80},
                                     {"mlperf deepseek-r1 interactive", 1500, 15}};
// The baselines meridian-no-forcing must match, and meridian's goal over vllm-best.
constexpr PolicyKind kBaselines[] = {PolicyKind::kVllmFcfs, PolicyKind::kVllmBest, PolicyKind::kPascal};
constexpr double kForcingGoal = 1.3;

using detail::number;
using detail::stat_json;

std::string stat_cell(const SeedStat& s) {
  if (!std::isfinite(s.mean)) return "n/a";
  return fmt::format("{:.3g} [{:.3g}, {:.3g}]", s.mean, s.ci_low, s.ci_high);
}

std::string ms_text(double ms) {
  return ms >= 1000 ? fmt::format("{:g} s", ms / 1000) : fmt::format("{:g} ms", ms);
}

}  // namespace

std::vector<SloSet> slo_grid_sets(const SloParams& base) {
  std::vector<SloSet> sets;
  for (double ttft : {500.0, 2000.0}) {
    for (double answer : {15.0, 40.0}) {
      for (double think : {40.0, 120.0}) {
        SloParams slo = base;
        slo.ttft_ms = ttft;
        slo.output_tpot_ms = answer;
        slo.think_tpot_ms = think;
        sets.push_back(
            {fmt::format("ttft {} / answer {} / think {}", ms_text(ttft), ms_text(answer), ms_text(think)),
             slo});
      }
    }
  }
  sets.push_back({"default", base});
  SloParams ttfv = base;
  ttfv.ttfv_ms = kGridTtfvMs;
  sets.push_back({"default + ttfv 60 s", ttfv});
  // MLPerf Inference's DeepSeek-R1 sets (loadgen mlperf.conf: deepseek-r1 and deepseek-r1-interactive):
  // the 99th percentile of TTFT and of TPOT, where TPOT covers every output token, reasoning included.
  for (const MlperfSet& m : kMlperfSets) {
    SloParams slo;
    slo.ttft_ms = m.ttft_ms;
    slo.output_tpot_ms = m.tpot_ms;
    slo.think_tpot_ms = m.tpot_ms;
    slo.ttfv_ms = 0;
    slo.attainment_pct = kMlperfPercentile;
    sets.push_back({std::string(m.label), slo});
  }
  return sets;
}

SloGridResult run_slo_grid(const std::vector<PolicyKind>& policies, const StudyOptions& options,
                           const std::vector<SloSet>& sets,
                           const std::function<void(std::size_t set)>& on_set, const GoodputOptions& search) {
  const auto started = std::chrono::steady_clock::now();
  SloGridResult grid;
  grid.sets = sets;
  for (std::size_t i = 0; i < sets.size(); ++i) {
    if (on_set) on_set(i);
    StudyOptions study = options;
    study.params.slo = sets[i].slo;
    grid.goodput.push_back(find_goodput(policies, study, search));
  }
  grid.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return grid;
}

std::vector<SloGridTarget> slo_grid_targets(const SloGridResult& grid) {
  std::vector<SloGridTarget> out;
  for (std::size_t i = 0; i < grid.sets.size(); ++i) {
    const GoodputResult& g = grid.goodput[i];
    auto add = [&](PolicyKind candidate, PolicyKind baseline, double goal) {
      const PolicyGoodput* c = g.find(candidate);
      if (c == nullptr || g.find(baseline) == nullptr) return;
      SloGridTarget t{
          grid.sets[i].label, std::string(to_string(candidate)), std::string(to_string(baseline)), goal, {}};
      if (const auto r = g.ratio(candidate, baseline)) {
        t.ratio = *r;
      } else {
        t.baseline_zero = true;
        t.candidate_goodput = c->goodput_rps.mean;
      }
      out.push_back(t);
    };
    for (PolicyKind b : kBaselines) add(PolicyKind::kMeridianNoForcing, b, 1.0);
    add(PolicyKind::kMeridian, PolicyKind::kVllmBest, kForcingGoal);
  }
  return out;
}

std::string slo_grid_json(const SloGridResult& grid, const ReportContext& context) {
  ordered_json j;
  j["schema_version"] = 1;
  j["context"] = detail::context_json(context);
  j["rate_unit"] = "new conversations per second (the --arrival-rate unit)";
  j["ruler"] =
      detail::ruler_json(grid.goodput.empty() ? Ruler::kSustainable : grid.goodput.front().search.ruler);
  j["wall_s"] = grid.wall_s;
  ordered_json sets = ordered_json::array();
  for (std::size_t i = 0; i < grid.sets.size(); ++i) {
    const SloSet& set = grid.sets[i];
    const GoodputResult& g = grid.goodput[i];
    ordered_json e;
    e["label"] = set.label;
    e["slo"] = {{"ttft_ms", set.slo.ttft_ms},
                {"ttfv_ms", set.slo.ttfv_ms},
                {"output_tpot_ms", set.slo.output_tpot_ms},
                {"think_tpot_ms", set.slo.think_tpot_ms},
                {"attainment_pct", set.slo.attainment_pct}};
    ordered_json goodput;
    ordered_json bound;
    ordered_json share;
    ordered_json above;
    for (const PolicyGoodput& p : g.policies) {
      ordered_json pe = stat_json(p.goodput_rps);
      pe["at_least"] = p.at_least;
      const std::string name(to_string(p.policy));
      goodput[name] = pe;
      bound[name] = stat_json(p.upper_bound_rps);
      share[name] = stat_json(p.fraction_of_bound);
      above[name] = p.above_bound();
    }
    e["goodput_rps"] = goodput;
    e["upper_bound_rps"] = bound;
    e["fraction_of_bound"] = share;
    e["above_bound"] = above;
    if (g.vllm_best) e["vllm_best_setting"] = g.vllm_best->best().label();
    ordered_json ratios;
    for (const PolicyGoodput& p : g.policies) {
      if (const auto r = g.ratio(p.policy, PolicyKind::kVllmBest)) {
        ratios[std::string(to_string(p.policy))] = stat_json(*r);
      }
    }
    e["ratio_to_vllm_best"] = ratios;
    e["runs"] = g.runs;
    sets.push_back(e);
  }
  j["sets"] = sets;
  ordered_json targets = ordered_json::array();
  for (const SloGridTarget& t : slo_grid_targets(grid)) {
    targets.push_back(
        {{"set", t.set},
         {"candidate", t.candidate},
         {"baseline", t.baseline},
         {"goal", t.goal},
         {"ratio", t.baseline_zero ? ordered_json(nullptr) : stat_json(t.ratio)},
         {"baseline_zero", t.baseline_zero},
         {"candidate_goodput_rps", t.baseline_zero ? number(t.candidate_goodput) : ordered_json(nullptr)},
         {"met", t.baseline_zero ? ordered_json(nullptr) : ordered_json(t.met())},
         {"win", t.win()}});
  }
  j["targets"] = targets;
  return j.dump(1) + "\n";
}

std::string slo_grid_markdown(const SloGridResult& grid, const ReportContext& context) {
  std::string out = "# SLO grid: goodput per SLO set\n\n";
  std::string seeds;
  for (std::uint64_t s : context.seeds) seeds += fmt::format("{}{}", seeds.empty() ? "" : ", ", s);
  out += fmt::format(
      "Workload {}, seeds {}, {} s of arrivals per run; goodput in new conversations/s (mean [95% interval]) "
      "on "
      "the {} ruler, each set at its attainment target ({}); ratios are paired per seed. {} SLO sets in "
      "{:.0f} "
      "s.\n\n",
      context.workload, seeds, context.params.workload.duration_s,
      grid.goodput.empty() ? "sustainable" : to_string(grid.goodput.front().search.ruler),
      grid.sets.empty()
          ? std::string("-")
          : fmt::format("{}% per class; the MLPerf sets {}%", grid.sets.front().slo.attainment_pct,
                        grid.sets.back().slo.attainment_pct),
      grid.sets.size(), grid.wall_s);
  if (grid.goodput.empty()) return out;
  std::vector<PolicyKind> policies;
  for (const PolicyGoodput& p : grid.goodput.front().policies) policies.push_back(p.policy);
  out += "| SLO set | TTFT | TTFV | answer TPOT | think TPOT |";
  std::string rule = "|---|---:|---:|---:|---:|";
  for (PolicyKind p : policies) {
    out += fmt::format(" {} |", to_string(p));
    rule += "---:|";
  }
  out += "\n" + rule + "\n";
  for (std::size_t i = 0; i < grid.sets.size(); ++i) {
    const SloParams& slo = grid.sets[i].slo;
    out += fmt::format("| {} | {} | {} | {} | {} |", grid.sets[i].label, ms_text(slo.ttft_ms),
                       slo.ttfv_ms > 0 ? ms_text(slo.ttfv_ms) : "-", ms_text(slo.output_tpot_ms),
                       ms_text(slo.think_tpot_ms));
    for (PolicyKind p : policies) {
      const PolicyGoodput* g = grid.goodput[i].find(p);
      out += fmt::format(" {} |", g != nullptr ? stat_cell(g->goodput_rps) : "-");
    }
    out += "\n";
  }
  if (grid.goodput.front().find(PolicyKind::kVllmBest) != nullptr) {
    out += "\n## Ratio to vllm-best (paired per seed)\n\n| SLO set | vllm-best setting |";
    std::string ratio_rule = "|---|---|";
    for (PolicyKind p : policies) {
      if (p == PolicyKind::kVllmBest) continue;
      out += fmt::format(" {} |", to_string(p));
      ratio_rule += "---:|";
    }
    out += "\n" + ratio_rule + "\n";
    for (std::size_t i = 0; i < grid.sets.size(); ++i) {
      const GoodputResult& g = grid.goodput[i];
      out +=
          fmt::format("| {} | `{}` |", grid.sets[i].label, g.vllm_best ? g.vllm_best->best().label() : "-");
      for (PolicyKind p : policies) {
        if (p == PolicyKind::kVllmBest) continue;
        const auto r = g.ratio(p, PolicyKind::kVllmBest);
        out += fmt::format(" {} |", r ? stat_cell(*r) : "-");
      }
      out += "\n";
    }
  }
  out +=
      "\n## Share of the physical bound (goodput / bound for the policy's own work, mean over seeds)\n\n| "
      "SLO set |";
  std::string share_rule = "|---|";
  for (PolicyKind p : policies) {
    out += fmt::format(" {} |", to_string(p));
    share_rule += "---:|";
  }
  out += " bound (conv/s, meridian-no-forcing) |\n" + share_rule + "---:|\n";
  for (std::size_t i = 0; i < grid.sets.size(); ++i) {
    out += fmt::format("| {} |", grid.sets[i].label);
    double bound = 0;
    for (PolicyKind p : policies) {
      const PolicyGoodput* g = grid.goodput[i].find(p);
      if (g == nullptr) {
        out += " - |";
        continue;
      }
      if (p == PolicyKind::kMeridianNoForcing) bound = g->upper_bound_rps.mean;
      out += fmt::format(" {:.2f}{} |", g->fraction_of_bound.mean, g->above_bound() ? " **above**" : "");
    }
    out += fmt::format(" {:.3g} |\n", bound);
  }
  const std::vector<SloGridTarget> targets = slo_grid_targets(grid);
  if (!targets.empty()) {
    out +=
        "\n## Targets\n\n| SLO set | candidate | baseline | goal | ratio [95% interval] | met |\n"
        "|---|---|---|---:|---:|---|\n";
    std::size_t met = 0;
    std::size_t judged = 0;
    for (const SloGridTarget& t : targets) {
      if (t.baseline_zero) {
        out += fmt::format(
            "| {} | {} | {} | >= {:g}x | n/a: {} meets the target at no rate ({}: {:.3g}) | n/a |\n", t.set,
            t.candidate, t.baseline, t.goal, t.baseline, t.candidate, t.candidate_goodput);
        continue;
      }
      ++judged;
      met += t.met() ? 1U : 0U;
      const char* verdict = t.win() ? "yes (win)" : t.met() ? "yes" : "**no**";
      out += fmt::format("| {} | {} | {} | >= {:g}x | {} | {} |\n", t.set, t.candidate, t.baseline, t.goal,
                         stat_cell(t.ratio), verdict);
    }
    out += fmt::format(
        "\n{} of {} targets met ({} not judged: the baseline's goodput is 0); \"win\": the paired interval "
        "is "
        "above the goal.\n",
        met, judged, targets.size() - judged);
  }
  return out;
}

}  // namespace meridian::sim
