// The CLI's logging: [logging] from the loaded configuration, with
// --log-level over its level. Log lines go to stderr; stdout keeps only the
// commands' own output (reports, JSON), so it stays machine-readable.
//
// Thread-safety: call add_log_level_option() and configure_cli_logging()
// from main's thread before any worker starts; the log functions they set
// up are thread-safe (meridian/log.h).
#pragma once

#include <filesystem>
#include <vector>

#include <CLI/CLI.hpp>

#include "meridian/config.h"

namespace meridian::cli {

/// Registers --log-level (trace|debug|info|warn|error|off) on the app; it is
/// accepted before or after the subcommand. Call before adding subcommands
/// (they inherit fallthrough, which lets the option follow them). A bad value
/// is a usage error (exit 2).
void add_log_level_option(CLI::App& app);

/// Configures the logger from `config`, with --log-level (when given) over
/// config.level.
void configure_cli_logging(const LoggingConfig& config);

/// Logs which configuration is in effect: info names the files, debug adds
/// the resolved configuration as TOML.
void log_config_loaded(const std::vector<std::filesystem::path>& files, const MeridianConfig& config);

}  // namespace meridian::cli
