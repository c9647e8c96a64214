// The "meridian" logger (meridian/log.h): spdlog, header-only, one sink.
#include "meridian/log.h"

#include <array>
#include <cstdio>
#include <ctime>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "meridian/error.h"
#include "sync/mutex.h"
#include <spdlog/details/log_msg.h>
#include <spdlog/formatter.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>

namespace meridian {

namespace log_detail {
std::atomic<LogLevel> g_level{LogLevel::kInfo};
}  // namespace log_detail

namespace {

constexpr std::array<std::string_view, 6> kLevelNames{"trace", "debug", "info", "warn", "error", "off"};
constexpr std::array<std::string_view, 2> kFormatNames{"text", "json"};
constexpr std::string_view kLoggerName = "meridian";

std::atomic<LogFormat> g_format{LogFormat::kText};
sync::Mutex g_configure_mutex;  // a format and its formatter change together

spdlog::level::level_enum to_spdlog(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::kTrace: return spdlog::level::trace;
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarn: return spdlog::level::warn;
    case LogLevel::kError: return spdlog::level::err;
    case LogLevel::kOff: break;
  }
  return spdlog::level::off;
}

// Our level names (the config's), not spdlog's ("warning", "critical").
std::string_view level_name(spdlog::level::level_enum level) noexcept {
  switch (level) {
    case spdlog::level::trace: return "trace";
    case spdlog::level::debug: return "debug";
    case spdlog::level::info: return "info";
    case spdlog::level::warn: return "warn";
    default: return "error";
  }
}

// 2026-01-31T12:00:00.123Z: UTC, so lines from hosts in different zones sort.
std::string utc_timestamp(spdlog::log_clock::time_point when) {
  const auto since_epoch = when.time_since_epoch();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch - seconds).count();
  const std::time_t t = seconds.count();
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::array<char, 32> day{};
  const std::size_t n = std::strftime(day.data(), day.size(), "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03}Z", std::string_view(day.data(), n), millis);
}

// Both formats in one formatter, so a reconfigure swaps one object.
class LineFormatter final : public spdlog::formatter {
 public:
  explicit LineFormatter(LogFormat format) : format_(format) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const std::string ts = utc_timestamp(msg.time);
    const std::string_view logger(msg.logger_name.data(), msg.logger_name.size());
    const std::string_view text(msg.payload.data(), msg.payload.size());
    std::string line;
    if (format_ == LogFormat::kJson) {
      nlohmann::ordered_json j;
      j["ts"] = ts;
      j["level"] = level_name(msg.level);
      j["logger"] = logger;
      j["msg"] = text;
      // A message with invalid UTF-8 (a request's bytes) still yields valid JSON.
      line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    } else {
      line = fmt::format("[{}] [{}] [{}] {}", ts, logger, level_name(msg.level), text);
    }
    line += '\n';
    dest.append(line.data(), line.data() + line.size());
  }

  [[nodiscard]] std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<LineFormatter>(format_);
  }

 private:
  LogFormat format_;
};

// stderr, or a borrowed stream; base_sink's mutex serialises lines and swaps.
class RedirectableSink final : public spdlog::sinks::base_sink<sync::Mutex> {
 public:
  void set_stream(std::ostream* stream) {
    const sync::Lock lock(mutex_);
    stream_ = stream;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    if (stream_ != nullptr) {
      stream_->write(buf.data(), static_cast<std::streamsize>(buf.size()));
      stream_->flush();
    } else {
      std::fwrite(buf.data(), 1, buf.size(), stderr);  // stderr is unbuffered: a line lands whole
    }
  }
  void flush_() override {
    if (stream_ != nullptr) {
      stream_->flush();
    } else {
      std::fflush(stderr);
    }
  }

 private:
  std::ostream* stream_ = nullptr;
};

struct Logger {
  std::shared_ptr<RedirectableSink> sink = std::make_shared<RedirectableSink>();
  spdlog::logger logger{std::string(kLoggerName), sink};

  Logger() {
    sink->set_formatter(std::make_unique<LineFormatter>(LogFormat::kText));
    logger.set_level(spdlog::level::trace);  // filtering is should_log()'s
  }
};

// Function-local: constructed on first use, never before main's statics.
Logger& logger() {
  static Logger instance;
  return instance;
}

template <std::size_t N>
std::size_t index_of(std::string_view name, const std::array<std::string_view, N>& names,
                     std::string_view what) {
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == name) return i;
  }
  constexpr std::size_t kMaxShown = 40;
  const std::string shown = name.size() <= kMaxShown ? fmt::format("'{}'", name)
                                                     : fmt::format("'{}...'", name.substr(0, kMaxShown));
  throw InvalidArgument(
      fmt::format("{} must be one of \"{}\"; got {}", what, fmt::join(names, "\", \""), shown));
}

}  // namespace

LogLevel parse_log_level(std::string_view name) {
  return static_cast<LogLevel>(index_of(name, kLevelNames, "logging.level"));
}

LogFormat parse_log_format(std::string_view name) {
  return static_cast<LogFormat>(index_of(name, kFormatNames, "logging.format"));
}

std::string_view to_string(LogLevel level) noexcept {
  return kLevelNames.at(static_cast<std::size_t>(level));
}
std::string_view to_string(LogFormat format) noexcept {
  return kFormatNames.at(static_cast<std::size_t>(format));
}

void configure_logging(const LoggingConfig& config) {
  const LogLevel level = parse_log_level(config.level);
  const LogFormat format = parse_log_format(config.format);
  configure_logging(level, format);
}

void configure_logging(LogLevel level, LogFormat format) {
  Logger& l = logger();
  const sync::Lock lock(g_configure_mutex);
  if (g_format.load() != format) {
    l.sink->set_formatter(std::make_unique<LineFormatter>(format));
    g_format.store(format);
  }
  log_detail::g_level.store(level, std::memory_order_relaxed);
}

LogLevel log_level() noexcept { return log_detail::g_level.load(std::memory_order_relaxed); }
LogFormat log_format() noexcept { return g_format.load(); }

void log_message(LogLevel level, std::string_view message) noexcept {
  if (!should_log(level)) return;
  try {
    logger().logger.log(to_spdlog(level), message);
  } catch (...) {  // NOLINT(bugprone-empty-catch): a lost log line must not fail the caller
  }
}

void set_log_output(std::ostream* stream) { logger().sink->set_stream(stream); }

std::optional<std::uint64_t> LogRateLimiter::admit(Clock::time_point now) noexcept {
  const std::int64_t now_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  std::int64_t next = next_allowed_ns_.load(std::memory_order_relaxed);
  if (now_ns < next || !next_allowed_ns_.compare_exchange_strong(next, now_ns + interval_.count(),
                                                                 std::memory_order_relaxed)) {
    suppressed_.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  return suppressed_.exchange(0, std::memory_order_relaxed);
}

}  // namespace meridian
