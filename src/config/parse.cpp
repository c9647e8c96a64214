// Reading meridian.toml: TOML syntax via toml++, then every key is matched
// against the schema tables by the shared field reader (toml_fields.h).
// Problems are collected, not thrown one by one, so an operator sees every
// mistake in a file at once.
#include <algorithm>
#include <cstdlib>
#include <system_error>
#include <tuple>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "config/input_file.h"
#include "config/internal.h"
#include "config/schema.h"

namespace meridian {
namespace config_detail {
namespace {

namespace schema = config_schema;
using toml_fields::FieldReader;
using toml_fields::TableSpec;

/// A schema field bound to the struct it writes into.
template <class S>
toml_fields::Field bind(S& target, const schema::Field<S>& field) {
  return std::visit(Overloaded{
                        [&](FabricKind S::*m) -> toml_fields::Field {
                          return {field.key,
                                  toml_fields::ChoiceTarget{
                                      schema::fabric_choices(),
                                      [p = &(target.*m)](std::size_t i) { *p = schema::fabric_values()[i]; }},
                                  field.range, field.choices};
                        },
                        [&](ReasoningParser S::*m) -> toml_fields::Field {
                          return {field.key,
                                  toml_fields::ChoiceTarget{schema::reasoning_parser_choices(),
                                                            [p = &(target.*m)](std::size_t i) {
                                                              *p = schema::reasoning_parser_values()[i];
                                                            }},
                                  field.range, field.choices};
                        },
                        [&](auto m) -> toml_fields::Field {
                          return {field.key, &(target.*m), field.range, field.choices};
                        },
                    },
                    field.member);
}

template <class S>
TableSpec bind_table(std::string_view key, S& target, std::span<const schema::Field<S>> fields) {
  TableSpec spec{key, {}, {}, {}};
  spec.fields.reserve(fields.size());
  for (const auto& field : fields) spec.fields.push_back(bind(target, field));
  return spec;
}

/// Reads one document into a config.
class DocumentReader {
 public:
  DocumentReader(std::string_view source, ReadState& state)
      : reader_(source, state.issues, &state.locations) {}

  void read(MeridianConfig& config, const toml::table& root) {
    TableSpec spec;
    schema::for_each_section([&](const auto& section) {
      spec.tables.push_back(bind_table(section.name, config.*section.member, section.fields));
    });
    spec.tables.push_back(
        TableSpec{"model", {}, {}, [&](const toml::table& models, const std::string& /*path*/) {
                    read_models(config, models);
                  }});
    reader_.read_table(root, "", spec);
  }

  [[nodiscard]] const std::unordered_set<std::string>& rejected() const noexcept {
    return reader_.rejected();
  }

 private:
  void read_models(MeridianConfig& config, const toml::table& models) {
    for (const auto& [key, node] : models) {
      const std::string_view name = key.str();
      const std::string path = "model." + toml_fields::shown(name);
      const toml::table* table = node.as_table();
      if (table == nullptr) {
        reader_.wrong_type(path, node, "a table of model settings");
        continue;
      }
      reader_.remember(path, node);
      if (auto problem = schema::model_name_problem(name)) {
        reader_.issue(path, node, fmt::format("{}: {}", path, *problem));
        continue;
      }
      auto existing = config.models.find(name);
      ModelConfig model = existing != config.models.end() ? existing->second : ModelConfig{};
      model.name = std::string(name);
      if (existing == config.models.end() && !table->contains("reasoning_parser")) {
        if (reader_.issues().full()) {
          reader_.issues().count_dropped();
        } else {
          reader_.issue(path + ".reasoning_parser", node,
                        fmt::format("{}.reasoning_parser is required for a model that is not a built-in "
                                    "preset (built-in: {})",
                                    path, fmt::join(builtin_model_presets(), ", ")));
        }
      }
      reader_.read_table(*table, path, bind_table(name, model, schema::model_fields()));
      config.models.insert_or_assign(std::string(name), std::move(model));
    }
  }

  FieldReader reader_;
};

}  // namespace

void apply_document(MeridianConfig& config, std::string_view toml_text, std::string_view source_name,
                    ReadState& state) {
  const std::optional<toml::table> root = toml_fields::parse_document(toml_text, source_name, state.issues);
  if (!root) return;
  DocumentReader reader(source_name, state);
  reader.read(config, *root);
  state.rejected.insert(reader.rejected().begin(), reader.rejected().end());
}

void locate(std::vector<ConfigIssue>& issues, const LocationMap& locations) {
  for (ConfigIssue& issue : issues) {
    if (issue.line != 0) continue;
    // Fall back from "a.b[3]" to "a.b" to "a" until a location is known.
    std::string_view path = issue.path;
    while (!path.empty()) {
      if (auto it = locations.find(path); it != locations.end()) {
        issue.source = it->second.source;
        issue.line = it->second.line;
        issue.column = it->second.column;
        break;
      }
      const auto cut = path.find_last_of(".[");
      if (cut == std::string_view::npos) break;
      path = path.substr(0, cut);
    }
  }
}

}  // namespace config_detail

namespace {

std::string read_file(const std::filesystem::path& file) {
  std::string why;
  std::optional<std::string> text = input_file::read_all(file, why);
  if (!text) {
    throw ConfigError({ConfigIssue{
        "", fmt::format("cannot read config file '{}': {}", toml_fields::shown(file.string(), 256), why),
        file.string(), 0, 0}});
  }
  return std::move(*text);
}

MeridianConfig finish(MeridianConfig config, config_detail::ReadState& state,
                      const std::vector<std::string>& sources) {
  // Values that failed to read were skipped (the earlier value stays), so
  // range and cross-field checks still run on the rest; a field already
  // reported is not reported twice.
  config_detail::validate_into(config, state.issues, &state.rejected);
  std::vector<ConfigIssue>& issues = state.issues.kept();
  config_detail::locate(issues, state.locations);
  // Report in file order (toml++ iterates tables by key, not by position);
  // issues without a location (e.g. from presets) keep their relative order.
  const auto rank = [&](const ConfigIssue& issue) {
    const auto it = std::find(sources.begin(), sources.end(), issue.source);
    return std::make_tuple(static_cast<std::size_t>(it - sources.begin()), issue.line, issue.column);
  };
  std::stable_sort(issues.begin(), issues.end(),
                   [&](const ConfigIssue& a, const ConfigIssue& b) { return rank(a) < rank(b); });
  state.issues.throw_if_any();
  return config;
}

}  // namespace

void overlay_config(MeridianConfig& config, std::string_view toml_text, std::string_view source_name) {
  config_detail::ReadState state;
  MeridianConfig next = config;
  config_detail::apply_document(next, toml_text, source_name, state);
  config = finish(std::move(next), state, {std::string(source_name)});
}

MeridianConfig parse_config(std::string_view toml_text, std::string_view source_name) {
  MeridianConfig config = MeridianConfig::defaults();
  overlay_config(config, toml_text, source_name);
  return config;
}

MeridianConfig load_config(const std::vector<std::filesystem::path>& files) {
  config_detail::ReadState state;
  std::vector<std::string> sources;
  MeridianConfig config = MeridianConfig::defaults();
  for (const auto& file : files) {
    const std::string text = read_file(file);
    sources.push_back(file.string());
    config_detail::apply_document(config, text, sources.back(), state);
  }
  return finish(std::move(config), state, sources);
}

MeridianConfig load_config(const std::filesystem::path& file) {
  return load_config(std::vector<std::filesystem::path>{file});
}

// getenv is only unsafe against a concurrent setenv, which Meridian never calls.
// NOLINTBEGIN(concurrency-mt-unsafe)
std::optional<std::filesystem::path> find_default_config_file() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("MERIDIAN_CONFIG"); env != nullptr && *env != '\0') {
    return fs::path(env);
  }
  std::error_code ec;
  if (fs::is_regular_file("meridian.toml", ec)) return fs::path("meridian.toml");
  fs::path config_home;
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg != nullptr && *xdg != '\0') {
    config_home = xdg;
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    config_home = fs::path(home) / ".config";
  }
  if (!config_home.empty()) {
    fs::path candidate = config_home / "meridian" / "meridian.toml";
    if (fs::is_regular_file(candidate, ec)) return candidate;
  }
  return std::nullopt;
}
// NOLINTEND(concurrency-mt-unsafe)

bool prompt_disables_thinking(std::string_view prompt_text) noexcept {
  // Qwen3 follows the most recent soft switch in the conversation.
  const auto no_think = prompt_text.rfind("/no_think");
  if (no_think == std::string_view::npos) return false;
  const auto think = prompt_text.rfind("/think");
  return think == std::string_view::npos || no_think > think;
}

}  // namespace meridian
