// The replay TOML ([engine], [cost_model], [workload] with its length tables,
// [signal_model]): every key is matched against one field table, so unknown
// keys, wrong types and out-of-range values are all reported by dotted path.
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "meridian/replay.h"

namespace meridian::sim {
namespace {

using FieldRef = std::variant<double*, std::uint32_t*, std::string*>;
struct Field {
  std::string path;
  FieldRef ref;
};

std::vector<Field> fields(ReplayParams& p) {
  std::vector<Field> f;
  auto add = [&](std::string path, FieldRef ref) { f.push_back({std::move(path), ref}); };
  EngineParams& e = p.engine;
  add("engine.max_num_batched_tokens", &e.max_num_batched_tokens);
  add("engine.tuned_max_num_batched_tokens", &e.tuned_max_num_batched_tokens);
  add("engine.max_num_seqs", &e.max_num_seqs);
  add("engine.thinking_token_budget", &e.thinking_token_budget);
  add("engine.series_interval_s", &e.series_interval_s);
  add("engine.max_sim_time_s", &e.max_sim_time_s);
  CostModelParams& c = p.cost_model;
  add("cost_model.active_params", &c.active_params);
  add("cost_model.embedding_params", &c.embedding_params);
  add("cost_model.weight_bytes", &c.weight_bytes);
  add("cost_model.layers", &c.layers);
  add("cost_model.q_heads", &c.q_heads);
  add("cost_model.kv_heads", &c.kv_heads);
  add("cost_model.head_dim", &c.head_dim);
  add("cost_model.kv_dtype_bytes", &c.kv_dtype_bytes);
  add("cost_model.hbm_bandwidth_gbps", &c.hbm_bandwidth_gbps);
  add("cost_model.bandwidth_efficiency", &c.bandwidth_efficiency);
  add("cost_model.peak_tflops", &c.peak_tflops);
  add("cost_model.compute_efficiency", &c.compute_efficiency);
  add("cost_model.overhead_ms", &c.overhead_ms);
  add("cost_model.pcie_bandwidth_gbps", &c.pcie_bandwidth_gbps);
  add("cost_model.gpu_memory_gib", &c.gpu_memory_gib);
  add("cost_model.gpu_memory_utilization", &c.gpu_memory_utilization);
  add("cost_model.activation_reserve_gib", &c.activation_reserve_gib);
  WorkloadParams& w = p.workload;
  add("workload.kind", &w.kind);
  add("workload.arrival_process", &w.arrival_process);
  add("workload.arrival_rate", &w.arrival_rate);
  add("workload.duration_s", &w.duration_s);
  add("workload.reasoning_ratio", &w.reasoning_ratio);
  add("workload.mean_turns", &w.mean_turns);
  add("workload.turn_delay_mean_s", &w.turn_delay_mean_s);
  auto dist = [&](std::string_view name, LengthDist& d) {
    add(fmt::format("workload.{}.median", name), &d.median);
    add(fmt::format("workload.{}.sigma", name), &d.sigma);
    add(fmt::format("workload.{}.min", name), &d.min);
    add(fmt::format("workload.{}.max", name), &d.max);
  };
  dist("chat_prompt", w.chat_prompt);
  dist("chat_output", w.chat_output);
  dist("reasoning_prompt", w.reasoning_prompt);
  dist("think", w.think);
  dist("answer", w.answer);
  dist("follow_up_prompt", w.follow_up_prompt);
  SignalModelParams& s = p.signal_model;
  add("signal_model.answer_at_min_fraction", &s.answer_at_min_fraction);
  add("signal_model.answer_at_max_fraction", &s.answer_at_max_fraction);
  add("signal_model.eat_start", &s.eat_start);
  add("signal_model.eat_at_answer", &s.eat_at_answer);
  add("signal_model.eat_noise_median", &s.eat_noise_median);
  add("signal_model.eat_noise_sigma", &s.eat_noise_sigma);
  add("signal_model.eat_floor", &s.eat_floor);
  add("signal_model.eat_decay_tokens", &s.eat_decay_tokens);
  add("signal_model.eat_settled_noise", &s.eat_settled_noise);
  add("signal_model.transition_rate", &s.transition_rate);
  add("signal_model.overthinking_probability", &s.overthinking_probability);
  add("signal_model.overthinking_rate", &s.overthinking_rate);
  add("signal_model.burst_probability", &s.burst_probability);
  add("signal_model.burst_rate", &s.burst_rate);
  add("signal_model.burst_tokens", &s.burst_tokens);
  add("signal_model.low_entropy_max", &s.low_entropy_max);
  add("signal_model.transition_entropy_min", &s.transition_entropy_min);
  SloParams& slo = p.slo;
  add("slo.ttft_ms", &slo.ttft_ms);
  add("slo.output_tpot_ms", &slo.output_tpot_ms);
  add("slo.think_tpot_ms", &slo.think_tpot_ms);
  add("slo.attainment_pct", &slo.attainment_pct);
  return f;
}

// Fields renamed since a release, so an old parameter file gets a pointer
// instead of a bare "unknown field".
std::string unknown_field_message(const std::string& path) {
  static constexpr std::pair<std::string_view, std::string_view> kRenamed[] = {
      {"cost_model.gpu_memory_gb", "cost_model.gpu_memory_gib (GiB, as CUDA reports device memory)"},
      {"cost_model.activation_reserve_gb", "cost_model.activation_reserve_gib (GiB)"},
  };
  for (const auto& [old_name, new_name] : kRenamed) {
    if (path == old_name) return fmt::format("{} was renamed to {}", path, new_name);
  }
  return fmt::format("{} is not a known field", path);
}

class Reader {
 public:
  Reader(std::vector<Field> table, std::string_view source) : table_(std::move(table)), source_(source) {}

  void read(const toml::table& t, const std::string& prefix) {
    for (const auto& entry : t) {
      const toml::key& key = entry.first;
      const toml::node& node = entry.second;
      const std::string path =
          prefix.empty() ? std::string(key.str()) : fmt::format("{}.{}", prefix, key.str());
      if (const toml::table* sub = node.as_table()) {
        if (!is_prefix(path)) {
          issue(path, node, fmt::format("{} is not a known section", path));
          continue;
        }
        read(*sub, path);
        continue;
      }
      Field* f = find(path);
      if (f == nullptr) {
        issue(path, node, unknown_field_message(path));
        continue;
      }
      std::visit([&](auto* target) { assign(path, node, target); }, f->ref);
    }
  }

  std::vector<ConfigIssue> issues;

 private:
  bool is_prefix(const std::string& path) const {
    for (const Field& f : table_) {
      if (f.path.size() > path.size() && f.path.compare(0, path.size(), path) == 0 &&
          f.path[path.size()] == '.') {
        return true;
      }
    }
    return false;
  }
  Field* find(const std::string& path) {
    for (Field& f : table_) {
      if (f.path == path) return &f;
    }
    return nullptr;
  }
  void issue(const std::string& path, const toml::node& node, std::string message) {
    const auto& src = node.source();
    issues.push_back({path, std::move(message), std::string(source_), src.begin.line, src.begin.column});
  }
  void assign(const std::string& path, const toml::node& node, double* target) {
    if (auto v = node.value<double>(); v && (node.is_floating_point() || node.is_integer())) {
      *target = *v;
    } else {
      issue(path, node, fmt::format("{} must be a number", path));
    }
  }
  void assign(const std::string& path, const toml::node& node, std::uint32_t* target) {
    const auto v = node.value<std::int64_t>();
    if (!node.is_integer() || !v || *v < 0 || *v > 0xffffffffLL) {
      issue(path, node, fmt::format("{} must be an integer in [0, 4294967295]", path));
      return;
    }
    *target = static_cast<std::uint32_t>(*v);
  }
  void assign(const std::string& path, const toml::node& node, std::string* target) {
    if (const auto v = node.value<std::string>(); v && node.is_string()) {
      *target = *v;
    } else {
      issue(path, node, fmt::format("{} must be a string", path));
    }
  }

  std::vector<Field> table_;
  std::string_view source_;
};

}  // namespace

void validate(const ReplayParams& p) {
  std::vector<ConfigIssue> issues;
  auto take = [&](auto&& check) {
    try {
      check();
    } catch (const ConfigError& e) {
      issues.insert(issues.end(), e.issues().begin(), e.issues().end());
    }
  };
  take([&] { (void)RooflineCostModel(p.cost_model); });
  take([&] { validate(p.workload); });
  take([&] { validate(p.signal_model); });
  const EngineParams& e = p.engine;
  auto need = [&](bool ok, std::string_view path, std::string_view rule, double got) {
    if (!ok) {
      issues.push_back({std::string(path), fmt::format("{} must be {}; got {}", path, rule, got), "", 0, 0});
    }
  };
  need(e.max_num_batched_tokens >= 1, "engine.max_num_batched_tokens", ">= 1", e.max_num_batched_tokens);
  need(e.tuned_max_num_batched_tokens >= 1, "engine.tuned_max_num_batched_tokens", ">= 1",
       e.tuned_max_num_batched_tokens);
  need(e.max_num_seqs >= 1, "engine.max_num_seqs", ">= 1", e.max_num_seqs);
  need(e.thinking_token_budget >= 1, "engine.thinking_token_budget", ">= 1", e.thinking_token_budget);
  need(e.series_interval_s > 0, "engine.series_interval_s", "> 0", e.series_interval_s);
  need(e.max_sim_time_s > 0, "engine.max_sim_time_s", "> 0", e.max_sim_time_s);
  const SloParams& slo = p.slo;
  need(slo.ttft_ms > 0 && std::isfinite(slo.ttft_ms), "slo.ttft_ms", "> 0 and finite", slo.ttft_ms);
  need(slo.output_tpot_ms > 0 && std::isfinite(slo.output_tpot_ms), "slo.output_tpot_ms", "> 0 and finite",
       slo.output_tpot_ms);
  need(slo.think_tpot_ms > 0 && std::isfinite(slo.think_tpot_ms), "slo.think_tpot_ms", "> 0 and finite",
       slo.think_tpot_ms);
  need(slo.attainment_pct > 0 && slo.attainment_pct <= 100, "slo.attainment_pct", "in (0, 100]",
       slo.attainment_pct);
  if (!issues.empty()) throw ConfigError(std::move(issues));
}

ReplayParams parse_replay_params(std::string_view toml_text, std::string_view source_name,
                                 std::string_view kind_override) {
  ReplayParams params;
  toml::table root;
  try {
    root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    throw ConfigError({{"", fmt::format("TOML syntax error: {}", e.description()), std::string(source_name),
                        src.begin.line, src.begin.column}});
  }
  // The workload kind picks the [workload] defaults the other keys overlay.
  std::string kind(kind_override);
  if (kind.empty()) {
    if (const auto named = root["workload"]["kind"].value<std::string>()) kind = *named;
  }
  if (!kind.empty() && is_workload_kind(kind)) params.workload = workload_preset(kind);
  Reader reader(fields(params), source_name);
  reader.read(root, "");
  if (!kind_override.empty()) params.workload.kind = std::string(kind_override);
  if (!reader.issues.empty()) throw ConfigError(std::move(reader.issues));
  validate(params);
  return params;
}

ReplayParams load_replay_params(const std::filesystem::path& file, std::string_view kind_override) {
  std::ifstream in(file);
  if (!in) {
    throw ConfigError(
        {{"", fmt::format("cannot read replay parameters file {}", file.string()), file.string(), 0, 0}});
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse_replay_params(text.str(), file.string(), kind_override);
}

std::string to_toml(const ReplayParams& params) {
  ReplayParams copy = params;
  std::string out;
  std::string section;
  for (const Field& f : fields(copy)) {
    const auto dot = f.path.rfind('.');
    const std::string table = f.path.substr(0, dot);
    if (table != section) {
      out += fmt::format("{}[{}]\n", out.empty() ? "" : "\n", table);
      section = table;
    }
    const std::string key = f.path.substr(dot + 1);
    std::visit(
        [&](auto* v) {
          using T = std::remove_pointer_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string>) {
            out += fmt::format("{} = \"{}\"\n", key, *v);
          } else {
            out += fmt::format("{} = {}\n", key, *v);
          }
        },
        f.ref);
  }
  return out;
}

}  // namespace meridian::sim
