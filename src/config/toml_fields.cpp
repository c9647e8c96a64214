#include "config/toml_fields.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "config/input_shape.h"

namespace meridian::toml_fields {
namespace {

constexpr std::size_t kMaxRenderedArray = 16;  // elements of an array echoed in a message

/// "in (0, 1]", "> 0", ... : describe_range() without "must be ".
std::string range_tail(const NumericRange& range) {
  const auto num = [](double v) {
    // Integral bounds print without a fraction ("> 0", not "> 0.0").
    if (std::floor(v) == v && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<long long>(v));
    return format_double(v);
  };
  if (range.lo && range.hi) {
    return fmt::format("in {}{}, {}{}", range.lo->open ? "(" : "[", num(range.lo->value),
                       num(range.hi->value), range.hi->open ? ")" : "]");
  }
  if (range.lo) return fmt::format("{} {}", range.lo->open ? ">" : ">=", num(range.lo->value));
  if (range.hi) return fmt::format("{} {}", range.hi->open ? "<" : "<=", num(range.hi->value));
  return {};
}

bool bare_key(std::string_view key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

std::string quoted_list(Choices choices) {
  std::string out;
  for (std::string_view c : choices) {
    if (!out.empty()) out += ", ";
    out += fmt::format("\"{}\"", c);
  }
  return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0U : 1U)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string format_double(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  std::array<char, 64> buf{};
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), value);
  std::string out(buf.data(), end);
  if (out.find_first_of(".eE") == std::string::npos) out += ".0";
  return out;
}

std::string describe_range(const NumericRange& range) {
  std::string tail = range_tail(range);
  return tail.empty() ? tail : "must be " + tail;
}

bool in_range(const NumericRange& range, double value) {
  if (!std::isfinite(value)) return false;
  if (range.lo && !(range.lo->open ? value > range.lo->value : value >= range.lo->value)) return false;
  if (range.hi && !(range.hi->open ? value < range.hi->value : value <= range.hi->value)) return false;
  return true;
}

std::string shown(std::string_view text, std::size_t max_bytes) {
  std::string_view head = text;
  if (text.size() > max_bytes) {
    std::size_t end = max_bytes;
    // Do not split a UTF-8 sequence: back up over continuation bytes.
    while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0U) == 0x80U) --end;
    head = text.substr(0, end);
  }
  std::string out;
  out.reserve(head.size());
  for (const char c : head) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (u < 0x20U || u == 0x7FU) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  if (head.size() < text.size()) out += fmt::format("… ({} bytes)", text.size());
  return out;
}

std::string toml_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\f': out += "\\f"; break;
      case '\r': out += "\\r"; break;
      default:
        if (u < 0x20U || u == 0x7FU) {
          out += fmt::format("\\u{:04X}", u);
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string toml_key(std::string_view key) { return bare_key(key) ? std::string(key) : toml_string(key); }

void IssueList::add(ConfigIssue issue) {
  if (full()) {
    ++dropped_;
    return;
  }
  kept_.push_back(std::move(issue));
}

void IssueList::add(std::string path, std::string message) {
  add(ConfigIssue{std::move(path), std::move(message), "", 0, 0});
}

void IssueList::add_all(const ConfigError& error) {
  for (const ConfigIssue& issue : error.issues()) add(issue);
  count_dropped(error.omitted());
}

void IssueList::throw_if_any() {
  if (!empty()) throw ConfigError(std::move(kept_), dropped_);
}

void check_number(IssueList& issues, const std::string& path, const NumericRange& range, double value,
                  std::string_view shown_value) {
  if (in_range(range, value)) return;
  if (issues.full()) {
    issues.count_dropped();
    return;
  }
  if (std::isfinite(value)) {
    issues.add(path, fmt::format("{} {}; got {}", path, describe_range(range), shown_value));
    return;
  }
  const std::string tail = range_tail(range);
  issues.add(path, fmt::format("{} must be a finite number{}{}; got {}", path, tail.empty() ? "" : " ", tail,
                               shown_value));
}

void check_number(IssueList& issues, const std::string& path, const NumericRange& range, double value) {
  check_number(issues, path, range, value, format_double(value));
}

std::string_view FieldReader::type_name(const toml::node& node) {
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

std::string FieldReader::render(const toml::node& node) {
  std::ostringstream out;
  if (const toml::array* array = node.as_array(); array != nullptr && array->size() > kMaxRenderedArray) {
    // Print only the head of a long array: the message keeps only that much anyway.
    toml::array head;
    for (std::size_t i = 0; i < kMaxRenderedArray; ++i) head.push_back(*array->get(i));
    out << head;
  } else if (const toml::table* table = node.as_table();
             table != nullptr && table->size() > kMaxRenderedArray) {
    out << "{ " << table->size() << " keys }";
  } else {
    node.visit([&](const auto& n) { out << n; });
  }
  return shown(out.str());
}

void FieldReader::issue(const std::string& path, const toml::node& node, std::string message) {
  if (issues_.full()) {
    issues_.count_dropped();
    return;
  }
  const auto& begin = node.source().begin;
  issues_.add(ConfigIssue{path, std::move(message), std::string(source_), begin.line, begin.column});
}

void FieldReader::wrong_type(const std::string& path, const toml::node& node, std::string_view expected) {
  if (issues_.full()) {
    issues_.count_dropped();
    return;
  }
  issue(path, node, fmt::format("{} must be {}; got {} {}", path, expected, type_name(node), render(node)));
}

void FieldReader::not_a_choice(const std::string& path, const toml::node& node, Choices choices) {
  if (issues_.full()) {
    issues_.count_dropped();
    return;
  }
  issue(path, node, fmt::format("{} must be one of {}; got {}", path, quoted_list(choices), render(node)));
}

void FieldReader::remember(const std::string& path, const toml::node& node) {
  if (locations_ == nullptr) return;
  const auto& begin = node.source().begin;
  locations_->insert_or_assign(path, Location{std::string(source_), begin.line, begin.column});
}

void FieldReader::read_table(const toml::table& table, const std::string& path, const TableSpec& spec) {
  for (const auto& [key, node] : table) {
    const std::string_view name = key.str();
    const std::string child = path.empty() ? shown(name) : fmt::format("{}.{}", path, shown(name));
    const auto field =
        std::find_if(spec.fields.begin(), spec.fields.end(), [&](const Field& f) { return f.key == name; });
    if (field != spec.fields.end()) {
      remember(child, node);
      read_value(node, child, *field);
      continue;
    }
    const auto sub = std::find_if(spec.tables.begin(), spec.tables.end(),
                                  [&](const TableSpec& t) { return t.key == name; });
    if (sub == spec.tables.end()) {
      unknown_key(child, node, name, path, spec);
      continue;
    }
    const toml::table* sub_table = node.as_table();
    if (sub_table == nullptr) {
      wrong_type(child, node, "a table");
      continue;
    }
    remember(child, node);
    if (sub->read_custom) {
      sub->read_custom(*sub_table, child);
    } else {
      read_table(*sub_table, child, *sub);
    }
  }
}

void FieldReader::unknown_key(const std::string& path, const toml::node& node, std::string_view key,
                              const std::string& table_path, const TableSpec& spec) {
  if (issues_.full()) {
    issues_.count_dropped();
    return;
  }
  for (const Renamed& r : renamed_) {
    if (r.path == path) {
      issue(path, node, fmt::format("{} was renamed to {}", path, r.now));
      return;
    }
  }
  std::vector<std::string_view> known;
  known.reserve(spec.fields.size() + spec.tables.size());
  for (const Field& f : spec.fields) known.push_back(f.key);
  for (const TableSpec& t : spec.tables) known.push_back(t.key);
  std::string message = table_path.empty() ? fmt::format("{} is not a known section", path)
                                           : fmt::format("{} is not a known key of [{}]", path, table_path);
  if (auto suggestion = closest_key(key, known)) {
    message += fmt::format("; did you mean '{}'?", *suggestion);
  } else {
    message += fmt::format(" (known: {})", fmt::join(known, ", "));
  }
  issue(path, node, std::move(message));
}

void FieldReader::read_value(const toml::node& node, const std::string& path, const Field& field) {
  const std::size_t before = issues_.size();
  std::visit(
      [&](const auto& target) {
        using T = std::remove_cvref_t<decltype(target)>;
        if constexpr (std::is_same_v<T, bool*>) {
          if (const auto* v = node.as_boolean()) {
            *target = v->get();
          } else {
            wrong_type(path, node, "a boolean (true or false)");
          }
        } else if constexpr (std::is_same_v<T, double*>) {
          // Non-finite values are read and then rejected by check_number(),
          // so reading and validation of built values say the same thing.
          if (const auto* v = node.as_floating_point()) {
            *target = v->get();
          } else if (const auto* i = node.as_integer()) {
            *target = static_cast<double>(i->get());
          } else {
            wrong_type(path, node, "a number");
          }
        } else if constexpr (std::is_same_v<T, std::uint32_t*>) {
          if (auto v = read_unsigned(node, path, std::numeric_limits<std::uint32_t>::max())) {
            *target = static_cast<std::uint32_t>(*v);
          }
        } else if constexpr (std::is_same_v<T, std::uint64_t*>) {
          if (auto v = read_unsigned(node, path, std::numeric_limits<std::uint64_t>::max())) *target = *v;
        } else if constexpr (std::is_same_v<T, std::string*>) {
          if (const auto* v = node.as_string()) {
            if (!field.choices.empty() &&
                std::find(field.choices.begin(), field.choices.end(), v->get()) == field.choices.end()) {
              not_a_choice(path, node, field.choices);
            } else {
              *target = v->get();
            }
          } else {
            wrong_type(path, node, "a string");
          }
        } else if constexpr (std::is_same_v<T, std::optional<std::uint64_t>*>) {
          if (const auto* s = node.as_string(); s != nullptr && s->get() == "auto") {
            *target = std::nullopt;
          } else if (node.is_integer()) {
            if (auto v = read_unsigned(node, path, std::numeric_limits<std::uint64_t>::max())) *target = *v;
          } else {
            wrong_type(path, node, "a positive integer or \"auto\"");
          }
        } else if constexpr (std::is_same_v<T, std::vector<std::uint32_t>*>) {
          const toml::array* array = node.as_array();
          if (array == nullptr) {
            wrong_type(path, node, "an array of token ids");
            return;
          }
          std::vector<std::uint32_t> ids;
          ids.reserve(array->size());
          bool ok = true;
          for (std::size_t i = 0; i < array->size(); ++i) {
            const toml::node& item = *array->get(i);
            const auto* v = item.as_integer();
            if (v != nullptr && v->get() >= 0 && v->get() <= std::numeric_limits<std::uint32_t>::max()) {
              ids.push_back(static_cast<std::uint32_t>(v->get()));
              continue;
            }
            ok = false;
            if (issues_.full()) {
              issues_.count_dropped();
            } else {
              (void)read_unsigned(item, fmt::format("{}[{}]", path, i),
                                  std::numeric_limits<std::uint32_t>::max());
            }
          }
          if (ok) *target = std::move(ids);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>*>) {
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
              ok = false;
              if (issues_.full()) {
                issues_.count_dropped();
              } else {
                wrong_type(fmt::format("{}[{}]", path, i), item, "a string");
              }
            }
          }
          if (ok) *target = std::move(items);
        } else if constexpr (std::is_same_v<T, ChoiceTarget>) {
          if (auto index = read_choice(node, path, target.spellings)) target.assign(*index);
        }
      },
      field.target);
  if (issues_.size() != before) reject(path);
}

std::optional<std::uint64_t> FieldReader::read_unsigned(const toml::node& node, const std::string& path,
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

std::optional<std::size_t> FieldReader::read_choice(const toml::node& node, const std::string& path,
                                                    Choices choices) {
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

std::optional<toml::table> parse_document(std::string_view toml_text, std::string_view source_name,
                                          IssueList& issues) {
  // Bounded before toml++ recurses into it (config/input_shape.h).
  if (const auto deep = input_shape::toml_too_deep(toml_text)) {
    issues.add(ConfigIssue{"", fmt::format("TOML document too deep: {} (at byte {})", deep->what, deep->byte),
                           std::string(source_name), static_cast<std::uint32_t>(deep->line),
                           static_cast<std::uint32_t>(deep->column)});
    return std::nullopt;
  }
  try {
    return toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& error) {
    const auto& begin = error.source().begin;
    issues.add(ConfigIssue{"", fmt::format("TOML syntax error: {}", shown(error.description(), 256)),
                           std::string(source_name), begin.line, begin.column});
    return std::nullopt;
  }
}

std::optional<std::string_view> closest_key(std::string_view key, std::span<const std::string_view> known) {
  std::optional<std::string_view> best;
  std::size_t best_distance = std::max<std::size_t>(3, key.size() / 3) + 1;
  for (std::string_view candidate : known) {
    // The distance is at least the length difference: skip the O(n*m) work
    // for keys that cannot be close (a 1 MB key against short names).
    const std::size_t gap =
        key.size() > candidate.size() ? key.size() - candidate.size() : candidate.size() - key.size();
    if (gap >= best_distance) continue;
    const std::size_t d = edit_distance(key, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  if (best || key.size() < 4) return best;
  // Abbreviations ("capacity" for "capacity_bytes"): the key's characters
  // appear in order in the candidate.
  const auto is_subsequence = [](std::string_view small, std::string_view large) {
    if (small.size() > large.size()) return false;
    std::size_t i = 0;
    for (char c : large) {
      if (i < small.size() && small[i] == c) ++i;
    }
    return i == small.size();
  };
  best_distance = std::numeric_limits<std::size_t>::max();
  for (std::string_view candidate : known) {
    if (!is_subsequence(key, candidate)) continue;
    const std::size_t d = edit_distance(key, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

}  // namespace meridian::toml_fields
