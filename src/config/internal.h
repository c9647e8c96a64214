// Internals shared by the config translation units (parse, validate, emit).
#pragma once

#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "config/toml_fields.h"
#include "meridian/config.h"

namespace meridian::config_detail {

/// std::visit helper: one lambda per alternative.
template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

using toml_fields::Location;
using toml_fields::LocationMap;

/// What reading documents has found so far.
struct ReadState {
  toml_fields::IssueList issues;
  LocationMap locations;
  /// Fields whose values were rejected while reading (validation does not report them again).
  std::unordered_set<std::string> rejected;
};

/// Apply one TOML document to `config`; type/unknown-key problems go to
/// `state.issues` (the offending values are skipped, the rest still applies).
void apply_document(MeridianConfig& config, std::string_view toml_text, std::string_view source_name,
                    ReadState& state);

/// Range and cross-field checks of validate(), into `issues`; issues whose
/// path is in `skip` are left out.
void validate_into(const MeridianConfig& config, toml_fields::IssueList& issues,
                   const std::unordered_set<std::string>* skip = nullptr);

/// Attach locations to issues whose path was seen while parsing.
void locate(std::vector<ConfigIssue>& issues, const LocationMap& locations);

/// Built-in presets (models/*.toml, embedded at build time): {file name, text}.
struct EmbeddedPreset {
  std::string_view file_name;
  std::string_view toml_text;
};
std::vector<EmbeddedPreset> embedded_presets();

}  // namespace meridian::config_detail
