// The shape of a TOML or JSON document, bounded before a parser sees it.
//
// toml++ builds a dotted key or table header of N parts as N nested tables and
// walks them recursively, and nlohmann::json prints a nested value
// recursively: a few tens of KiB of `a.a.a…` or `[[[…` crash either by stack
// overflow. Every reader of meridian.toml, replay parameters, traces and
// tokenizer.json runs these linear scans first (no recursion, no allocation
// beyond a small stack of brackets), so no input can take a parser that deep.
//
// Internal header (not installed). Thread-safety: reentrant; no state.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace meridian::input_shape {

/// Arrays and tables (or JSON objects) inside one another. Meridian's own
/// documents are at most 3 deep and a Hugging Face tokenizer.json about 6.
inline constexpr std::size_t kMaxNesting = 64;
/// Parts of one dotted TOML key or table header (`a.b.c` has 3).
inline constexpr std::size_t kMaxKeyParts = 64;

/// Where a document first exceeds a bound: 1-based line and column, the
/// 0-based byte offset, and what was exceeded.
struct ShapeIssue {
  std::size_t line = 1;
  std::size_t column = 1;
  std::size_t byte = 0;
  std::string what;
};

/// The first place `text` (TOML) nests deeper than kMaxNesting or has a key of
/// more than kMaxKeyParts parts; std::nullopt when it has neither. Strings,
/// comments and quoted keys are skipped as TOML 1.0 defines them; anything
/// else malformed is left to the parser.
[[nodiscard]] std::optional<ShapeIssue> toml_too_deep(std::string_view text);

/// The first place `text` (JSON) nests arrays and objects deeper than
/// kMaxNesting; std::nullopt otherwise.
[[nodiscard]] std::optional<ShapeIssue> json_too_deep(std::string_view text);

}  // namespace meridian::input_shape
