// Internals shared by the config translation units (parse, validate, emit).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "meridian/config.h"

namespace meridian::config_detail {

/// std::visit helper: one lambda per alternative.
template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

/// Where a value came from, keyed by dotted path, so that validation issues
/// found after parsing can still point at a file, line and column.
struct Location {
  std::string source;
  std::uint32_t line = 0;
  std::uint32_t column = 0;
};
using LocationMap = std::map<std::string, Location, std::less<>>;

/// Apply one TOML document to `config`; type/unknown-key problems go to
/// `issues` (the offending values are skipped, the rest still applies).
void apply_document(MeridianConfig& config, std::string_view toml_text, std::string_view source_name,
                    LocationMap& locations, std::vector<ConfigIssue>& issues);

/// Attach locations to issues whose path was seen while parsing.
void locate(std::vector<ConfigIssue>& issues, const LocationMap& locations);

/// Built-in presets (models/*.toml, embedded at build time): {file name, text}.
struct EmbeddedPreset {
  std::string_view file_name;
  std::string_view toml_text;
};
std::vector<EmbeddedPreset> embedded_presets();

}  // namespace meridian::config_detail
