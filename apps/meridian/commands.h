// Subcommands of the `meridian` CLI. Each registers itself on the app and
// returns the process exit code when run.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace meridian::cli {

/// Registers `check-config`; the returned function runs it after parsing.
std::function<int()> add_check_config(CLI::App& app);

/// Registers `bench-probe` (the entropy-probe kernel benchmark).
std::function<int()> add_bench_probe(CLI::App& app);

/// Registers `replay` (the A/B replay simulator).
std::function<int()> add_replay(CLI::App& app);

}  // namespace meridian::cli
