// meridian_soak: runs the soak (soak_engine.h) and checks its end state and
// memory. `make soak` runs a million requests; ctest's soak_short 20 thousand.
// Exit status: 0 all checks passed, 1 a check failed, 2 bad arguments.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "meridian/error.h"
#include "soak_engine.h"

namespace {

using meridian::soak::Checkpoint;
using meridian::soak::SoakOptions;
using meridian::soak::SoakResult;

constexpr double kMiB = 1024.0 * 1024.0;

struct Args {
  SoakOptions soak;
  bool check_rss = true;
  double max_rss_mib = 256;   // peak resident set size
  double rss_growth_mib = 4;  // allowed growth after the first checkpoint (warm-up)
  std::string json_path;
};

const char* const kUsage =
    "usage: meridian_soak [--requests N] [--seed N] [--arrival-rate R] [--checkpoints N]\n"
    "                     [--outgrow-every N] [--max-rss-mib M] [--rss-growth-mib M] [--no-rss-check]\n"
    "                     [--json FILE]\n";

template <typename T>
T parse_number(std::string_view flag, std::string_view text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) {
    throw meridian::InvalidArgument(fmt::format("{}: '{}' is not a valid number", flag, text));
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(value) || value <= 0)
      throw meridian::InvalidArgument(fmt::format("{} must be finite and > 0", flag));
  }
  return value;
}

Args parse_args(int argc, char** argv) {
  Args a;
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view flag = args[i];
    const auto value = [&]() -> std::string_view {
      if (i + 1 >= args.size()) throw meridian::InvalidArgument(fmt::format("{} needs a value", flag));
      return args[++i];
    };
    if (flag == "--requests") {
      a.soak.requests = parse_number<std::uint64_t>(flag, value());
    } else if (flag == "--seed") {
      a.soak.seed = parse_number<std::uint64_t>(flag, value());
    } else if (flag == "--arrival-rate") {
      a.soak.arrival_rate = parse_number<double>(flag, value());
    } else if (flag == "--checkpoints") {
      a.soak.checkpoints = parse_number<std::uint32_t>(flag, value());
    } else if (flag == "--max-rss-mib") {
      a.max_rss_mib = parse_number<double>(flag, value());
    } else if (flag == "--rss-growth-mib") {
      a.rss_growth_mib = parse_number<double>(flag, value());
    } else if (flag == "--outgrow-every") {
      a.soak.outgrow_every = parse_number<std::uint64_t>(flag, value());
    } else if (flag == "--no-rss-check") {
      a.check_rss = false;
    } else if (flag == "--json") {
      a.json_path = value();
    } else {
      throw meridian::InvalidArgument(fmt::format("unknown option '{}'", flag));
    }
  }
  if (a.soak.requests == 0 || a.soak.checkpoints < 2) {
    throw meridian::InvalidArgument("--requests must be >= 1 and --checkpoints >= 2");
  }
  return a;
}

double mib(std::uint64_t bytes) { return static_cast<double>(bytes) / kMiB; }

void print_report(const Args& a, const SoakResult& r) {
  fmt::print("meridian soak: {} requests arrived (seed {}, {} conversations/s)\n", r.arrived, a.soak.seed,
             a.soak.arrival_rate);
  fmt::print("  completed {}, cancelled {}, aborted {}; {} later turns of cut-short conversations not sent\n",
             r.completed, r.cancelled, r.aborted, r.dropped_follow_ups);
  fmt::print(
      "  simulated {:.0f} s in {:.1f} s: {} steps, {} tokens, {} preemptions, {} probe passes, "
      "{} prefix-hit blocks, {} forced exits\n",
      r.sim_s, r.wall_s, r.steps, r.tokens, r.preemptions, r.probe_passes, r.prefix_hit_blocks,
      r.router.forced_exits);
  fmt::print("  {:>6} {:>9} {:>8} {:>7} {:>8} {:>6} {:>7} {:>9} {:>6} {:>8}\n", "done", "retired", "sim_s",
             "wall_s", "rss_MiB", "live", "router", "scheduler", "ids", "kv_live");
  for (const Checkpoint& c : r.checkpoints) {
    fmt::print("  {:>5.0f}% {:>9} {:>8.0f} {:>7.1f} {:>8.1f} {:>6} {:>7} {:>9} {:>6} {:>8}\n",
               c.fraction * 100, c.retired, c.sim_s, c.wall_s, mib(c.rss_bytes), c.live, c.router_tracked,
               c.scheduled, c.mapped_ids, c.kv_live_blocks);
  }
  fmt::print("  peak RSS {:.1f} MiB\n", mib(r.peak_rss_bytes));
}

// Prints each check; returns whether all passed.
bool check(const Args& a, const SoakResult& r) {
  bool all = true;
  const auto expect = [&](bool ok, const std::string& what) {
    fmt::print("  {}  {}\n", ok ? "ok  " : "FAIL", what);
    all = all && ok;
  };
  fmt::print("checks:\n");
  expect(!r.stuck && r.arrived >= a.soak.requests && r.arrived + r.dropped_follow_ups == r.generated &&
             r.completed + r.cancelled + r.aborted == r.arrived,
         fmt::format("every request arrived and left (stuck: {})", r.stuck));
  expect(r.live == 0 && r.pending_follow_ups == 0 && r.router_tracked == 0 && r.scheduled == 0 &&
             r.mapped_ids == 0,
         fmt::format("no request tracked: router {}, scheduler {}, id map {}, engine {}, pending turns {}",
                     r.router_tracked, r.scheduled, r.mapped_ids, r.live, r.pending_follow_ups));
  expect(r.kv_live_blocks == 0 && r.kv_allocatable_blocks == r.kv_total_blocks && r.kv_invariants.empty(),
         fmt::format("every KV block free or cached: {} held, {}/{} allocatable, invariants {}",
                     r.kv_live_blocks, r.kv_allocatable_blocks, r.kv_total_blocks,
                     r.kv_invariants.empty() ? "hold" : r.kv_invariants));
  expect(r.router.begun == r.arrived && r.router.completed + r.router.ended == r.router.begun &&
             r.router.reaped == 0,
         fmt::format("router: begun {} = completed {} + ended {}, none reaped", r.router.begun,
                     r.router.completed, r.router.ended));
  if (!a.check_rss) {
    fmt::print("  skip  memory bound (--no-rss-check)\n");
    return all;
  }
  expect(mib(r.peak_rss_bytes) <= a.max_rss_mib,
         fmt::format("peak RSS {:.1f} MiB <= {:.0f} MiB", mib(r.peak_rss_bytes), a.max_rss_mib));
  const double base = mib(r.checkpoints.front().rss_bytes);
  double highest = base;
  for (const Checkpoint& c : r.checkpoints) highest = std::max(highest, mib(c.rss_bytes));
  expect(highest <= base + a.rss_growth_mib,
         fmt::format("RSS after warm-up stays within {:.0f} MiB of {:.1f} MiB (highest {:.1f} MiB)",
                     a.rss_growth_mib, base, highest));
  return all;
}

void write_json(const std::string& path, const Args& a, const SoakResult& r) {
  nlohmann::ordered_json j;
  j["requests"] = r.arrived;
  j["seed"] = a.soak.seed;
  j["arrival_rate"] = a.soak.arrival_rate;
  j["completed"] = r.completed;
  j["cancelled"] = r.cancelled;
  j["aborted"] = r.aborted;
  j["steps"] = r.steps;
  j["tokens"] = r.tokens;
  j["preemptions"] = r.preemptions;
  j["sim_s"] = r.sim_s;
  j["wall_s"] = r.wall_s;
  j["peak_rss_mib"] = mib(r.peak_rss_bytes);
  for (const Checkpoint& c : r.checkpoints) {
    j["checkpoints"].push_back({{"fraction", c.fraction},
                                {"retired", c.retired},
                                {"sim_s", c.sim_s},
                                {"wall_s", c.wall_s},
                                {"rss_mib", mib(c.rss_bytes)},
                                {"live", c.live}});
  }
  std::ofstream out(path);
  out << j.dump(2) << '\n';
  if (!out) throw meridian::Error(fmt::format("cannot write {}", path));
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  try {
    args = parse_args(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "meridian_soak: {}\n{}", e.what(), kUsage);
    return 2;
  }
  try {
    const SoakResult result = meridian::soak::run_soak(args.soak);
    print_report(args, result);
    const bool ok = check(args, result);
    if (!args.json_path.empty()) write_json(args.json_path, args, result);
    fmt::print("soak: {}\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "meridian_soak: {}\n", e.what());
    return 1;
  }
}
