// One reader for TOML field tables, shared by meridian.toml (src/config) and
// the replay parameters (src/sim), so both check types, integer fit,
// finiteness, ranges and unknown keys the same way and word their issues
// alike: every issue names the dotted path of its field and where it was.
//
// Hostile input is bounded here: issues are kept up to
// ConfigError::kMaxIssues and only counted after that (no message is built),
// and keys and values echoed in messages are cut to kMaxShownBytes.
//
// Internal header (not installed): meridian_core implements it, meridian_sim
// uses it. Thread-safety: FieldReader and IssueList are single-threaded
// values; the free functions are reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <variant>
#include <vector>

#include <toml++/toml.h>

#include "meridian/error.h"

namespace meridian::toml_fields {

/// One end of a numeric range; `open` excludes the bound itself.
struct Bound {
  double value = 0;
  bool open = false;
};

struct NumericRange {
  std::optional<Bound> lo;
  std::optional<Bound> hi;
};

/// "must be in (0, 1]", "must be > 0", "must be >= 1", ... ; empty if unbounded.
[[nodiscard]] std::string describe_range(const NumericRange& range);
/// Whether `value` is finite and inside `range` (NaN and infinities never are).
[[nodiscard]] bool in_range(const NumericRange& range, double value);
/// A double the way TOML prints it (shortest round-trip form, "inf", "nan").
[[nodiscard]] std::string format_double(double value);

/// Longest piece of a user-supplied key or value a message echoes.
inline constexpr std::size_t kMaxShownBytes = 64;

/// `text` fit for a one-line message: control characters escaped ("\n",
/// "\x01"), and cut after `max_bytes` (at a UTF-8 boundary) with "… (N bytes)".
[[nodiscard]] std::string shown(std::string_view text, std::size_t max_bytes = kMaxShownBytes);

/// TOML spellings: a key (bare when it can be, otherwise a quoted string) and
/// a single-line basic string. toml++ 3.3's own formatter prints a key holding
/// a tab bare and drops a string's leading newline, so neither round-trips.
[[nodiscard]] std::string toml_key(std::string_view key);
[[nodiscard]] std::string toml_string(std::string_view text);

/// The issues found so far: the first ConfigError::kMaxIssues are kept, the
/// rest counted. Callers check full() before building a message.
class IssueList {
 public:
  [[nodiscard]] bool full() const noexcept { return kept_.size() >= ConfigError::kMaxIssues; }
  [[nodiscard]] bool empty() const noexcept { return kept_.empty() && dropped_ == 0; }
  /// Every issue found, kept or not.
  [[nodiscard]] std::size_t size() const noexcept { return kept_.size() + dropped_; }
  [[nodiscard]] std::vector<ConfigIssue>& kept() noexcept { return kept_; }
  [[nodiscard]] const std::vector<ConfigIssue>& kept() const noexcept { return kept_; }
  [[nodiscard]] std::size_t dropped() const noexcept { return dropped_; }

  void add(ConfigIssue issue);
  /// An issue without a location (validation of values not read from a file).
  void add(std::string path, std::string message);
  /// One more issue that is not kept (the list is full).
  void count_dropped(std::size_t n = 1) noexcept { dropped_ += n; }
  /// Every issue of `error` (its kept ones and the count of the rest).
  void add_all(const ConfigError& error);

  /// Throws ConfigError with the kept issues and the count of the rest, if any.
  void throw_if_any();

 private:
  std::vector<ConfigIssue> kept_;
  std::size_t dropped_ = 0;
};

/// Range check of a number: "<path> must be a finite number; got inf" or
/// "<path> must be in (0, 1]; got 1.5". `shown_value` is the value as the
/// message prints it.
void check_number(IssueList& issues, const std::string& path, const NumericRange& range, double value,
                  std::string_view shown_value);
void check_number(IssueList& issues, const std::string& path, const NumericRange& range, double value);

/// Where a value came from, keyed by dotted path, so that issues found after
/// reading (validation) can still point at a file, line and column.
struct Location {
  std::string source;
  std::uint32_t line = 0;
  std::uint32_t column = 0;
};
using LocationMap = std::map<std::string, Location, std::less<>>;

/// The accepted spellings of a string-valued field.
using Choices = std::span<const std::string_view>;

/// An enumeration read from its spelling: assign(i) stores the value spelled spellings[i].
struct ChoiceTarget {
  Choices spellings;
  std::function<void(std::size_t)> assign;
};

/// Where a field's value is stored. std::optional<std::uint64_t>: an integer
/// or "auto" (std::nullopt).
using Target =
    std::variant<bool*, double*, std::uint32_t*, std::uint64_t*, std::string*, std::optional<std::uint64_t>*,
                 std::vector<std::uint32_t>*, std::vector<std::string>*, ChoiceTarget>;

/// One key of a table. Reading checks the type, integer fit and finiteness;
/// `range` is for validation (check_number), which also runs on values built
/// in code. `choices` restricts a string field to a set (checked on read).
struct Field {
  std::string_view key;
  Target target;
  NumericRange range{};
  Choices choices{};
};

/// A table: its fields and the sub-tables it may hold. A table whose keys are
/// names rather than fields ([model.<name>]) sets `read_custom` instead.
struct TableSpec {
  std::string_view key;
  std::vector<Field> fields;
  std::vector<TableSpec> tables;
  std::function<void(const toml::table& table, const std::string& path)> read_custom;
};

/// An old key that now has another name: its issue says so.
struct Renamed {
  std::string_view path;
  std::string_view now;  ///< e.g. "cost_model.gpu_memory_gib (GiB)"
};

/// Reads TOML tables into fields; problems go to an IssueList (the offending
/// value is skipped and the target keeps its earlier value).
class FieldReader {
 public:
  /// `locations`, when given, receives the location of every known field and table read.
  FieldReader(std::string_view source, IssueList& issues, LocationMap* locations = nullptr,
              std::span<const Renamed> renamed = {})
      : source_(source), issues_(issues), locations_(locations), renamed_(renamed) {}

  /// Reads `table`, found at dotted `path` ("" for the document root), as `spec` describes.
  void read_table(const toml::table& table, const std::string& path, const TableSpec& spec);
  /// Reads one value into `field`.
  void read_value(const toml::node& node, const std::string& path, const Field& field);

  /// Paths of known fields whose values were rejected while reading.
  [[nodiscard]] const std::unordered_set<std::string>& rejected() const noexcept { return rejected_; }

  void issue(const std::string& path, const toml::node& node, std::string message);
  /// "<path> must be <expected>; got <type> <value>".
  void wrong_type(const std::string& path, const toml::node& node, std::string_view expected);
  void remember(const std::string& path, const toml::node& node);
  [[nodiscard]] IssueList& issues() noexcept { return issues_; }

  /// "integer", "table", ... and the value as TOML, cut for a message.
  [[nodiscard]] static std::string_view type_name(const toml::node& node);
  [[nodiscard]] static std::string render(const toml::node& node);

 private:
  void unknown_key(const std::string& path, const toml::node& node, std::string_view key,
                   const std::string& table_path, const TableSpec& spec);
  std::optional<std::uint64_t> read_unsigned(const toml::node& node, const std::string& path,
                                             std::uint64_t max);
  std::optional<std::size_t> read_choice(const toml::node& node, const std::string& path, Choices choices);
  void not_a_choice(const std::string& path, const toml::node& node, Choices choices);
  void reject(const std::string& path) { rejected_.insert(path); }

  std::string_view source_;
  IssueList& issues_;
  LocationMap* locations_;
  std::span<const Renamed> renamed_;
  std::unordered_set<std::string> rejected_;
};

/// Parses a TOML document; a syntax error is added to `issues` (naming the place) and gives std::nullopt.
[[nodiscard]] std::optional<toml::table> parse_document(std::string_view toml_text,
                                                        std::string_view source_name, IssueList& issues);

/// Closest known key to `key` by edit distance (or an abbreviation of one), if reasonably close.
[[nodiscard]] std::optional<std::string_view> closest_key(std::string_view key,
                                                          std::span<const std::string_view> known);

}  // namespace meridian::toml_fields
