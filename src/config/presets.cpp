// Built-in model presets and MeridianConfig::defaults().
#include <fmt/format.h>

#include "config/internal.h"

namespace meridian {
namespace {

MeridianConfig build_defaults() {
  MeridianConfig config;
  config_detail::LocationMap locations;
  std::vector<ConfigIssue> issues;
  for (const auto& preset : config_detail::embedded_presets()) {
    config_detail::apply_document(config, preset.toml_text, fmt::format("models/{}", preset.file_name),
                                  locations, issues);
  }
  if (issues.empty()) {
    issues = validate(config);
    config_detail::locate(issues, locations);
  }
  // A broken preset is a build defect; the preset test suite catches it first.
  if (!issues.empty()) throw ConfigError(std::move(issues));
  return config;
}

}  // namespace

MeridianConfig MeridianConfig::defaults() {
  static const MeridianConfig kDefaults = build_defaults();
  return kDefaults;
}

const ModelConfig& MeridianConfig::model(std::string_view name) const {
  if (auto it = models.find(name); it != models.end()) return it->second;
  std::vector<std::string> known;
  known.reserve(models.size());
  for (const auto& [key, value] : models) known.push_back(key);
  throw ConfigError({ConfigIssue{
      fmt::format("model.{}", name),
      fmt::format("model.{} is not defined; known models: {}", name, fmt::join(known, ", ")), "", 0, 0}});
}

std::vector<std::string> builtin_model_presets() {
  // Derived from the embedded files rather than defaults() so that it is safe
  // to call while defaults() itself is being built (error messages use it).
  std::vector<std::string> names;
  for (const auto& preset : config_detail::embedded_presets()) {
    std::string_view file = preset.file_name;
    names.emplace_back(file.substr(0, file.rfind(".toml")));
  }
  return names;
}

}  // namespace meridian
