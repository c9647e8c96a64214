// Meridian's logger: one process-wide logger named "meridian", writing to
// stderr (never stdout, which carries the CLI's reports), configured from
// [logging] (level, format). The implementation is spdlog (header-only, on
// the fmt the library already links); this header keeps it out of the
// public interface.
//
//   format "text": [2026-01-31T12:00:00.123Z] [meridian] [warn] message
//   format "json": {"ts":"2026-01-31T12:00:00.123Z","level":"warn","logger":"meridian","msg":"message"}
//
// Level and format names are the config's ("trace" ... "off"; "text",
// "json"), in both formats and in the Python plugin's `meridian` logger.
//
// Hot paths test should_log() (one relaxed atomic load) before they format
// anything, so a disabled level costs no formatting and no allocation.
//
// Thread-safety: every function here may be called from any thread, also
// while another thread reconfigures the logger; lines are written whole
// (the sink holds a mutex). Ownership: the logger lives until the process
// exits; a stream given to set_log_output() is borrowed, not owned.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <limits>
#include <optional>
#include <string_view>

#include "meridian/config.h"

namespace meridian {

enum class LogLevel : std::uint8_t { kTrace, kDebug, kInfo, kWarn, kError, kOff };
enum class LogFormat : std::uint8_t { kText, kJson };

/// "trace", "debug", "info", "warn", "error" or "off"; anything else throws
/// InvalidArgument listing the allowed values.
[[nodiscard]] LogLevel parse_log_level(std::string_view name);
/// "text" or "json"; anything else throws InvalidArgument listing them.
[[nodiscard]] LogFormat parse_log_format(std::string_view name);
[[nodiscard]] std::string_view to_string(LogLevel level) noexcept;
[[nodiscard]] std::string_view to_string(LogFormat format) noexcept;

/// Applies [logging] level and format. Throws InvalidArgument (nothing
/// changed) for values load_config() would have rejected.
void configure_logging(const LoggingConfig& config);
void configure_logging(LogLevel level, LogFormat format);

/// The level and format in effect (defaults: info, text).
[[nodiscard]] LogLevel log_level() noexcept;
[[nodiscard]] LogFormat log_format() noexcept;

/// True when a message at `level` would be written. Check it before
/// formatting a message on a hot path.
[[nodiscard]] inline bool should_log(LogLevel level) noexcept;

/// Writes `message` at `level` (dropped below the configured level; kOff is
/// never written). Never throws: a failing sink loses the line, not the caller.
void log_message(LogLevel level, std::string_view message) noexcept;

/// Sends log lines to `stream` instead of stderr (tests, embedders that
/// capture output); nullptr restores stderr. The stream must outlive its
/// use: reset to nullptr before destroying it.
void set_log_output(std::ostream* stream);

/// At most one message per `interval` for one kind of event; the events in
/// between are counted and reported with the next message, so a condition
/// that repeats every step cannot flood the log.
/// Thread-safety: admit() may race from any thread (atomics; under a race
/// exactly one caller per interval is admitted).
class LogRateLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  explicit LogRateLimiter(std::chrono::nanoseconds interval) noexcept : interval_(interval) {}

  /// std::nullopt: suppressed (and counted). Otherwise admitted, with the
  /// number of events suppressed since the previous admitted one.
  [[nodiscard]] std::optional<std::uint64_t> admit(Clock::time_point now = Clock::now()) noexcept;

  [[nodiscard]] std::chrono::nanoseconds interval() const noexcept { return interval_; }

 private:
  std::chrono::nanoseconds interval_;
  std::atomic<std::int64_t> next_allowed_ns_{std::numeric_limits<std::int64_t>::min()};
  std::atomic<std::uint64_t> suppressed_{0};
};

namespace log_detail {
// The configured level, read without touching the logger (no static-init guard).
extern std::atomic<LogLevel> g_level;
}  // namespace log_detail

inline bool should_log(LogLevel level) noexcept {
  return level != LogLevel::kOff && level >= log_detail::g_level.load(std::memory_order_relaxed);
}

}  // namespace meridian
