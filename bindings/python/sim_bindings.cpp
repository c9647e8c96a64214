// Python view of the replay simulator's parts that the engine-in-the-loop replay
// (meridian.engine_replay) shares with it: the replay TOML, the workload
// generator, the roofline cost model, the per-run metrics and the goodput
// search. One implementation of each, in C++; the Python side only drives
// vLLM's scheduler with them. Exposed as meridian._meridian.sim.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "meridian/capacity_bound.h"
#include "meridian/error.h"
#include "meridian/replay.h"
#include "meridian/replay_study.h"
#include "meridian/replay_timeline.h"
#include "meridian/sim_cost_model.h"
#include "meridian/sim_workload.h"
#include "meridian/sustainable_ruler.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace meridian::python {
namespace {

using sim::PolicyKind;

std::vector<std::pair<std::string, double>> sim_metrics(const sim::ReplayResult& r) { return r.metrics; }

PolicyKind policy_named(std::string_view name) {
  const auto policy = sim::parse_policy(name);
  if (!policy) throw InvalidArgument(fmt::format("unknown simulator policy \"{}\"", name));
  return *policy;
}

sim::Ruler ruler_named(std::string_view name) {
  const auto ruler = sim::parse_ruler(name);
  if (!ruler) {
    throw InvalidArgument(fmt::format("unknown ruler \"{}\" (known: sustainable, pooled-window)", name));
  }
  return *ruler;
}

sim::Workload workload_of(const std::vector<sim::RequestSpec>& requests) {
  sim::Workload w;
  w.requests = requests;
  return w;
}

// A RunVerdict as a dict: what the engine replay's reports need of it.
nb::dict verdict_dict(const sim::RunVerdict& v) {
  nb::dict d;
  d["ruler"] = std::string(sim::to_string(v.ruler));
  d["meets"] = v.meets;
  d["sustainable"] = v.sustainable();
  d["reason"] = std::string(sim::to_string(v.reason));
  d["explain"] = v.explain();
  d["attainment_pct"] = v.attainment_pct;
  d["chat_pct"] = v.chat.pct();
  d["reasoning_pct"] = v.reasoning.pct();
  d["late_chat_pct"] = v.chat.late_pct();
  d["late_reasoning_pct"] = v.reasoning.late_pct();
  d["incomplete"] = v.incomplete;
  d["backlog_mid"] = v.backlog.mid;
  d["backlog_end"] = v.backlog.end;
  d["backlog_allowed_end"] = v.backlog.allowed_end;
  d["backlog_work_mid"] = v.backlog.work_mid;
  d["backlog_work_end"] = v.backlog.work_end;
  d["backlog_work_allowed_end"] = v.backlog.work_allowed_end;
  return d;
}

}  // namespace

void bind_sim(nb::module_& parent) {
  nb::module_ m =
      parent.def_submodule("sim", "The replay simulator's workload, cost model, metrics and search");

  nb::class_<sim::EngineParams>(m, "EngineParams")
      .def_rw("max_num_batched_tokens", &sim::EngineParams::max_num_batched_tokens)
      .def_rw("max_num_seqs", &sim::EngineParams::max_num_seqs)
      .def_rw("tuned_max_num_batched_tokens", &sim::EngineParams::tuned_max_num_batched_tokens)
      .def_rw("thinking_token_budget", &sim::EngineParams::thinking_token_budget)
      .def_rw("long_prefill_token_threshold", &sim::EngineParams::long_prefill_token_threshold)
      .def_rw("scheduler_reserve_full_isl", &sim::EngineParams::scheduler_reserve_full_isl)
      .def_rw("kv_free_tail_first", &sim::EngineParams::kv_free_tail_first)
      .def_rw("async_scheduling", &sim::EngineParams::async_scheduling)
      .def_rw("max_sim_time_s", &sim::EngineParams::max_sim_time_s);
  nb::class_<sim::VllmSetting>(m, "VllmSetting")
      .def(nb::init<>())
      .def_rw("max_num_batched_tokens", &sim::VllmSetting::max_num_batched_tokens)
      .def_rw("long_prefill_token_threshold", &sim::VllmSetting::long_prefill_token_threshold)
      .def_rw("priority", &sim::VllmSetting::priority)
      .def_prop_ro("policy",
                   [](const sim::VllmSetting& v) { return std::string(sim::to_string(v.policy())); })
      .def("label", &sim::VllmSetting::label)
      .def("apply", &sim::VllmSetting::apply, "params"_a, "`params` with this setting's [engine] values");
  m.def("vllm_best_settings", &sim::vllm_best_settings, "The vllm-best grid (SPEC 3.11), in search order");
  nb::class_<sim::SloParams>(m, "SloParams")
      .def(nb::init<>())
      .def_rw("ttft_ms", &sim::SloParams::ttft_ms)
      .def_rw("ttfv_ms", &sim::SloParams::ttfv_ms, "0: no TTFV bound")
      .def_rw("output_tpot_ms", &sim::SloParams::output_tpot_ms)
      .def_rw("think_tpot_ms", &sim::SloParams::think_tpot_ms)
      .def_rw("attainment_pct", &sim::SloParams::attainment_pct);
  nb::class_<sim::WorkloadParams>(m, "WorkloadParams")
      .def_rw("kind", &sim::WorkloadParams::kind)
      .def_rw("arrival_process", &sim::WorkloadParams::arrival_process)
      .def_rw("arrival_rate", &sim::WorkloadParams::arrival_rate)
      .def_rw("duration_s", &sim::WorkloadParams::duration_s)
      .def_rw("reasoning_ratio", &sim::WorkloadParams::reasoning_ratio);
  nb::class_<sim::CostModelParams>(m, "CostModelParams")
      .def_rw("overhead_ms", &sim::CostModelParams::overhead_ms)
      .def_prop_ro("kv_bytes_per_token", &sim::CostModelParams::kv_bytes_per_token);
  nb::class_<sim::ReplayParams>(m, "ReplayParams")
      .def_rw("engine", &sim::ReplayParams::engine)
      .def_rw("cost_model", &sim::ReplayParams::cost_model)
      .def_rw("workload", &sim::ReplayParams::workload)
      .def_rw("slo", &sim::ReplayParams::slo)
      .def("to_toml", [](const sim::ReplayParams& p) { return sim::to_toml(p); });
  m.def("parse_replay_params", &sim::parse_replay_params, "toml_text"_a, "source_name"_a = "<string>",
        "kind_override"_a = "", "Defaults overlaid by a replay TOML document (raises ConfigError)");
  m.def(
      "load_replay_params",
      [](const std::filesystem::path& file, std::string_view kind) {
        return sim::load_replay_params(file, kind);
      },
      "file"_a, "kind_override"_a = "");
  m.def(
      "validate_replay_params", [](const sim::ReplayParams& p) { sim::validate(p); }, "params"_a);
  m.def("workload_kinds", &sim::workload_kinds);

  nb::class_<sim::RequestSpec>(m, "RequestSpec")
      .def_ro("id", &sim::RequestSpec::id)
      .def_ro("arrival_s", &sim::RequestSpec::arrival_s)
      .def_ro("prompt_tokens", &sim::RequestSpec::prompt_tokens)
      .def_ro("think_tokens", &sim::RequestSpec::think_tokens)
      .def_ro("answer_tokens", &sim::RequestSpec::answer_tokens)
      .def_ro("answer_at", &sim::RequestSpec::answer_at)
      .def_ro("priority", &sim::RequestSpec::priority)
      .def_ro("conversation", &sim::RequestSpec::conversation)
      .def_ro("turn", &sim::RequestSpec::turn)
      .def_ro("after", &sim::RequestSpec::after)
      .def_ro("delay_s", &sim::RequestSpec::delay_s)
      .def_prop_ro("reasoning", &sim::RequestSpec::reasoning);
  m.def(
      "generate_workload",
      [](const sim::WorkloadParams& p, std::uint64_t seed) {
        return sim::generate_workload(p, seed).requests;
      },
      "params"_a, "seed"_a,
      "The synthetic workload's requests (ids 1..N), exactly as `meridian replay` draws them");
  m.def(
      "load_trace", [](const std::filesystem::path& path) { return sim::load_trace(path).requests; },
      "path"_a);
  m.def(
      "write_trace",
      [](const std::vector<sim::RequestSpec>& requests, const std::filesystem::path& path) {
        sim::Workload w;
        w.requests = requests;
        std::ofstream out(path);
        if (!out) throw std::runtime_error("cannot write " + path.string());
        sim::write_trace(w, out);
        if (!out.flush()) throw std::runtime_error("cannot write " + path.string());
      },
      "requests"_a, "path"_a,
      "Writes requests as the replay's workload.jsonl (docs/replay.md, trace format)");

  nb::class_<sim::RooflineCostModel>(m, "RooflineCostModel")
      .def(nb::init<const sim::CostModelParams&>(), "params"_a)
      .def(
          "step_ms",
          [](const sim::RooflineCostModel& c, std::uint64_t tokens, std::uint64_t kv_tokens_read,
             double attended_pairs, std::uint64_t swap_tokens) {
            return c.step_ms(sim::StepShape{tokens, kv_tokens_read, attended_pairs, swap_tokens});
          },
          "tokens"_a, "kv_tokens_read"_a, "attended_pairs"_a, "swap_tokens"_a = 0)
      .def("kv_capacity_blocks", &sim::RooflineCostModel::kv_capacity_blocks, "block_tokens"_a);

  nb::class_<sim::RequestTimeline>(m, "RequestTimeline")
      .def(nb::init<>())
      .def_rw("reasoning", &sim::RequestTimeline::reasoning)
      .def_rw("arrived", &sim::RequestTimeline::arrived)
      .def_rw("completed", &sim::RequestTimeline::completed)
      .def_rw("arrival_s", &sim::RequestTimeline::arrival_s)
      .def_rw("conversation_arrival_s", &sim::RequestTimeline::conversation_arrival_s)
      .def_rw("conversation_id", &sim::RequestTimeline::conversation_id)
      .def_rw("natural_answer_tokens", &sim::RequestTimeline::natural_answer_tokens)
      .def_rw("first_token_s", &sim::RequestTimeline::first_token_s)
      .def_rw("first_visible_s", &sim::RequestTimeline::first_visible_s)
      .def_rw("think_end_s", &sim::RequestTimeline::think_end_s)
      .def_rw("last_token_s", &sim::RequestTimeline::last_token_s)
      .def_rw("finish_s", &sim::RequestTimeline::finish_s)
      .def_rw("think_tokens", &sim::RequestTimeline::think_tokens)
      .def_rw("answer_tokens", &sim::RequestTimeline::answer_tokens)
      .def_rw("natural_think_tokens", &sim::RequestTimeline::natural_think_tokens);
  m.def(
      "timeline_meets_slo",
      [](const sim::RequestTimeline& t, const sim::SloParams& slo) {
        return sim::timeline_outcome(t, slo).slo_met;
      },
      "timeline"_a, "slo"_a, "Whether the request meets the SLO (meets_slo() on its outcome)");
  nb::class_<sim::RunTotals>(m, "RunTotals")
      .def(nb::init<>())
      .def_rw("steps", &sim::RunTotals::steps)
      .def_rw("prefill_tokens", &sim::RunTotals::prefill_tokens)
      .def_rw("simulated_tokens", &sim::RunTotals::simulated_tokens)
      .def_rw("preemptions", &sim::RunTotals::preemptions)
      .def_rw("preempted_answer_phase", &sim::RunTotals::preempted_answer_phase)
      .def_rw("prefix_lookup_blocks", &sim::RunTotals::prefix_lookup_blocks)
      .def_rw("prefix_hit_blocks", &sim::RunTotals::prefix_hit_blocks)
      .def_rw("rejected", &sim::RunTotals::rejected)
      .def_rw("unfinished", &sim::RunTotals::unfinished)
      .def_rw("busy_s", &sim::RunTotals::busy_s)
      .def_rw("makespan_s", &sim::RunTotals::makespan_s)
      .def_rw("arrival_window_end_s", &sim::RunTotals::arrival_window_end_s)
      .def_rw("arrival_window_tokens", &sim::RunTotals::arrival_window_tokens)
      .def_rw("wall_s", &sim::RunTotals::wall_s)
      .def_rw("stopped_early", &sim::RunTotals::stopped_early);
  m.def(
      "summarize_timelines",
      [](const std::vector<sim::RequestTimeline>& requests, std::vector<float> output_itl_ms,
         std::vector<float> think_itl_ms, const sim::RunTotals& totals, const sim::SloParams& slo,
         std::string_view ruler) {
        const sim::ReplayResult r = sim::summarize_timelines(
            requests, std::move(output_itl_ms), std::move(think_itl_ms), totals, slo, ruler_named(ruler));
        return std::make_pair(r.metrics, verdict_dict(r.verdict));
      },
      "requests"_a, "output_itl_ms"_a, "think_itl_ms"_a, "totals"_a, "slo"_a, "ruler"_a = "sustainable",
      "The replay's metrics (names and order of metric_catalog()) from request timelines, and the run's "
      "verdict under `ruler` (a dict: meets, reason, per-class attainment, backlog)");
  m.def(
      "judge_run",
      [](const std::vector<sim::RequestTimeline>& requests, double window_end_s, const sim::SloParams& slo,
         std::string_view ruler) {
        return verdict_dict(sim::judge_run(requests, window_end_s, slo, ruler_named(ruler)));
      },
      "requests"_a, "window_end_s"_a, "slo"_a, "ruler"_a = "sustainable",
      "One run judged by the ruler (sustainable_ruler.h), from its request timelines");
  m.def("allowed_misses", &sim::allowed_misses, "requests"_a, "target_pct"_a,
        "The most SLO misses `requests` may have and still meet the attainment target");
  nb::class_<sim::VerdictWatch>(m, "VerdictWatch",
                                "A run's verdict decided while it runs (stop a goodput-search run early)")
      .def(
          "__init__",
          [](sim::VerdictWatch* self, const std::vector<sim::RequestSpec>& requests,
             const sim::SloParams& slo, std::string_view ruler) {
            new (self) sim::VerdictWatch(workload_of(requests), slo, ruler_named(ruler));
          },
          "requests"_a, "slo"_a, "ruler"_a = "sustainable")
      .def("missed", &sim::VerdictWatch::missed, "request_id"_a,
           "the request missed its SLO (report it once)")
      .def("dropped", &sim::VerdictWatch::dropped, "a request was turned away or aborted")
      .def(
          "decided",
          [](const sim::VerdictWatch& w) -> std::optional<std::string> {
            if (const auto r = w.decided()) return std::string(sim::to_string(*r));
            return std::nullopt;
          },
          "the rule already broken (a VerdictReason's text), or None")
      .def("backlog_grew", &sim::VerdictWatch::backlog_grew, "requests"_a, "window_end_s"_a,
           "the backlog rule, final once the first turns stopped arriving")
      .def("conversation_start", &sim::VerdictWatch::conversation_start, "request_id"_a)
      .def("conversation_id", &sim::VerdictWatch::conversation_id, "request_id"_a);

  nb::class_<sim::ConversationWork>(m, "ConversationWork")
      .def_ro("conversations", &sim::ConversationWork::conversations)
      .def_ro("prefill_tokens", &sim::ConversationWork::prefill_tokens)
      .def_ro("decode_tokens", &sim::ConversationWork::decode_tokens)
      .def_ro("kv_tokens_read", &sim::ConversationWork::kv_tokens_read)
      .def_ro("attended_pairs", &sim::ConversationWork::attended_pairs)
      .def_ro("kv_token_steps", &sim::ConversationWork::kv_token_steps);
  m.def(
      "conversation_work",
      [](const std::vector<sim::RequestSpec>& requests, const std::vector<std::uint32_t>& think_tokens) {
        return sim::conversation_work(workload_of(requests), think_tokens);
      },
      "requests"_a, "think_tokens"_a = std::vector<std::uint32_t>{},
      "The work per conversation a perfect schedule does (think_tokens: what each request emitted; empty: "
      "natural lengths)");
  nb::class_<sim::CapacityBound>(m, "CapacityBound")
      .def_ro("rate", &sim::CapacityBound::rate)
      .def_ro("step_ms", &sim::CapacityBound::step_ms)
      .def_ro("max_step_ms", &sim::CapacityBound::max_step_ms)
      .def_ro("gpu_busy_share", &sim::CapacityBound::gpu_busy_share)
      .def_ro("kv_used_share", &sim::CapacityBound::kv_used_share)
      .def_prop_ro("binding", [](const sim::CapacityBound& b) { return std::string(b.binding); });
  m.def("capacity_bound", &sim::capacity_bound, "cost_model"_a, "slo"_a, "work"_a,
        "The physical upper bound on goodput for `work` (capacity_bound.h)");
  m.def(
      "metric_catalog",
      [] {
        std::vector<std::tuple<std::string, std::string, std::string>> out;
        for (const sim::MetricInfo& i : sim::metric_catalog()) {
          const char* better = i.better == sim::Better::kLower    ? "lower"
                               : i.better == sim::Better::kHigher ? "higher"
                                                                  : "neither";
          out.emplace_back(std::string(i.name), better, std::string(i.label));
        }
        return out;
      },
      "(name, better, label) of every metric a run reports");
  m.def(
      "delta_flag",
      [](double delta, std::string_view better) {
        const sim::Better b = better == "lower"    ? sim::Better::kLower
                              : better == "higher" ? sim::Better::kHigher
                                                   : sim::Better::kNeither;
        return std::string(sim::delta_flag(delta, b));
      },
      "delta_pct"_a, "better"_a);
  m.def("delta_pct", &sim::delta_pct, "candidate"_a, "baseline"_a);
  m.def(
      "seed_stat",
      [](std::vector<double> values) {
        const sim::SeedStat s = sim::seed_stat(std::move(values));
        return std::make_tuple(s.mean, s.ci_low, s.ci_high);
      },
      "values"_a, "(mean, 95% low, 95% high) of per-seed values (Student t)");

  // search_goodput and seeded_search on a Python attainment(rate, for_plot) -> (all %, chat %,
  // reasoning %, stopped early, meets the ruler); both return (goodput, at_least, [(rate,
  // attainment %, stopped, scan, meets)]).
  using Attainment = std::function<std::tuple<double, double, double, bool, bool>(double, bool)>;
  using Search = double (*)(const std::function<sim::AttainmentPoint(double, bool)>&, double,
                            const sim::GoodputOptions&, std::vector<sim::AttainmentPoint>&, bool*);
  const auto search_with = [](Search search_fn, const Attainment& attainment, double base_rate,
                              sim::GoodputOptions options) {
    std::vector<sim::AttainmentPoint> points;
    bool at_least = false;
    const double rate = search_fn(
        [&](double r, bool for_plot) {
          const auto [all, chat, reasoning, stopped, meets] = attainment(r, for_plot);
          sim::AttainmentPoint p;
          p.rate = r;
          p.attainment_pct = all;
          p.chat_pct = chat;
          p.reasoning_pct = reasoning;
          p.stopped_early = stopped;
          p.meets = meets;
          return p;
        },
        base_rate, options, points, &at_least);
    std::vector<std::tuple<double, double, bool, bool, bool>> out;
    out.reserve(points.size());
    for (const auto& p : points) out.emplace_back(p.rate, p.attainment_pct, p.stopped_early, p.scan, p.meets);
    return std::make_tuple(rate, at_least, out);
  };
  m.def(
      "search_goodput",
      [search_with](const Attainment& attainment, double base_rate, std::vector<double> grid,
                    double rel_tolerance, double plot_floor_pct) {
        sim::GoodputOptions search;
        search.grid = std::move(grid);
        search.rel_tolerance = rel_tolerance;
        search.plot_floor_pct = plot_floor_pct;
        return search_with(&sim::search_goodput, attainment, base_rate, search);
      },
      "attainment"_a, "base_rate"_a, "grid"_a, "rel_tolerance"_a = 0.02, "plot_floor_pct"_a = 50,
      "The replay's goodput search on attainment(rate, for_plot) -> (all %, chat %, reasoning %, stopped "
      "early, meets the ruler): (goodput, at_least, [(rate, attainment %, stopped early, scan point, "
      "meets)])");
  m.def(
      "seeded_search",
      [search_with](const Attainment& attainment, double base_rate, double rel_tolerance) {
        sim::GoodputOptions search;
        search.rel_tolerance = rel_tolerance;
        search.plot_floor_pct = 100;  // a search, not a plot: a scan stops at its first failure
        return search_with(&sim::seeded_search, attainment, base_rate, search);
      },
      "attainment"_a, "base_rate"_a, "rel_tolerance"_a = 0.02,
      "search_goodput from where the goodput is expected: base_rate probed first, then up "
      "(SEEDED_SCAN_UP) or down (SEEDED_SCAN_DOWN) to bracket the knee; each rate runs once");
  m.attr("SEEDED_SCAN_UP") = std::vector<double>(sim::kSeededScanUp.begin(), sim::kSeededScanUp.end());
  m.attr("SEEDED_SCAN_DOWN") = std::vector<double>(sim::kSeededScanDown.begin(), sim::kSeededScanDown.end());

  m.def(
      "run_replay",
      [](const sim::ReplayParams& params, std::string_view policy, std::uint64_t seed,
         std::string_view ruler) {
        sim::ReplayOptions o;
        o.policy = policy_named(policy);
        o.params = params;
        o.seed = seed;
        o.ruler = ruler_named(ruler);
        const sim::Workload w = sim::generate_workload(params.workload, seed);
        nb::gil_scoped_release release;
        return sim_metrics(sim::run_replay(w, o));
      },
      "params"_a, "policy"_a, "seed"_a, "ruler"_a = "sustainable",
      "The simulator's run of `policy` on the synthetic workload: its metrics");
  m.def(
      "find_goodput",
      [](const sim::ReplayParams& params, const std::vector<std::string>& policies,
         const std::vector<std::uint64_t>& seeds, std::string_view ruler) {
        std::vector<PolicyKind> kinds;
        for (const auto& p : policies) kinds.push_back(policy_named(p));
        sim::StudyOptions o;
        o.params = params;
        o.seeds = seeds;
        sim::GoodputOptions search;
        search.ruler = ruler_named(ruler);
        sim::GoodputResult r;
        {
          nb::gil_scoped_release release;
          r = sim::find_goodput(kinds, o, search);
        }
        std::vector<std::pair<std::string, std::vector<double>>> out;
        for (const auto& p : r.policies)
          out.emplace_back(std::string(sim::to_string(p.policy)), p.goodput_rps.per_seed);
        std::optional<sim::VllmSetting> best;
        if (r.vllm_best) best = r.vllm_best->best();
        return std::make_pair(out, best);
      },
      "params"_a, "policies"_a, "seeds"_a, "ruler"_a = "sustainable",
      "The simulator's goodput per policy and seed (meridian replay --goodput) on `ruler`, and vllm-best's "
      "winning setting (None unless vllm-best was searched)");
}

}  // namespace meridian::python
