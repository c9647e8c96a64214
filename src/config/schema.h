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

#include "meridian/config.h"

namespace meridian::config_schema {

/// One end of a numeric range; `open` excludes the bound itself.
struct Bound {
  double value = 0;
  bool open = false;
};

struct NumericRange {
  std::optional<Bound> lo;
  std::optional<Bound> hi;
};

/// A string-valued enumeration: the TOML spellings it accepts.
using Choices = std::span<const std::string_view>;

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

/// "must be in (0, 1]", "must be > 0", "must be >= 1", ... ; empty if unbounded.
std::string describe_range(const NumericRange& range);
bool in_range(const NumericRange& range, double value);

/// Formats a double the way TOML would print it (shortest round-trip form).
std::string format_double(double value);

/// The accepted spellings of the enum fields; `*_values()[i]` is the value
/// spelled `*_choices()[i]`.
Choices fabric_choices();
Choices reasoning_parser_choices();
std::span<const FabricKind> fabric_values();
std::span<const ReasoningParser> reasoning_parser_values();
Choices log_level_choices();

/// Maximum entries in a token-id list or marker list (the router keeps them inline).
inline constexpr std::size_t kMaxBoundaryIds = 8;
inline constexpr std::size_t kMaxMarkers = 4;
inline constexpr std::size_t kMaxMarkerBytes = 256;

/// Closest known key to `key` by edit distance, if reasonably close.
std::optional<std::string_view> closest_key(std::string_view key, std::span<const std::string_view> known);

}  // namespace meridian::config_schema
