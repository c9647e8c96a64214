// The `meridian` command-line tool. Exit status: 0 success, 1 the work
// failed (invalid config, bad trace, ...), 2 the command line itself is wrong.
#include <cstdio>
#include <exception>
#include <functional>
#include <new>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "log_options.h"
#include "option_checks.h"

int main(int argc, char** argv) {
  using meridian::cli::kUsageExitCode;
  CLI::App app{"Meridian: phase-aware scheduling for reasoning-model serving"};
  app.set_version_flag("--version", "meridian 0.1.0");
  app.require_subcommand(1);
  meridian::cli::add_log_level_option(app);  // before the subcommands: they inherit its fallthrough

  std::vector<std::pair<CLI::App*, std::function<int()>>> commands;
  auto run_check_config = meridian::cli::add_check_config(app);
  commands.emplace_back(app.get_subcommand("check-config"), run_check_config);
  auto run_bench_probe = meridian::cli::add_bench_probe(app);
  commands.emplace_back(app.get_subcommand("bench-probe"), run_bench_probe);
  auto run_replay = meridian::cli::add_replay(app);
  commands.emplace_back(app.get_subcommand("replay"), run_replay);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    fmt::print(stderr, "meridian: error: {}\nRun with --help for more information.\n", e.what());
    return kUsageExitCode;
  }
  try {
    meridian::cli::configure_cli_logging({});  // --log-level now; commands that load a config redo it
    for (auto& [sub, run] : commands) {
      if (sub->parsed()) return run();
    }
  } catch (const meridian::cli::UsageError& e) {
    fmt::print(stderr, "meridian: error: {}\n", e.what());
    return kUsageExitCode;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "meridian: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "meridian: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
