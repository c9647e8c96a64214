// The replay TOML ([engine], [cost_model], [workload] with its length tables,
// [signal_model], [slo], [disagg]): one field table, read by the same reader as
// meridian.toml (config/toml_fields.h), so unknown keys, wrong types,
// non-finite numbers and out-of-range values are reported alike, by dotted path.
//
// Every number has an upper bound too: these values become nanosecond
// counts, token counts and sample counts in the engine, and a value that
// passes validation must keep those conversions defined and the run bounded.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "config/input_file.h"
#include "config/toml_fields.h"
#include "meridian/replay.h"

namespace meridian::sim {
namespace {

using toml_fields::Bound;
using toml_fields::Field;
using toml_fields::IssueList;
using toml_fields::NumericRange;
using toml_fields::TableSpec;

constexpr double kU32Max = std::numeric_limits<std::uint32_t>::max();
/// Longest simulated run: 30 days (nanosecond clock, int64: ~292 years).
constexpr double kMaxSimTimeS = 30.0 * 86400;
/// The time series holds at most this many samples (~56 MB).
constexpr double kMaxSeriesSamples = 1e6;
/// Longest request part a length distribution may draw (a 16 Mi-token context).
constexpr double kMaxLengthTokens = 16777216;
/// The KV cache holds at most this many tokens (the block manager keeps per-block state).
constexpr double kMaxKvTokens = 67108864;
/// The most expensive step the engine can schedule must take less than an hour.
constexpr double kMaxStepMs = 3.6e6;

constexpr NumericRange in(double lo, double hi) noexcept { return {Bound{lo, false}, Bound{hi, false}}; }
constexpr NumericRange above(double lo, double hi) noexcept { return {Bound{lo, true}, Bound{hi, false}}; }
constexpr NumericRange positive() noexcept { return {Bound{0, true}, std::nullopt}; }

TableSpec length_table(std::string_view key, LengthDist& d) {
  return {key,
          {{"median", &d.median, in(1, kMaxLengthTokens)},
           {"sigma", &d.sigma, in(0, 4)},
           {"min", &d.min, in(1, kMaxLengthTokens)},
           {"max", &d.max, in(1, kMaxLengthTokens)}},
          {},
          {}};
}

/// The document: every table and field, bound to `p`, in the order to_toml() prints them.
TableSpec replay_spec(ReplayParams& p) {
  EngineParams& e = p.engine;
  CostModelParams& c = p.cost_model;
  WorkloadParams& w = p.workload;
  SignalModelParams& s = p.signal_model;
  SloParams& slo = p.slo;
  TableSpec engine{"engine",
                   {{"max_num_batched_tokens", &e.max_num_batched_tokens, in(1, 1048576)},
                    {"tuned_max_num_batched_tokens", &e.tuned_max_num_batched_tokens, in(1, 1048576)},
                    {"max_num_seqs", &e.max_num_seqs, in(1, 65536)},
                    {"thinking_token_budget", &e.thinking_token_budget, in(1, kU32Max)},
                    {"long_prefill_token_threshold", &e.long_prefill_token_threshold, in(0, 1048576)},
                    {"pascal_pace_fraction", &e.pascal_pace_fraction, in(0, 10)},
                    {"scheduler_reserve_full_isl", &e.scheduler_reserve_full_isl},
                    {"kv_free_tail_first", &e.kv_free_tail_first},
                    {"async_scheduling", &e.async_scheduling},
                    {"adversary_share", &e.adversary_share, in(0, 1)},
                    {"series_interval_s", &e.series_interval_s, in(0.001, kMaxSimTimeS)},
                    {"max_sim_time_s", &e.max_sim_time_s, above(0, kMaxSimTimeS)}},
                   {},
                   {}};
  TableSpec cost_model{"cost_model",
                       {{"active_params", &c.active_params, above(0, 1e14)},
                        {"embedding_params", &c.embedding_params, in(0, 1e14)},
                        {"weight_bytes", &c.weight_bytes, above(0, 1e15)},
                        {"layers", &c.layers, in(1, 4096)},
                        {"q_heads", &c.q_heads, in(1, 4096)},
                        {"kv_heads", &c.kv_heads, in(1, 4096)},
                        {"head_dim", &c.head_dim, in(1, 16384)},
                        {"kv_dtype_bytes", &c.kv_dtype_bytes, in(1, 16)},
                        {"hbm_bandwidth_gbps", &c.hbm_bandwidth_gbps, above(0, 1e6)},
                        {"bandwidth_efficiency", &c.bandwidth_efficiency, above(0, 1)},
                        {"peak_tflops", &c.peak_tflops, above(0, 1e6)},
                        {"compute_efficiency", &c.compute_efficiency, above(0, 1)},
                        {"overhead_ms", &c.overhead_ms, in(0, 60000)},
                        {"pcie_bandwidth_gbps", &c.pcie_bandwidth_gbps, above(0, 1e5)},
                        {"gpu_memory_gib", &c.gpu_memory_gib, above(0, 65536)},
                        {"gpu_memory_utilization", &c.gpu_memory_utilization, above(0, 1)},
                        {"activation_reserve_gib", &c.activation_reserve_gib, in(0, 65536)}},
                       {},
                       {}};
  TableSpec workload{"workload",
                     {{"kind", &w.kind},
                      {"arrival_process", &w.arrival_process},
                      {"arrival_rate", &w.arrival_rate, above(0, 10000)},
                      {"duration_s", &w.duration_s, above(0, kMaxSimTimeS)},
                      {"reasoning_ratio", &w.reasoning_ratio, in(0, 1)},
                      {"mean_turns", &w.mean_turns, in(1, 100)},
                      {"turn_delay_mean_s", &w.turn_delay_mean_s, in(0, 86400)}},
                     {length_table("chat_prompt", w.chat_prompt), length_table("chat_output", w.chat_output),
                      length_table("reasoning_prompt", w.reasoning_prompt), length_table("think", w.think),
                      length_table("answer", w.answer), length_table("follow_up_prompt", w.follow_up_prompt)},
                     {}};
  TableSpec signal_model{"signal_model",
                         {{"answer_at_min_fraction", &s.answer_at_min_fraction, in(0, 1)},
                          {"answer_at_max_fraction", &s.answer_at_max_fraction, in(0, 1)},
                          {"eat_start", &s.eat_start, in(0, 100)},
                          {"eat_at_answer", &s.eat_at_answer, in(0, 100)},
                          {"eat_noise_median", &s.eat_noise_median, in(0, 100)},
                          {"eat_noise_sigma", &s.eat_noise_sigma, in(0, 10)},
                          {"eat_floor", &s.eat_floor, in(0, 100)},
                          {"eat_decay_tokens", &s.eat_decay_tokens, above(0, 1e9)},
                          {"eat_settled_noise", &s.eat_settled_noise, in(0, 100)},
                          {"transition_rate", &s.transition_rate, in(0, 1)},
                          {"overthinking_probability", &s.overthinking_probability, in(0, 1)},
                          {"overthinking_rate", &s.overthinking_rate, in(0, 1)},
                          {"burst_probability", &s.burst_probability, in(0, 1)},
                          {"burst_rate", &s.burst_rate, in(0, 1)},
                          {"burst_tokens", &s.burst_tokens, in(0, kMaxLengthTokens)},
                          {"low_entropy_max", &s.low_entropy_max, in(0, 100)},
                          {"transition_entropy_min", &s.transition_entropy_min, in(0, 100)}},
                         {},
                         {}};
  TableSpec slo_table{"slo",
                      {{"ttft_ms", &slo.ttft_ms, positive()},
                       {"ttfv_ms", &slo.ttfv_ms, in(0, 1e9)},  // 0: no TTFV bound
                       {"output_tpot_ms", &slo.output_tpot_ms, positive()},
                       {"think_tpot_ms", &slo.think_tpot_ms, positive()},
                       {"attainment_pct", &slo.attainment_pct, above(0, 100)}},
                      {},
                      {}};
  DisaggSimParams& d = p.disagg;
  TableSpec disagg{"disagg",
                   {{"fabric", &d.fabric},
                    {"bandwidth_gbps", &d.bandwidth_gbps, above(0, 1e6)},
                    {"latency_us", &d.latency_us, in(0, 1e7)},
                    {"hash_gbps", &d.hash_gbps, above(0, 1e6)},
                    {"offload_threshold_blocks", &d.offload_threshold_blocks, in(1, 1048576)},
                    {"max_inflight_batches", &d.max_inflight_batches, in(1, 4096)}},
                   {},
                   {}};
  return {"",
          {},
          {std::move(engine), std::move(cost_model), std::move(workload), std::move(signal_model),
           std::move(slo_table), std::move(disagg)},
          {}};
}

// Fields renamed since a release, so an old parameter file gets a pointer
// instead of a bare "unknown key".
constexpr toml_fields::Renamed kRenamed[] = {
    {"cost_model.gpu_memory_gb", "cost_model.gpu_memory_gib (GiB, as CUDA reports device memory)"},
    {"cost_model.activation_reserve_gb", "cost_model.activation_reserve_gib (GiB)"},
};

/// Calls fn(path, field) for every field of `spec`, depth first, in document order.
template <class Fn>
void for_each_field(const TableSpec& spec, const std::string& prefix, Fn&& fn) {
  for (const Field& f : spec.fields) {
    fn(prefix.empty() ? std::string(f.key) : fmt::format("{}.{}", prefix, f.key), f);
  }
  for (const TableSpec& t : spec.tables) {
    for_each_field(t, prefix.empty() ? std::string(t.key) : fmt::format("{}.{}", prefix, t.key), fn);
  }
}

/// Ranges of every numeric field (finite, within bounds).
void check_ranges(const ReplayParams& params, IssueList& issues) {
  ReplayParams copy = params;  // the spec binds mutable pointers; nothing is written
  for_each_field(replay_spec(copy), "", [&](const std::string& path, const Field& f) {
    if (const auto* d = std::get_if<double*>(&f.target)) {
      toml_fields::check_number(issues, path, f.range, **d);
    } else if (const auto* u = std::get_if<std::uint32_t*>(&f.target)) {
      toml_fields::check_number(issues, path, f.range, static_cast<double>(**u), fmt::format("{}", **u));
    }
  });
}

/// Rules between fields that keep a run bounded (checked once each field is in range).
void check_bounds(const ReplayParams& p, IssueList& issues) {
  const EngineParams& e = p.engine;
  if (e.series_interval_s > e.max_sim_time_s) {
    issues.add("engine.series_interval_s",
               fmt::format("engine.series_interval_s must be <= engine.max_sim_time_s ({}); got {}",
                           toml_fields::format_double(e.max_sim_time_s),
                           toml_fields::format_double(e.series_interval_s)));
  } else if (e.max_sim_time_s / e.series_interval_s > kMaxSeriesSamples) {
    issues.add(
        "engine.series_interval_s",
        fmt::format("engine.series_interval_s must be >= engine.max_sim_time_s / {:.0f} ({}), so the time "
                    "series holds at most {:.0f} samples; got {}",
                    kMaxSeriesSamples, toml_fields::format_double(e.max_sim_time_s / kMaxSeriesSamples),
                    kMaxSeriesSamples, toml_fields::format_double(e.series_interval_s)));
  }
  if (e.async_scheduling && p.disagg.enabled()) {
    issues.add("engine.async_scheduling",
               "engine.async_scheduling must be false when [disagg] is on: the disaggregated mode is "
               "modelled with one step in flight");
  }
}

/// Bounds on what the cost model implies (run once the model itself is valid).
void check_cost_model(const ReplayParams& p, IssueList& issues) {
  const RooflineCostModel model(p.cost_model);
  const double kv_tokens = model.kv_capacity_bytes() / static_cast<double>(p.cost_model.kv_bytes_per_token());
  if (kv_tokens > kMaxKvTokens) {
    issues.add(
        "cost_model.gpu_memory_gib",
        fmt::format("cost_model.gpu_memory_gib leaves room for {:.4g} KV tokens; the simulator holds at "
                    "most {:.0f}",
                    kv_tokens, kMaxKvTokens));
    return;
  }
  // The longest step the engine can plan: a full token budget, attending to
  // and swapping the whole KV cache. It must stay a sane nanosecond count.
  const double tokens = std::max(p.engine.max_num_batched_tokens, p.engine.tuned_max_num_batched_tokens);
  StepShape worst;
  worst.tokens = static_cast<std::uint64_t>(tokens);
  worst.kv_tokens_read = static_cast<std::uint64_t>(kv_tokens);
  worst.attended_pairs = tokens * kv_tokens;
  worst.swap_tokens = static_cast<std::uint64_t>(kv_tokens);
  const double worst_ms = model.step_ms(worst);
  if (!(worst_ms <= kMaxStepMs)) {
    issues.add("cost_model",
               fmt::format("cost_model: the coefficients make the longest step take {:.4g} ms; it must be at "
                           "most {:.0f} ms (check the bandwidths, peak_tflops and efficiencies)",
                           worst_ms, kMaxStepMs));
  }
}

std::string toml_number(const Field& f) {
  if (const auto* d = std::get_if<double*>(&f.target)) return toml_fields::format_double(**d);
  if (const auto* u = std::get_if<std::uint32_t*>(&f.target)) return fmt::format("{}", **u);
  if (const auto* s = std::get_if<std::string*>(&f.target)) return toml_fields::toml_string(**s);
  if (const auto* b = std::get_if<bool*>(&f.target)) return **b ? "true" : "false";
  return {};
}

}  // namespace

void validate(const ReplayParams& p) {
  IssueList issues;
  check_ranges(p, issues);
  // The section validators also check ranges (for callers that use them
  // directly); a field already reported is not reported twice.
  std::unordered_set<std::string> reported;
  for (const ConfigIssue& issue : issues.kept()) reported.insert(issue.path);
  const auto take = [&](auto&& check) {
    try {
      check();
    } catch (const ConfigError& e) {
      for (const ConfigIssue& issue : e.issues()) {
        if (!reported.contains(issue.path)) issues.add(issue);
      }
      issues.count_dropped(e.omitted());
    }
  };
  take([&] { (void)RooflineCostModel(p.cost_model); });
  take([&] { validate(p.workload); });
  take([&] { validate(p.signal_model); });
  take([&] { validate(p.disagg); });
  if (issues.empty()) {
    check_bounds(p, issues);
    check_cost_model(p, issues);
  }
  issues.throw_if_any();
}

ReplayParams parse_replay_params(std::string_view toml_text, std::string_view source_name,
                                 std::string_view kind_override) {
  IssueList issues;
  const std::optional<toml::table> root = toml_fields::parse_document(toml_text, source_name, issues);
  issues.throw_if_any();
  // The workload kind picks the [workload] defaults the other keys overlay.
  ReplayParams params;
  std::string kind(kind_override);
  if (kind.empty()) {
    if (const auto named = (*root)["workload"]["kind"].value<std::string>()) kind = *named;
  }
  if (!kind.empty() && is_workload_kind(kind)) params.workload = workload_preset(kind);
  // Likewise disagg.fabric picks the [disagg] defaults (its measured figures).
  if (const auto fabric = (*root)["disagg"]["fabric"].value<std::string>()) {
    params.disagg = disagg_preset(*fabric);
  }
  toml_fields::FieldReader reader(source_name, issues, nullptr, kRenamed);
  reader.read_table(*root, "", replay_spec(params));
  if (!kind_override.empty()) params.workload.kind = std::string(kind_override);
  // File order (toml++ iterates tables by key, not by position).
  std::stable_sort(issues.kept().begin(), issues.kept().end(),
                   [](const ConfigIssue& a, const ConfigIssue& b) {
                     return std::tie(a.line, a.column) < std::tie(b.line, b.column);
                   });
  issues.throw_if_any();
  validate(params);
  return params;
}

ReplayParams load_replay_params(const std::filesystem::path& file, std::string_view kind_override) {
  std::string why;
  const std::optional<std::string> text = input_file::read_all(file, why);
  if (!text) {
    throw ConfigError({{"",
                        fmt::format("cannot read replay parameters file '{}': {}",
                                    toml_fields::shown(file.string(), 256), why),
                        file.string(), 0, 0}});
  }
  return parse_replay_params(*text, file.string(), kind_override);
}

std::string to_toml(const ReplayParams& params) {
  ReplayParams copy = params;
  std::string out;
  const auto print = [&](const auto& self, const TableSpec& spec, const std::string& path) -> void {
    if (!spec.fields.empty()) {
      out += fmt::format("{}[{}]\n", out.empty() ? "" : "\n", path);
      for (const Field& f : spec.fields) out += fmt::format("{} = {}\n", f.key, toml_number(f));
    }
    for (const TableSpec& t : spec.tables) {
      if (path.empty() && t.key == "disagg" && params.disagg == DisaggSimParams{}) continue;
      self(self, t, path.empty() ? std::string(t.key) : fmt::format("{}.{}", path, t.key));
    }
  };
  print(print, replay_spec(copy), "");
  return out;
}

}  // namespace meridian::sim
