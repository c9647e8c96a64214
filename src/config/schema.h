// The single description of meridian.toml: every section, every field, its
// type, default (taken from the C++ structs) and valid range. Parsing,
// validation, printing and the reference-doc coverage test all walk these
// tables, so a field exists in exactly one place.
//
// Thread-safety: the tables are immutable after static initialisation.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/toml_fields.h"
#include "meridian/config.h"

namespace meridian::config_schema {

using toml_fields::Bound;
using toml_fields::NumericRange;

/// A string-valued enumeration: the TOML spellings it accepts.
using toml_fields::Choices;

template <class S>
using Member = std::variant<bool S::*, double S::*, std::uint64_t S::*, std::uint32_t S::*, std::string S::*,
                            std::optional<std::uint64_t> S::*, FabricKind S::*, ReasoningParser S::*,
                            std::vector<std::uint32_t> S::*, std::vector<std::string> S::*>;

template <class S>
struct Field {
  std::string_view key;
  Member<S> member;
  NumericRange range;  ///< numeric fields (and capacity_bytes when not "auto")
  Choices choices;     ///< plain string fields restricted to a set
  std::string_view doc;
};

template <class S>
struct Section {
  std::string_view name;
  S MeridianConfig::*member;
  std::span<const Field<S>> fields;
};

std::span<const Field<SchedulerConfig>> scheduler_fields();
std::span<const Field<EntropyConfig>> entropy_fields();
std::span<const Field<KvMemoryConfig>> kv_memory_fields();
std::span<const Field<DisaggConfig>> disagg_fields();
std::span<const Field<TelemetryConfig>> telemetry_fields();
std::span<const Field<LoggingConfig>> logging_fields();
std::span<const Field<ModelConfig>> model_fields();

/// Calls `fn(section)` for every fixed (non-model) section, in schema order.
template <class Fn>
void for_each_section(Fn&& fn) {
  fn(Section<SchedulerConfig>{"scheduler", &MeridianConfig::scheduler, scheduler_fields()});
  fn(Section<EntropyConfig>{"entropy", &MeridianConfig::entropy, entropy_fields()});
  fn(Section<KvMemoryConfig>{"kv_memory", &MeridianConfig::kv_memory, kv_memory_fields()});
  fn(Section<DisaggConfig>{"disagg", &MeridianConfig::disagg, disagg_fields()});
  fn(Section<TelemetryConfig>{"telemetry", &MeridianConfig::telemetry, telemetry_fields()});
  fn(Section<LoggingConfig>{"logging", &MeridianConfig::logging, logging_fields()});
}

/// Names of the top-level tables, in schema order ("scheduler", ..., "model").
std::vector<std::string_view> section_names();

using toml_fields::describe_range;
using toml_fields::format_double;
using toml_fields::in_range;

/// The accepted spellings of the enum fields; `*_values()[i]` is the value
/// spelled `*_choices()[i]`.
Choices fabric_choices();
Choices reasoning_parser_choices();
std::span<const FabricKind> fabric_values();
std::span<const ReasoningParser> reasoning_parser_values();
Choices log_level_choices();
Choices log_format_choices();

/// Maximum entries in a token-id list or marker list (the router keeps them inline).
inline constexpr std::size_t kMaxBoundaryIds = 8;
inline constexpr std::size_t kMaxMarkers = 4;
inline constexpr std::size_t kMaxMarkerBytes = 256;

/// A model name: 1 to kMaxModelNameBytes letters, digits, '_' or '-' (it is
/// a bare TOML key, an environment-variable value and part of every dotted path).
inline constexpr std::size_t kMaxModelNameBytes = 64;
/// What is wrong with a model name ("a model name may contain only ..."), if anything.
std::optional<std::string> model_name_problem(std::string_view name);

}  // namespace meridian::config_schema
