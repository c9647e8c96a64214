// fmt-style front ends of meridian/log.h for the library's own sources (not
// installed: the public header stays free of fmt). Each checks should_log()
// before it formats, so a disabled level costs one relaxed load, and none
// throws (a message that fails to format is lost, not the caller's step).
//
// Thread-safety: as meridian/log.h.
#pragma once

#include <string>
#include <utility>

#include <fmt/format.h>

#include "meridian/log.h"

namespace meridian::log_detail {

template <class... Args>
void logf(LogLevel level, fmt::format_string<Args...> format, Args&&... args) noexcept {
  if (!should_log(level)) return;
  try {
    log_message(level, fmt::format(format, std::forward<Args>(args)...));
  } catch (...) {  // NOLINT(bugprone-empty-catch): logging never fails the caller
  }
}

/// Like logf(), at most once per the limiter's interval; an admitted message
/// says how many like it were suppressed since the previous one.
template <class... Args>
void logf_limited(LogRateLimiter& limiter, LogLevel level, fmt::format_string<Args...> format,
                  Args&&... args) noexcept {
  if (!should_log(level)) return;
  const std::optional<std::uint64_t> suppressed = limiter.admit();
  if (!suppressed) return;
  try {
    std::string message = fmt::format(format, std::forward<Args>(args)...);
    if (*suppressed > 0) {
      message += fmt::format(" ({} more like this suppressed since the previous message)", *suppressed);
    }
    log_message(level, message);
  } catch (...) {  // NOLINT(bugprone-empty-catch): logging never fails the caller
  }
}

}  // namespace meridian::log_detail
