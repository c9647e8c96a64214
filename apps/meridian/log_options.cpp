// --log-level and the CLI's logging set-up (log_options.h).
#include "log_options.h"

#include <optional>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "meridian/log.h"

namespace meridian::cli {
namespace {

// Set while parsing (main's thread), read after it.
std::optional<std::string>& log_level_override() {
  static std::optional<std::string> level;
  return level;
}

CLI::Validator log_level_name() {
  return {[](std::string& text) -> std::string {
            try {
              (void)parse_log_level(text);
              return {};
            } catch (const InvalidArgument&) {
              constexpr std::size_t kMaxShown = 40;
              const std::string shown = text.size() <= kMaxShown ? text : text.substr(0, kMaxShown) + "...";
              return fmt::format(
                  "must be one of \"trace\", \"debug\", \"info\", \"warn\", \"error\", \"off\"; got '{}'",
                  shown);
            }
          },
          "trace|debug|info|warn|error|off"};
}

}  // namespace

void add_log_level_option(CLI::App& app) {
  app.fallthrough();
  app.add_option_function<std::string>(
         "--log-level", [](const std::string& level) { log_level_override() = level; },
         "log level on stderr: trace, debug, info, warn, error or off (overrides [logging] level)")
      ->check(log_level_name());
}

void configure_cli_logging(const LoggingConfig& config) {
  LoggingConfig effective = config;
  if (log_level_override()) effective.level = *log_level_override();
  configure_logging(effective);
}

void log_config_loaded(const std::vector<std::filesystem::path>& files, const MeridianConfig& config) {
  if (should_log(LogLevel::kInfo)) {
    std::vector<std::string> names;
    names.reserve(files.size());
    for (const auto& f : files) names.push_back(f.string());
    log_message(LogLevel::kInfo, files.empty()
                                     ? std::string("configuration: built-in defaults")
                                     : fmt::format("configuration loaded from {}", fmt::join(names, ", ")));
  }
  if (should_log(LogLevel::kDebug)) {
    log_message(LogLevel::kDebug, "resolved configuration:\n" + to_toml(config));
  }
}

}  // namespace meridian::cli
