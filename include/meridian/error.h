// Meridian's typed error model.
//
// Every error Meridian raises derives from meridian::Error. Configuration
// problems are reported as ConfigError, which carries one ConfigIssue per
// problem found, each naming the dotted field path
// ("entropy.ema_alpha must be in (0, 1]; got 1.5").
//
// Thread-safety: these are plain value types; distinct instances may be used
// from different threads, a shared instance only for reading.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace meridian {

/// Base class of every exception Meridian throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One problem found while parsing or validating configuration.
struct ConfigIssue {
  std::string path;          ///< Dotted path of the offending field, e.g. "entropy.ema_alpha".
  std::string message;       ///< Full sentence starting with the path, e.g. "<path> must be > 0; got 0".
  std::string source;        ///< File name (or "<string>") the value came from; empty if unknown.
  std::uint32_t line = 0;    ///< 1-based line of the value, 0 if unknown.
  std::uint32_t column = 0;  ///< 1-based column of the value, 0 if unknown.

  /// The message, followed by " (at SOURCE:LINE:COLUMN)" when the location is known.
  [[nodiscard]] std::string describe() const;

  friend bool operator==(const ConfigIssue&, const ConfigIssue&) = default;
};

/// Thrown when configuration cannot be parsed or is invalid. what() lists every
/// issue, one per line, each starting with its dotted path.
class ConfigError : public Error {
 public:
  explicit ConfigError(std::vector<ConfigIssue> issues);

  [[nodiscard]] const std::vector<ConfigIssue>& issues() const noexcept { return issues_; }

 private:
  std::vector<ConfigIssue> issues_;
};

/// Thrown when a tokenizer file cannot be read or does not match the model config.
class TokenizerError : public Error {
 public:
  using Error::Error;
};

}  // namespace meridian
