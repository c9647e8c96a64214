// Built-in model presets and MeridianConfig::defaults().
#include <fmt/format.h>

#include "config/internal.h"

namespace meridian {
namespace {

MeridianConfig build_defaults() {
  MeridianConfig config;
  config_detail::ReadState state;
  for (const auto& preset : config_detail::embedded_presets()) {
    config_detail::apply_document(config, preset.toml_text, fmt::format("models/{}", preset.file_name),
                                  state);
  }
  if (state.issues.empty()) {
    config_detail::validate_into(config, state.issues);
    config_detail::locate(state.issues.kept(), state.locations);
  }
  // A broken preset is a build defect; the preset test suite catches it first.
  state.issues.throw_if_any();
  return config;
}

}  // namespace

MeridianConfig MeridianConfig::defaults() {
  static const MeridianConfig kDefaults = build_defaults();
  return kDefaults;
}

const ModelConfig& MeridianConfig::model(std::string_view name) const {
  if (auto it = models.find(name); it != models.end()) return it->second;
  // The list is cut short: a config built in code may hold any number of models.
  constexpr std::size_t kMaxListed = 20;
  std::vector<std::string_view> known;
  for (const auto& [key, value] : models) {
    if (known.size() == kMaxListed) break;
    known.emplace_back(key);
  }
  const std::string more =
      models.size() > kMaxListed ? fmt::format(" and {} more", models.size() - kMaxListed) : std::string();
  const std::string path = fmt::format("model.{}", toml_fields::shown(name));
  throw ConfigError({ConfigIssue{
      path, fmt::format("{} is not defined; known models: {}{}", path, fmt::join(known, ", "), more), "", 0,
      0}});
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
