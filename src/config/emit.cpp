// Printing a resolved config as TOML (schema order, every field) and JSON.
#include <cmath>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "config/internal.h"
#include "config/schema.h"

namespace meridian {
namespace {

namespace schema = config_schema;
using config_detail::Overloaded;

/// A field's value in TOML. Strings are single-line basic strings
/// (toml_fields::toml_string): toml++'s printer drops a leading newline.
template <class S>
std::string toml_value(const S& section, const schema::Field<S>& field) {
  std::ostringstream out;
  std::visit(
      Overloaded{
          [&](bool S::*m) { out << (section.*m ? "true" : "false"); },
          [&](double S::*m) { out << schema::format_double(section.*m); },
          [&](std::uint64_t S::*m) { out << section.*m; },
          [&](std::uint32_t S::*m) { out << section.*m; },
          [&](std::string S::*m) { out << toml_fields::toml_string(section.*m); },
          [&](std::optional<std::uint64_t> S::*m) {
            if (section.*m) {
              out << *(section.*m);
            } else {
              out << "\"auto\"";
            }
          },
          [&](FabricKind S::*m) { out << '"' << to_string(section.*m) << '"'; },
          [&](ReasoningParser S::*m) { out << '"' << to_string(section.*m) << '"'; },
          [&](std::vector<std::uint32_t> S::*m) { out << fmt::format("[{}]", fmt::join(section.*m, ", ")); },
          [&](std::vector<std::string> S::*m) {
            std::vector<std::string> items;
            items.reserve((section.*m).size());
            for (const std::string& s : section.*m) items.push_back(toml_fields::toml_string(s));
            out << fmt::format("[{}]", fmt::join(items, ", "));
          },
      },
      field.member);
  return out.str();
}

template <class S>
nlohmann::ordered_json json_value(const S& section, const schema::Field<S>& field) {
  return std::visit(
      Overloaded{
          [&](std::optional<std::uint64_t> S::*m) -> nlohmann::ordered_json {
            if (section.*m) return *(section.*m);
            return "auto";
          },
          [&](FabricKind S::*m) -> nlohmann::ordered_json { return to_string(section.*m); },
          [&](ReasoningParser S::*m) -> nlohmann::ordered_json { return to_string(section.*m); },
          [&](double S::*m) -> nlohmann::ordered_json {
            // JSON has no infinity or NaN (nlohmann would print null); only a
            // config that fails validation holds one.
            const double v = section.*m;
            if (std::isfinite(v)) return v;
            return schema::format_double(v);
          },
          [&](auto m) -> nlohmann::ordered_json { return section.*m; },
      },
      field.member);
}

template <class Fn>
void for_each_model(const MeridianConfig& config, std::optional<std::string_view> only_model, Fn&& fn) {
  // The table is named by the map key, which is what parse_config() makes the model's name.
  if (only_model) {
    fn(*only_model, config.model(*only_model));
    return;
  }
  for (const auto& [name, model] : config.models) fn(std::string_view(name), model);
}

}  // namespace

std::string to_toml(const MeridianConfig& config, std::optional<std::string_view> only_model) {
  std::string out;
  const auto emit_fields = [&](const auto& section, const auto& fields) {
    for (const auto& field : fields) out += fmt::format("{} = {}\n", field.key, toml_value(section, field));
  };
  schema::for_each_section([&](const auto& section) {
    if (!out.empty()) out += '\n';
    out += fmt::format("[{}]\n", section.name);
    emit_fields(config.*section.member, section.fields);
  });
  for_each_model(config, only_model, [&](std::string_view name, const ModelConfig& model) {
    out += fmt::format("\n[model.{}]\n", toml_fields::toml_key(name));
    emit_fields(model, schema::model_fields());
  });
  return out;
}

std::string to_json(const MeridianConfig& config, std::optional<std::string_view> only_model) {
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  const auto fill = [](const auto& section, const auto& fields) {
    nlohmann::ordered_json table = nlohmann::ordered_json::object();
    for (const auto& field : fields) table[std::string(field.key)] = json_value(section, field);
    return table;
  };
  schema::for_each_section([&](const auto& section) {
    root[std::string(section.name)] = fill(config.*section.member, section.fields);
  });
  nlohmann::ordered_json models = nlohmann::ordered_json::object();
  for_each_model(config, only_model, [&](std::string_view name, const ModelConfig& model) {
    models[std::string(name)] = fill(model, schema::model_fields());
  });
  root["model"] = std::move(models);
  // Names and strings built in code may hold invalid UTF-8: replace it rather than throw.
  return root.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::vector<std::string> config_field_paths() {
  std::vector<std::string> paths;
  schema::for_each_section([&](const auto& section) {
    for (const auto& field : section.fields) paths.push_back(fmt::format("{}.{}", section.name, field.key));
  });
  for (const auto& field : schema::model_fields()) paths.push_back(fmt::format("model.<name>.{}", field.key));
  return paths;
}

}  // namespace meridian
