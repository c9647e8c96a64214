// Meridian's typed error model.
//
// Every exception Meridian throws derives from meridian::Error; nothing
// throws std::invalid_argument, std::out_of_range or a bare runtime_error.
// Configuration problems are reported as ConfigError, which carries one
// ConfigIssue per problem found, each naming the dotted field path
// ("entropy.ema_alpha must be in (0, 1]; got 1.5"). Hot paths (router token
// batches, block allocation, the scheduler step) report status codes instead.
//
// At the Python boundary: ConfigError, TokenizerError, TraceError and
// InvalidArgument become ValueError, NotFound becomes KeyError, OutOfRange
// becomes IndexError, KernelError is meridian.KernelError (a RuntimeError),
// any other Error is RuntimeError.
//
// Thread-safety: these are plain value types; distinct instances may be used
// from different threads, a shared instance only for reading.
#pragma once

#include <cstddef>
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

/// Thrown when configuration cannot be parsed or is invalid. what() lists the
/// issues, one per line, each starting with its dotted path. At most kMaxIssues
/// are kept (a hostile file could otherwise hold millions); what() then ends
/// with "… and N more problems".
class ConfigError : public Error {
 public:
  static constexpr std::size_t kMaxIssues = 50;

  /// Keeps the first kMaxIssues of `issues`; `omitted` counts problems found
  /// but not kept by the caller, and is added to those cut here.
  explicit ConfigError(std::vector<ConfigIssue> issues, std::size_t omitted = 0);

  [[nodiscard]] const std::vector<ConfigIssue>& issues() const noexcept { return issues_; }
  /// Problems found beyond issues(); issues().size() + omitted() is the total.
  [[nodiscard]] std::size_t omitted() const noexcept { return omitted_; }

 private:
  std::vector<ConfigIssue> issues_;
  std::size_t omitted_ = 0;
};

/// A caller passed a value outside an API's contract (a negative size, a
/// duplicate request id, an unknown policy name on a command line).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// A name looked up does not exist (a metric, a request id).
class NotFound : public Error {
 public:
  using Error::Error;
};

/// An index or count lies outside the valid range of a container.
class OutOfRange : public Error {
 public:
  using Error::Error;
};

/// Thrown when a tokenizer file cannot be read or does not match the model config.
class TokenizerError : public Error {
 public:
  using Error::Error;
};

}  // namespace meridian
