// The `meridian` command-line tool.
#include <cstdio>
#include <exception>
#include <functional>
#include <vector>

#include <fmt/format.h>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"Meridian: phase-aware scheduling for reasoning-model serving"};
  app.set_version_flag("--version", "meridian 0.1.0");
  app.require_subcommand(1);

  std::vector<std::pair<CLI::App*, std::function<int()>>> commands;
  auto run_check_config = meridian::cli::add_check_config(app);
  commands.emplace_back(app.get_subcommand("check-config"), run_check_config);
  auto run_bench_probe = meridian::cli::add_bench_probe(app);
  commands.emplace_back(app.get_subcommand("bench-probe"), run_bench_probe);
  auto run_replay = meridian::cli::add_replay(app);
  commands.emplace_back(app.get_subcommand("replay"), run_replay);

  CLI11_PARSE(app, argc, argv);
  try {
    for (auto& [sub, run] : commands) {
      if (sub->parsed()) return run();
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "meridian: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
