// Range checks (driven by the schema tables) and cross-field rules. Runs on
// every parsed config and on configs built by hand (e.g. from Python).
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "config/internal.h"
#include "config/schema.h"
#include "meridian/net_address.h"

namespace meridian {
namespace {

namespace schema = config_schema;
using toml_fields::shown;

// Issues go to a bounded IssueList, and no check looks back at earlier issues,
// so a config with 100 000 duplicate ids is validated in linear time.
class Validator {
 public:
  Validator(toml_fields::IssueList& issues, const std::unordered_set<std::string>* skip)
      : issues_(issues), skip_(skip) {}

  void run(const MeridianConfig& config) {
    schema::for_each_section(
        [&](const auto& section) { check_ranges(config.*section.member, section.fields, section.name); });
    check_scheduler(config.scheduler);
    check_entropy(config.entropy);
    check_kv_memory(config.kv_memory);
    check_disagg(config.disagg);
    check_telemetry(config.telemetry);
    for (const auto& [name, model] : config.models) check_model(name, model);
  }

 private:
  template <class S>
  void check_ranges(const S& section, std::span<const schema::Field<S>> fields, std::string_view prefix) {
    for (const auto& field : fields) {
      const std::string path = fmt::format("{}.{}", prefix, field.key);
      std::visit(
          [&](auto member) {
            using T = std::remove_cvref_t<decltype(section.*member)>;
            const T& value = section.*member;
            if constexpr (std::is_same_v<T, double>) {
              range(path, field.range, value, schema::format_double(value));
            } else if constexpr (std::is_same_v<T, std::uint64_t> || std::is_same_v<T, std::uint32_t>) {
              range(path, field.range, static_cast<double>(value), fmt::format("{}", value));
            } else if constexpr (std::is_same_v<T, std::optional<std::uint64_t>>) {
              if (value) range(path, field.range, static_cast<double>(*value), fmt::format("{}", *value));
            } else if constexpr (std::is_same_v<T, std::string>) {
              if (!field.choices.empty() &&
                  std::find(field.choices.begin(), field.choices.end(), value) == field.choices.end()) {
                add(path, fmt::format("{} must be one of \"{}\"; got \"{}\"", path,
                                      fmt::join(field.choices, "\", \""), shown(value)));
              }
            }
          },
          field.member);
    }
  }

  void range(const std::string& path, const schema::NumericRange& r, double value, const std::string& text) {
    if (skip_ != nullptr && skip_->contains(path)) return;
    toml_fields::check_number(issues_, path, r, value, text);
  }

  void check_scheduler(const SchedulerConfig& s) {
    if (s.min_think_tokens >= s.max_think_tokens) {
      add("scheduler.min_think_tokens",
          fmt::format("scheduler.min_think_tokens must be < scheduler.max_think_tokens; got "
                      "min_think_tokens = {}, max_think_tokens = {}",
                      s.min_think_tokens, s.max_think_tokens));
    }
  }

  void check_entropy(const EntropyConfig& e) {
    // The local window is part of the global sample; a global count smaller than
    // the window would make the ratio compare a window with itself.
    if (e.rpdi_min_samples < e.rpdi_window_tokens) {
      add("entropy.rpdi_min_samples",
          fmt::format("entropy.rpdi_min_samples must be >= entropy.rpdi_window_tokens; got "
                      "rpdi_min_samples = {}, rpdi_window_tokens = {}",
                      e.rpdi_min_samples, e.rpdi_window_tokens));
    }
  }

  void check_kv_memory(const KvMemoryConfig& kv) {
    if (kv.capacity_bytes && *kv.capacity_bytes > 0 && *kv.capacity_bytes < kv.block_size_bytes) {
      add("kv_memory.capacity_bytes", fmt::format("kv_memory.capacity_bytes must hold at least one block (>= "
                                                  "kv_memory.block_size_bytes = {}); got {}",
                                                  kv.block_size_bytes, *kv.capacity_bytes));
    }
  }

  void check_disagg(const DisaggConfig& d) {
    if (d.enabled && d.fabric == FabricKind::kNone) {
      add("disagg.fabric",
          "disagg.fabric must be \"nixl\" or \"mooncake\" when disagg.enabled = true; got \"none\"");
    }
  }

  void check_telemetry(const TelemetryConfig& t) {
    // Checked as the exporters will use them, so check-config fails what start-up would.
    if (const std::string problem = listen_host_problem(t.prometheus_host); !problem.empty()) {
      add("telemetry.prometheus_host", "telemetry.prometheus_host " + problem);
    }
    if (t.service_name.empty()) add("telemetry.service_name", "telemetry.service_name must not be empty");
    if (const std::string problem = otlp_endpoint_problem(t.otlp_endpoint); !problem.empty()) {
      add("telemetry.otlp_endpoint", "telemetry.otlp_endpoint " + problem);
    }
  }

  void check_model(const std::string& name, const ModelConfig& m) {
    const std::string prefix = "model." + shown(name);
    // Configs built in code (the bindings) bypass the reader's name check;
    // to_toml() must print a table that parse_config() reads back.
    if (auto problem = schema::model_name_problem(name)) {
      add(prefix, fmt::format("{}: {}", prefix, *problem));
    } else if (m.name != name) {
      add(prefix + ".name",
          fmt::format("{}: the model's name is \"{}\"; it must be the name it is listed under", prefix,
                      shown(m.name)));
    }
    const auto parser = to_string(m.reasoning_parser);
    const std::pair<const char*, const std::vector<std::string>*> marker_lists[] = {
        {"think_start_markers", &m.think_start_markers},
        {"think_end_markers", &m.think_end_markers},
    };
    if (m.reasoning_parser == ReasoningParser::kGranite) {
      for (const auto& [key, list] : marker_lists) {
        if (list->empty()) {
          add(fmt::format("{}.{}", prefix, key),
              fmt::format("{}.{} must not be empty when reasoning_parser = \"{}\"", prefix, key, parser));
        }
      }
    } else if (m.think_end_token_ids.empty()) {
      add(prefix + ".think_end_token_ids",
          fmt::format("{}.think_end_token_ids must not be empty when reasoning_parser = \"{}\"", prefix,
                      parser));
    }

    const std::pair<const char*, const std::vector<std::uint32_t>*> id_lists[] = {
        {"think_start_token_ids", &m.think_start_token_ids},
        {"think_end_token_ids", &m.think_end_token_ids},
        {"eos_token_ids", &m.eos_token_ids},
        {"tool_call_start_token_ids", &m.tool_call_start_token_ids},
        {"tool_call_end_token_ids", &m.tool_call_end_token_ids},
    };
    std::unordered_map<std::uint32_t, const char*> owner;
    for (const auto& [key, ids] : id_lists) {
      const std::string path = fmt::format("{}.{}", prefix, key);
      if (ids->size() > schema::kMaxBoundaryIds) {
        add(path, fmt::format("{} must have at most {} entries; got {}", path, schema::kMaxBoundaryIds,
                              ids->size()));
      }
      for (std::size_t i = 0; i < ids->size(); ++i) {
        const std::uint32_t id = (*ids)[i];
        auto [it, inserted] = owner.emplace(id, key);
        if (inserted) continue;
        if (issues_.full()) {
          issues_.count_dropped();
        } else if (it->second == key) {
          add(fmt::format("{}[{}]", path, i),
              fmt::format("{}[{}] = {} appears more than once in {}", path, i, id, path));
        } else {
          add(fmt::format("{}[{}]", path, i),
              fmt::format("{}[{}] = {} is also listed in {}.{}; a token can have only one role", path, i, id,
                          prefix, it->second));
        }
      }
    }
    if (m.tool_call_start_token_ids.empty() != m.tool_call_end_token_ids.empty()) {
      add(prefix + ".tool_call_end_token_ids",
          fmt::format("{}.tool_call_start_token_ids and {}.tool_call_end_token_ids must both be set or both "
                      "be empty",
                      prefix, prefix));
    }

    std::unordered_set<std::string_view> seen_markers;
    for (const auto& [key, list] : marker_lists) {
      const std::string path = fmt::format("{}.{}", prefix, key);
      if (list->size() > schema::kMaxMarkers) {
        add(path,
            fmt::format("{} must have at most {} entries; got {}", path, schema::kMaxMarkers, list->size()));
      }
      for (std::size_t i = 0; i < list->size(); ++i) {
        const std::string& marker = (*list)[i];
        if (marker.empty() || marker.size() > schema::kMaxMarkerBytes) {
          add(fmt::format("{}[{}]", path, i), fmt::format("{}[{}] must be 1 to {} bytes long; got {} bytes",
                                                          path, i, schema::kMaxMarkerBytes, marker.size()));
        } else if (!seen_markers.insert(marker).second) {
          add(fmt::format("{}[{}]", path, i),
              fmt::format("{}[{}] = \"{}\" appears more than once among the markers", path, i,
                          shown(marker)));
        }
      }
    }
  }

  void add(std::string path, std::string message) {
    if (skip_ != nullptr && skip_->contains(path)) return;
    issues_.add(std::move(path), std::move(message));
  }

  toml_fields::IssueList& issues_;
  const std::unordered_set<std::string>* skip_;
};

}  // namespace

void config_detail::validate_into(const MeridianConfig& config, toml_fields::IssueList& issues,
                                  const std::unordered_set<std::string>* skip) {
  Validator(issues, skip).run(config);
}

std::vector<ConfigIssue> validate(const MeridianConfig& config) {
  toml_fields::IssueList issues;
  config_detail::validate_into(config, issues);
  return std::move(issues.kept());
}

void validate_or_throw(const MeridianConfig& config) {
  toml_fields::IssueList issues;
  config_detail::validate_into(config, issues);
  issues.throw_if_any();
}

std::uint64_t KvMemoryConfig::resolve_capacity_bytes(std::uint64_t device_total_bytes) const {
  if (capacity_bytes) return *capacity_bytes;
  // "auto": 85% of the device, rounded down to whole blocks.
  const auto budget = static_cast<std::uint64_t>(static_cast<long double>(device_total_bytes) * 0.85L);
  return block_size_bytes == 0 ? budget : budget - budget % block_size_bytes;
}

std::string_view to_string(FabricKind fabric) noexcept {
  switch (fabric) {
    case FabricKind::kNixl: return "nixl";
    case FabricKind::kMooncake: return "mooncake";
    case FabricKind::kNone: break;
  }
  return "none";
}

std::string_view to_string(ReasoningParser parser) noexcept {
  switch (parser) {
    case ReasoningParser::kDeepSeekR1: return "deepseek_r1";
    case ReasoningParser::kGranite: return "granite";
    case ReasoningParser::kQwen3: break;
  }
  return "qwen3";
}

}  // namespace meridian
