// Reading meridian.toml: TOML syntax via toml++, then every key is matched
// against the schema tables. Problems are collected, not thrown one by one,
// so an operator sees every mistake in a file at once.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <system_error>
#include <tuple>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "config/internal.h"
#include "config/schema.h"

namespace meridian {
namespace config_detail {
namespace {

namespace schema = config_schema;

std::string_view type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
    case toml::node_type::none: break;
  }
  return "nothing";
}

std::string render(const toml::node& node) {
  std::ostringstream out;
  node.visit([&](const auto& n) { out << n; });
  std::string text = out.str();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

std::string quoted_list(schema::Choices choices) {
  std::string out;
  for (std::string_view c : choices) {
    if (!out.empty()) out += ", ";
    out += fmt::format("\"{}\"", c);
  }
  return out;
}

/// Reads one document; holds the issue list and location map it fills.
class DocumentReader {
 public:
  DocumentReader(std::string_view source, LocationMap& locations, std::vector<ConfigIssue>& issues)
      : source_(source), locations_(locations), issues_(issues) {}

  void read(MeridianConfig& config, const toml::table& root) {
    const auto sections = schema::section_names();
    for (const auto& [key, node] : root) {
      const std::string name(key.str());
      if (std::find(sections.begin(), sections.end(), name) == sections.end()) {
        unknown_key(name, node, name, sections, "is not a known section");
        continue;
      }
      const toml::table* table = node.as_table();
      if (table == nullptr) {
        issue(name, node, fmt::format("{} must be a table; got {} {}", name, type_name(node), render(node)));
        continue;
      }
      remember(name, node);
      if (name == "model") {
        read_models(config, *table);
        continue;
      }
      schema::for_each_section([&](const auto& section) {
        if (section.name == name) read_section(config.*section.member, section.fields, name, *table);
      });
    }
  }

 private:
  template <class S>
  void read_section(S& target, std::span<const schema::Field<S>> fields, const std::string& prefix,
                    const toml::table& table) {
    std::vector<std::string_view> known;
    known.reserve(fields.size());
    for (const auto& f : fields) known.push_back(f.key);
    for (const auto& [key, node] : table) {
      const std::string path = fmt::format("{}.{}", prefix, key.str());
      const std::string_view name = key.str();
      const auto field =
          std::find_if(fields.begin(), fields.end(), [name](const auto& f) { return f.key == name; });
      if (field == fields.end()) {
        unknown_key(path, node, std::string(key.str()), known,
                    fmt::format("is not a known key of [{}]", prefix));
        continue;
      }
      remember(path, node);
      read_value(target, *field, node, path);
    }
  }

  void read_models(MeridianConfig& config, const toml::table& models) {
    for (const auto& [key, node] : models) {
      const std::string name(key.str());
      const std::string path = "model." + name;
      const toml::table* table = node.as_table();
      if (table == nullptr) {
        issue(path, node,
              fmt::format("{} must be a table of model settings; got {} {}", path, type_name(node),
                          render(node)));
        continue;
      }
      remember(path, node);
      const bool valid_name = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-';
      });
      if (!valid_name) {
        issue(path, node,
              fmt::format("{}: a model name may contain only letters, digits, '_' and '-'", path));
        continue;
      }
      auto existing = config.models.find(name);
      ModelConfig model = existing != config.models.end() ? existing->second : ModelConfig{};
      model.name = name;
      if (existing == config.models.end() && !table->contains("reasoning_parser")) {
        issue(path + ".reasoning_parser", node,
              fmt::format("{}.reasoning_parser is required for a model that is not a built-in "
                          "preset (built-in: {})",
                          path, fmt::join(builtin_model_presets(), ", ")));
      }
      read_section(model, schema::model_fields(), path, *table);
      config.models.insert_or_assign(name, std::move(model));
    }
  }

  template <class S>
  void read_value(S& target, const schema::Field<S>& field, const toml::node& node, const std::string& path) {
    std::visit(Overloaded{
                   [&](bool S::*m) {
                     if (const auto* v = node.as_boolean()) {
                       target.*m = v->get();
                     } else {
                       wrong_type(path, node, "a boolean (true or false)");
                     }
                   },
                   [&](double S::*m) {
                     if (const auto* v = node.as_floating_point()) {
                       target.*m = v->get();
                     } else if (const auto* i = node.as_integer()) {
                       target.*m = static_cast<double>(i->get());
                     } else {
                       wrong_type(path, node, "a number");
                     }
                   },
                   [&](std::uint64_t S::*m) {
                     if (auto v = read_unsigned(node, path, std::numeric_limits<std::uint64_t>::max())) {
                       target.*m = *v;
                     }
                   },
                   [&](std::uint32_t S::*m) {
                     if (auto v = read_unsigned(node, path, std::numeric_limits<std::uint32_t>::max())) {
                       target.*m = static_cast<std::uint32_t>(*v);
                     }
                   },
                   [&](std::string S::*m) {
                     if (const auto* v = node.as_string()) {
                       if (!field.choices.empty() && std::find(field.choices.begin(), field.choices.end(),
                                                               v->get()) == field.choices.end()) {
                         not_a_choice(path, node, field.choices);
                       } else {
                         target.*m = v->get();
                       }
                     } else {
                       wrong_type(path, node, "a string");
                     }
                   },
                   [&](std::optional<std::uint64_t> S::*m) {
                     if (const auto* s = node.as_string(); s != nullptr && s->get() == "auto") {
                       target.*m = std::nullopt;
                     } else if (node.is_integer()) {
                       if (auto v = read_unsigned(node, path, std::numeric_limits<std::uint64_t>::max())) {
                         target.*m = *v;
                       }
                     } else {
                       wrong_type(path, node, "a positive integer or \"auto\"");
                     }
                   },
                   [&](FabricKind S::*m) {
                     if (auto index = read_choice(node, path, schema::fabric_choices())) {
                       target.*m = schema::fabric_values()[*index];
                     }
                   },
                   [&](ReasoningParser S::*m) {
                     if (auto index = read_choice(node, path, schema::reasoning_parser_choices())) {
                       target.*m = schema::reasoning_parser_values()[*index];
                     }
                   },
                   [&](std::vector<std::uint32_t> S::*m) {
                     const toml::array* array = node.as_array();
                     if (array == nullptr) {
                       wrong_type(path, node, "an array of token ids");
                       return;
                     }
                     std::vector<std::uint32_t> ids;
                     bool ok = true;
                     for (std::size_t i = 0; i < array->size(); ++i) {
                       const std::string item_path = fmt::format("{}[{}]", path, i);
                       if (auto v = read_unsigned(*array->get(i), item_path,
                                                  std::numeric_limits<std::uint32_t>::max())) {
                         ids.push_back(static_cast<std::uint32_t>(*v));
                       } else {
                         ok = false;
                       }
                     }
                     if (ok) target.*m = std::move(ids);
                   },
                   [&](std::vector<std::string> S::*m) {
                     const toml::array* array = node.as_array();
                     if (array == nullptr) {
                       wrong_type(path, node, "an array of strings");
                       return;
                     }
                     std::vector<std::string> items;
                     bool ok = true;
                     for (std::size_t i = 0; i < array->size(); ++i) {
                       const toml::node& item = *array->get(i);
                       if (const auto* s = item.as_string()) {
                         items.push_back(s->get());
                       } else {
                         wrong_type(fmt::format("{}[{}]", path, i), item, "a string");
                         ok = false;
                       }
                     }
                     if (ok) target.*m = std::move(items);
                   },
               },
               field.member);
  }

  std::optional<std::uint64_t> read_unsigned(const toml::node& node, const std::string& path,
                                             std::uint64_t max) {
    const auto* v = node.as_integer();
    if (v == nullptr) {
      wrong_type(path, node, "an integer");
      return std::nullopt;
    }
    const std::int64_t value = v->get();
    if (value < 0) {
      issue(path, node, fmt::format("{} must be >= 0; got {}", path, value));
      return std::nullopt;
    }
    if (static_cast<std::uint64_t>(value) > max) {
      issue(path, node, fmt::format("{} must be <= {}; got {}", path, max, value));
      return std::nullopt;
    }
    return static_cast<std::uint64_t>(value);
  }

  std::optional<std::size_t> read_choice(const toml::node& node, const std::string& path,
                                         schema::Choices choices) {
    const auto* s = node.as_string();
    if (s == nullptr) {
      wrong_type(path, node, fmt::format("one of {}", quoted_list(choices)));
      return std::nullopt;
    }
    const auto it = std::find(choices.begin(), choices.end(), s->get());
    if (it == choices.end()) {
      not_a_choice(path, node, choices);
      return std::nullopt;
    }
    return static_cast<std::size_t>(it - choices.begin());
  }

  void wrong_type(const std::string& path, const toml::node& node, std::string_view expected) {
    issue(path, node, fmt::format("{} must be {}; got {} {}", path, expected, type_name(node), render(node)));
  }

  void not_a_choice(const std::string& path, const toml::node& node, schema::Choices choices) {
    issue(path, node, fmt::format("{} must be one of {}; got {}", path, quoted_list(choices), render(node)));
  }

  void unknown_key(const std::string& path, const toml::node& node, const std::string& key,
                   std::span<const std::string_view> known, std::string_view what) {
    std::string message = fmt::format("{} {}", path, what);
    if (auto suggestion = schema::closest_key(key, known)) {
      message += fmt::format("; did you mean '{}'?", *suggestion);
    } else {
      message += fmt::format(" (known: {})", fmt::join(known, ", "));
    }
    issue(path, node, std::move(message));
  }

  void remember(const std::string& path, const toml::node& node) {
    const auto& begin = node.source().begin;
    locations_.insert_or_assign(path, Location{std::string(source_), begin.line, begin.column});
  }

  void issue(const std::string& path, const toml::node& node, std::string message) {
    const auto& begin = node.source().begin;
    issues_.push_back(ConfigIssue{path, std::move(message), std::string(source_), begin.line, begin.column});
  }

  std::string_view source_;
  LocationMap& locations_;
  std::vector<ConfigIssue>& issues_;
};

}  // namespace

void apply_document(MeridianConfig& config, std::string_view toml_text, std::string_view source_name,
                    LocationMap& locations, std::vector<ConfigIssue>& issues) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& error) {
    const auto& begin = error.source().begin;
    issues.push_back(ConfigIssue{"", fmt::format("TOML syntax error: {}", error.description()),
                                 std::string(source_name), begin.line, begin.column});
    return;
  }
  DocumentReader(source_name, locations, issues).read(config, root);
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
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw ConfigError({ConfigIssue{"",
                                   fmt::format("cannot read config file '{}': {}", file.string(),
                                               std::generic_category().message(errno)),
                                   file.string(), 0, 0}});
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

MeridianConfig finish(MeridianConfig config, std::vector<ConfigIssue> issues,
                      const config_detail::LocationMap& locations, const std::vector<std::string>& sources) {
  // Values that failed to parse were skipped (the earlier value stays), so
  // range and cross-field checks still run on the rest; a path already
  // reported is not reported twice.
  for (ConfigIssue& issue : validate(config)) {
    const bool seen = std::any_of(issues.begin(), issues.end(),
                                  [&](const ConfigIssue& other) { return other.path == issue.path; });
    if (!seen) issues.push_back(std::move(issue));
  }
  config_detail::locate(issues, locations);
  // Report in file order (toml++ iterates tables by key, not by position);
  // issues without a location (e.g. from presets) keep their relative order.
  const auto rank = [&](const ConfigIssue& issue) {
    const auto it = std::find(sources.begin(), sources.end(), issue.source);
    return std::make_tuple(static_cast<std::size_t>(it - sources.begin()), issue.line, issue.column);
  };
  std::stable_sort(issues.begin(), issues.end(),
                   [&](const ConfigIssue& a, const ConfigIssue& b) { return rank(a) < rank(b); });
  if (!issues.empty()) throw ConfigError(std::move(issues));
  return config;
}

}  // namespace

void overlay_config(MeridianConfig& config, std::string_view toml_text, std::string_view source_name) {
  config_detail::LocationMap locations;
  std::vector<ConfigIssue> issues;
  MeridianConfig next = config;
  config_detail::apply_document(next, toml_text, source_name, locations, issues);
  config = finish(std::move(next), std::move(issues), locations, {std::string(source_name)});
}

MeridianConfig parse_config(std::string_view toml_text, std::string_view source_name) {
  MeridianConfig config = MeridianConfig::defaults();
  overlay_config(config, toml_text, source_name);
  return config;
}

MeridianConfig load_config(const std::vector<std::filesystem::path>& files) {
  config_detail::LocationMap locations;
  std::vector<ConfigIssue> issues;
  std::vector<std::string> sources;
  MeridianConfig config = MeridianConfig::defaults();
  for (const auto& file : files) {
    const std::string text = read_file(file);
    sources.push_back(file.string());
    config_detail::apply_document(config, text, sources.back(), locations, issues);
  }
  return finish(std::move(config), std::move(issues), locations, sources);
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
