// meridian replay: the A/B replay simulator (docs/replay.md).
//   meridian replay [--policies all|p1,p2] [--seed N] [--seeds K] [--jobs J] [--arrival-rate R]
//                   [--duration-s S] [--reasoning-ratio X] [--workload KIND] [--trace FILE]
//                   [--params replay.toml] [--config meridian.toml]... [--model NAME]
//                   [--goodput] [--pareto] [--load-sweep R1,R2,...] [--out-dir DIR]
//                   [--no-progress] [--print-params]
//                   [--metrics-port P [--metrics-host H] [--realtime-factor F] [--linger-s S]]
//                   [--disagg-fabric nixl|mooncake [--disagg-bandwidth-gbps X] [--disagg-latency-us Y]]
#include "meridian/replay.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "log_options.h"
#include "meridian/config.h"
#include "meridian/log.h"
#include "meridian/metrics.h"
#include "meridian/replay_study.h"
#include "meridian/slo_grid.h"
#include "meridian/telemetry.h"
#include "option_checks.h"
#include <unistd.h>

namespace meridian::cli {
namespace {

namespace fs = std::filesystem;
using sim::PolicyKind;

// Bounds of the options: each seed is a full run of every policy, each job a thread.
constexpr std::uint64_t kMaxSeeds = 1000;
constexpr std::uint64_t kMaxJobs = 1024;
constexpr double kMaxRate = 1e9;  // syntax only: [workload] bounds the rate and the request count
constexpr double kMaxDurationS = 1e12;
constexpr double kMaxRealtimeFactor = 1e9;
constexpr double kMaxLingerS = 1e7;  // about four months

struct ReplayCliOptions {
  std::string policies = "all";
  std::uint64_t seed = 42;
  std::uint32_t seeds = 5;
  unsigned jobs = 0;
  bool goodput = false;
  bool pareto = false;
  bool slo_grid = false;
  std::string ruler = "sustainable";
  bool window_check = false;
  std::optional<double> arrival_rate;
  std::optional<double> duration_s;
  std::optional<double> reasoning_ratio;
  std::optional<std::string> workload;
  std::string trace;
  std::string params_file;
  std::vector<std::string> config_files;
  std::string model = "qwen3";
  std::vector<double> load_sweep;
  std::string out_dir = "bench-out";
  bool no_progress = false;
  bool print_params = false;
  std::optional<std::uint16_t> metrics_port;
  std::string metrics_host = "127.0.0.1";
  std::optional<double> realtime_factor;
  double linger_s = 0;
  std::optional<std::string> disagg_fabric;
  std::optional<double> disagg_bandwidth_gbps;
  std::optional<double> disagg_latency_us;
};

// Live Prometheus metrics of one A/B run (--metrics-port): the registry, its
// feed and the HTTP server, alive until the command returns.
struct LiveMetrics {
  telemetry::MetricRegistry registry;
  telemetry::EngineMetrics feed{registry};
  std::unique_ptr<telemetry::MetricsServer> server;
};

// The policy whose run --metrics-port serves: meridian, else meridian-no-forcing.
PolicyKind observed_policy(const std::vector<PolicyKind>& policies) {
  for (const PolicyKind p : {PolicyKind::kMeridian, PolicyKind::kMeridianNoForcing}) {
    if (std::find(policies.begin(), policies.end(), p) != policies.end()) return p;
  }
  throw UsageError(
      "--metrics-port serves the run of policy meridian (or meridian-no-forcing); --policies names "
      "neither");
}

// Starts serving /metrics and hooks the observed run into `study`; with
// --realtime-factor F the run sleeps so that F simulated seconds take one wall second.
std::unique_ptr<LiveMetrics> start_live_metrics(const ReplayCliOptions& o,
                                                const std::vector<PolicyKind>& policies,
                                                sim::StudyOptions& study) {
  if (!o.metrics_port) return nullptr;
  if (!o.load_sweep.empty()) {
    throw UsageError("--metrics-port serves one A/B run; it cannot be used with --load-sweep");
  }
  auto live = std::make_unique<LiveMetrics>();
  study.observed_policy = observed_policy(policies);
  live->server = std::make_unique<telemetry::MetricsServer>(live->registry, o.metrics_host, *o.metrics_port);
  fmt::print(stderr, "serving metrics on {} (policy {}, seed {})\n", live->server->url(),
             sim::to_string(study.observed_policy), study.seeds.front());
  std::fflush(stderr);
  study.metrics = &live->feed;
  if (o.realtime_factor) {
    const double factor = *o.realtime_factor;
    study.on_time = [factor,
                     started = std::optional<std::chrono::steady_clock::time_point>()](double sim_s) mutable {
      if (!started) started = std::chrono::steady_clock::now();
      std::this_thread::sleep_until(*started +
                                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                        std::chrono::duration<double>(sim_s / factor)));
    };
  }
  return live;
}

// The replay as a command line that reproduces it.
std::string describe_command(const ReplayCliOptions& o) {
  std::string c =
      fmt::format("meridian replay --policies {} --seed {} --seeds {}", o.policies, o.seed, o.seeds);
  if (o.arrival_rate) c += fmt::format(" --arrival-rate {}", *o.arrival_rate);
  if (o.duration_s) c += fmt::format(" --duration-s {}", *o.duration_s);
  if (o.reasoning_ratio) c += fmt::format(" --reasoning-ratio {}", *o.reasoning_ratio);
  if (o.workload) c += fmt::format(" --workload {}", *o.workload);
  if (!o.trace.empty()) c += fmt::format(" --trace {}", o.trace);
  if (!o.params_file.empty()) c += fmt::format(" --params {}", o.params_file);
  for (const std::string& f : o.config_files) c += fmt::format(" --config {}", f);
  if (o.model != "qwen3") c += fmt::format(" --model {}", o.model);
  if (o.goodput) c += " --goodput";
  if (o.slo_grid) c += " --slo-grid";
  if (o.ruler != "sustainable") c += fmt::format(" --ruler {}", o.ruler);
  if (o.window_check) c += " --window-check";
  if (o.pareto) c += " --pareto";
  if (!o.load_sweep.empty()) c += fmt::format(" --load-sweep {}", fmt::join(o.load_sweep, ","));
  if (o.disagg_fabric) c += fmt::format(" --disagg-fabric {}", *o.disagg_fabric);
  if (o.disagg_bandwidth_gbps) c += fmt::format(" --disagg-bandwidth-gbps {}", *o.disagg_bandwidth_gbps);
  if (o.disagg_latency_us) c += fmt::format(" --disagg-latency-us {}", *o.disagg_latency_us);
  return c;
}

/// A one-line progress bar on stderr, shown only once a run has taken a second.
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled) {}
  void start(std::string label) {
    label_ = std::move(label);
    begin_ = std::chrono::steady_clock::now();
    last_ = begin_;
    shown_ = false;
  }
  void update(double fraction) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - begin_ < std::chrono::seconds(1)) return;
    if (shown_ && now - last_ < std::chrono::milliseconds(100) && fraction < 1.0) return;
    last_ = now;
    shown_ = true;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    const double elapsed = std::chrono::duration<double>(now - begin_).count();
    fmt::print(stderr, "\r{:<34} [{:#<{}}{:.<{}}] {:3.0f}% {:5.1f}s", label_, "", filled, "", kWidth - filled,
               fraction * 100, elapsed);
    std::fflush(stderr);
  }
  void finish() {
    if (shown_) fmt::print(stderr, "\n");
    shown_ = false;
  }

 private:
  bool enabled_;
  std::string label_;
  std::chrono::steady_clock::time_point begin_, last_;
  bool shown_ = false;
};

// "all": every policy, and vllm-best when the goodput search that picks its setting runs;
// with --slo-grid, the grid's baselines and Meridian.
std::vector<PolicyKind> parse_policies(const std::string& text, bool goodput, bool slo_grid) {
  if (text == "all" && slo_grid) {
    return {PolicyKind::kVllmFcfs, PolicyKind::kVllmBest, PolicyKind::kPascal, PolicyKind::kMeridianNoForcing,
            PolicyKind::kMeridian};
  }
  if (text == "all") {
    std::vector<PolicyKind> all(sim::kAllPolicies.begin(), sim::kAllPolicies.end());
    if (goodput) all.insert(all.begin() + 3, PolicyKind::kVllmBest);  // after the other vLLM policies
    return all;
  }
  std::vector<PolicyKind> out;
  for (const std::string& name : split_list(text, "--policies")) {
    const auto p = sim::parse_policy(name);
    if (!p) {
      throw UsageError(
          fmt::format("--policies: unknown policy \"{}\" (known: vllm-fcfs, vllm-fcfs-tuned, vllm-priority, "
                      "vllm-best, static-budget, pascal, meridian-no-forcing, meridian, adversary-hold, "
                      "adversary-abort, all)",
                      name));
    }
    out.push_back(*p);
  }
  if (out.empty()) throw UsageError("--policies: no policy named");
  return out;
}

void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path);
  out << text;
  if (!out) throw Error(fmt::format("cannot write {}", path.string()));
}

// Every report path the run may write, checked before it starts (issue 27: a
// blocked ab-report.json failed only after the whole run): the directory
// takes a new file, and no report name is taken by something that is not a
// writable regular file. Nothing is left behind.
void check_out_dir(const fs::path& out_dir, const std::vector<PolicyKind>& policies) {
  const fs::path probe = out_dir / ".meridian-write-probe";
  {
    std::ofstream out(probe);
    if (!out) {
      throw Error(fmt::format("cannot write in {}: the reports could not be saved", out_dir.string()));
    }
  }
  std::error_code ec;
  fs::remove(probe, ec);
  std::vector<fs::path> reports;
  for (const char* name :
       {"ab-report.json", "ab-report.md", "goodput.json", "goodput.md", "pareto.json", "pareto.md",
        "load-sweep.json", "replay-params.toml", "workload.jsonl", "slo-grid.json", "slo-grid.md"}) {
    reports.push_back(out_dir / name);
  }
  for (const PolicyKind p : policies) reports.push_back(out_dir / sim::to_string(p) / "report.json");
  for (const fs::path& path : reports) {
    if (!fs::exists(path, ec)) continue;
    if (!fs::is_regular_file(path, ec)) {
      throw Error(
          fmt::format("cannot write {}: something that is not a file is in its place", path.string()));
    }
    std::ofstream out(path, std::ios::app);  // opened, not changed
    if (!out) throw Error(fmt::format("cannot write {}", path.string()));
  }
}

// The study's progress through the bar, from whichever worker thread reports it.
std::function<void(double)> progress_to(ProgressBar& bar) {
  return [&bar](double f) { bar.update(f); };
}

void run_load_sweep(const ReplayCliOptions& o, const std::vector<PolicyKind>& policies,
                    sim::StudyOptions study, ProgressBar& bar, const fs::path& out_dir) {
  nlohmann::ordered_json sweep;
  sweep["schema_version"] = 2;
  sweep["command"] = describe_command(o);  // the command line that reproduces it
  sweep["rates"] = o.load_sweep;
  sweep["seeds"] = study.seeds;
  nlohmann::ordered_json runs;
  for (double rate : o.load_sweep) {
    study.params.workload.arrival_rate = rate;
    bar.start(fmt::format("load sweep: rate {}", rate));
    const auto results = sim::run_seeds(policies, study);
    bar.finish();
    fmt::print("rate {:>6}/s:", rate);
    for (const auto& r : results) {
      nlohmann::ordered_json m;
      for (const sim::MetricInfo& info : sim::metric_catalog()) {
        const double v = sim::metric_stat(r, info.name).mean;
        m[std::string(info.name)] = std::isfinite(v) ? v : 0.0;
      }
      runs[std::string(sim::to_string(r.policy))].push_back({{"arrival_rate", rate}, {"metrics", m}});
      fmt::print("  {} slo {:.0f}% ttft_p95 {:.0f} ms itl_p99 {:.0f} ms", sim::to_string(r.policy),
                 sim::metric_stat(r, "slo_attainment_pct").mean, sim::metric_stat(r, "ttft_p95_ms").mean,
                 sim::metric_stat(r, "output_itl_p99_ms").mean);
    }
    fmt::print("\n");
  }
  sweep["runs"] = runs;
  write_file(out_dir / "load-sweep.json", sweep.dump(1) + "\n");
  fmt::print("wrote {}\n", (out_dir / "load-sweep.json").string());
}

/// Rethrows `e` as a UsageError naming the option when a value given on the
/// command line broke the rule; else as it is.
[[noreturn]] void rethrow_naming_options(const ReplayCliOptions& o, const ConfigError& e) {
  {
    const std::pair<std::string_view, bool> options[] = {
        {"--arrival-rate", o.arrival_rate.has_value()},
        {"--duration-s", o.duration_s.has_value()},
        {"--reasoning-ratio", o.reasoning_ratio.has_value()},
        {"--disagg-bandwidth-gbps", o.disagg_bandwidth_gbps.has_value()},
        {"--disagg-latency-us", o.disagg_latency_us.has_value()}};
    const std::string_view fields[] = {"workload.arrival_rate", "workload.duration_s",
                                       "workload.reasoning_ratio", "disagg.bandwidth_gbps",
                                       "disagg.latency_us"};
    for (const ConfigIssue& issue : e.issues()) {
      for (std::size_t i = 0; i < std::size(fields); ++i) {
        if (issue.path == fields[i] && options[i].second) {
          throw UsageError(fmt::format("{}: {}", options[i].first, issue.message));
        }
      }
    }
    throw e;
  }
}

/// validate(params), naming the option when a value given on the command line breaks a rule.
void validate_params(const ReplayCliOptions& o, const sim::ReplayParams& params) {
  try {
    sim::validate(params);
  } catch (const ConfigError& e) {
    rethrow_naming_options(o, e);
  }
}

/// What the run will derive from the parameters and the config, checked
/// before it starts (issue 27): the fabric link's time per KV block (each
/// bandwidth is in range alone, but a tiny one overflowed the clock), and
/// the wall time --realtime-factor paces the longest run to.
void check_derived(const ReplayCliOptions& o, const sim::ReplayParams& params, const MeridianConfig& config) {
  if (params.disagg.fabric != "none") {
    try {
      (void)sim::FabricLinkModel(params.disagg,
                                 params.cost_model.kv_bytes_per_token() * config.kv_memory.block_tokens);
    } catch (const ConfigError& e) {
      rethrow_naming_options(o, e);
    }
  }
  // The pacing clock is a steady_clock duration in nanoseconds: the longest
  // run, paced, must fit it (1e-300 made it overflow, and pacing stopped).
  constexpr double kMaxPacedWallS = 1e9;
  if (o.realtime_factor && !(params.engine.max_sim_time_s / *o.realtime_factor <= kMaxPacedWallS)) {
    throw UsageError(
        fmt::format("--realtime-factor: {:g} paces a run of up to {:g} simulated seconds "
                    "(engine.max_sim_time_s) to {:g} s "
                    "of wall time; at most {:g} s can be paced: raise it",
                    *o.realtime_factor, params.engine.max_sim_time_s,
                    params.engine.max_sim_time_s / *o.realtime_factor, kMaxPacedWallS));
  }
}

/// Every rate of --load-sweep against the [workload] rules, before anything
/// runs, naming the element that breaks one.
void check_load_sweep(const ReplayCliOptions& o, const sim::ReplayParams& params) {
  for (std::size_t i = 0; i < o.load_sweep.size(); ++i) {
    sim::ReplayParams at_rate = params;
    at_rate.workload.arrival_rate = o.load_sweep[i];
    try {
      sim::validate(at_rate);
    } catch (const ConfigError& e) {
      throw UsageError(fmt::format("--load-sweep: rate {} (element {} of {}): {}", o.load_sweep[i], i + 1,
                                   o.load_sweep.size(),
                                   e.issues().empty() ? std::string(e.what()) : e.issues().front().message));
    }
  }
}

/// --disagg-*: the fabric's measured defaults (sim::disagg_preset) unless the
/// --params file already turned the mode on, then the explicit figures.
void apply_disagg_options(const ReplayCliOptions& o, sim::DisaggSimParams& d) {
  if (o.disagg_fabric) {
    if (d.enabled()) {
      d.fabric = *o.disagg_fabric;
    } else {
      d = sim::disagg_preset(*o.disagg_fabric);
    }
  }
  if ((o.disagg_bandwidth_gbps || o.disagg_latency_us) && !d.enabled()) {
    throw UsageError(
        "--disagg-bandwidth-gbps and --disagg-latency-us need the disaggregated mode on: --disagg-fabric "
        "nixl|mooncake, or [disagg] fabric in --params");
  }
  if (o.disagg_bandwidth_gbps) d.bandwidth_gbps = *o.disagg_bandwidth_gbps;
  if (o.disagg_latency_us) d.latency_us = *o.disagg_latency_us;
}

int run_replay_command(const ReplayCliOptions& o) {
  const std::string kind = o.workload.value_or("");
  sim::ReplayParams params;
  if (!o.params_file.empty()) {
    params = sim::load_replay_params(o.params_file, kind);
  } else if (!kind.empty()) {
    params.workload = sim::workload_preset(kind);
  }
  if (o.arrival_rate) params.workload.arrival_rate = *o.arrival_rate;
  if (o.duration_s) params.workload.duration_s = *o.duration_s;
  if (o.reasoning_ratio) params.workload.reasoning_ratio = *o.reasoning_ratio;
  apply_disagg_options(o, params.disagg);
  validate_params(o, params);
  if (o.print_params) {
    fmt::print("{}", sim::to_toml(params));
    return 0;
  }
  if (o.seed > std::numeric_limits<std::uint64_t>::max() - (o.seeds - 1)) {
    throw UsageError(
        fmt::format("--seed {} with --seeds {} runs past the largest seed, 2^64 - 1", o.seed, o.seeds));
  }
  if (!o.load_sweep.empty() && !o.trace.empty()) {
    throw UsageError("--load-sweep varies the synthetic arrival rate; it cannot be used with --trace");
  }
  check_load_sweep(o, params);
  // --config, else the file the docs name ($MERIDIAN_CONFIG, ./meridian.toml,
  // ~/.config/meridian/meridian.toml): a wrong $MERIDIAN_CONFIG is an error.
  std::vector<fs::path> config_files(o.config_files.begin(), o.config_files.end());
  if (config_files.empty()) {
    if (auto found = find_default_config_file()) config_files.push_back(*found);
  }
  MeridianConfig config = MeridianConfig::defaults();
  if (!config_files.empty()) config = load_config(config_files);
  configure_cli_logging(config.logging);
  log_config_loaded(config_files, config);
  check_derived(o, params, config);
  const auto policies = parse_policies(o.policies, o.goodput || o.slo_grid, o.slo_grid);
  if (o.slo_grid && (!o.trace.empty() || o.goodput || o.pareto || !o.load_sweep.empty())) {
    throw UsageError(
        "--slo-grid runs the goodput search per SLO set on the synthetic workload; it cannot be combined "
        "with --trace, --goodput, --pareto or --load-sweep");
  }
  if (!o.trace.empty() && o.goodput) {
    throw UsageError("--goodput varies the synthetic arrival rate; it cannot be used with --trace");
  }
  if (o.window_check && !o.goodput) {
    throw UsageError("--window-check repeats the goodput search over twice the window: it needs --goodput");
  }
  sim::GoodputOptions search;
  search.ruler = *sim::parse_ruler(o.ruler);  // CLI11 checked the name
  const bool vllm_best = std::find(policies.begin(), policies.end(), PolicyKind::kVllmBest) != policies.end();
  if (vllm_best && !o.trace.empty()) {
    throw UsageError(
        "--policies vllm-best: its setting is the one with the highest goodput, and the goodput search "
        "cannot use --trace");
  }
  sim::StudyOptions study;
  study.config = config;
  study.model = o.model;
  study.params = params;
  study.threads = o.jobs;
  study.seeds.clear();
  for (std::uint32_t i = 0; i < o.seeds; ++i) study.seeds.push_back(o.seed + i);
  const std::unique_ptr<LiveMetrics> live = start_live_metrics(o, policies, study);
  ProgressBar bar(!o.no_progress && isatty(STDERR_FILENO) != 0);
  study.progress = progress_to(bar);
  const fs::path out_dir(o.out_dir);
  fs::create_directories(out_dir);
  check_out_dir(out_dir, policies);
  if (vllm_best && !o.goodput && !o.slo_grid) {  // its setting first: the goodput search over the settings
    bar.start(fmt::format("vllm-best: goodput of {} vLLM settings", sim::vllm_best_settings().size()));
    const sim::GoodputResult g = sim::find_goodput({PolicyKind::kVllmBest}, study, search);
    bar.finish();
    study.vllm_best = g.vllm_best->best();
    fmt::print("vllm-best: {} ({:.3g} conv/s)\n", study.vllm_best->label(),
               g.policies.front().goodput_rps.mean);
  }
  if (!o.load_sweep.empty()) {
    run_load_sweep(o, policies, study, bar, out_dir);
    return 0;
  }

  sim::ReportContext ctx;
  ctx.seed = o.seed;
  ctx.seeds = study.seeds;
  ctx.command = describe_command(o);
  ctx.params = params;
  // The first seed's workload is written now and not kept: the study makes
  // its own, and a large workload is not held twice.
  {
    sim::Workload generated;
    if (!o.trace.empty()) {
      study.trace = sim::load_trace(o.trace);
      ctx.workload = fmt::format("trace {}", o.trace);
    } else {
      generated = sim::generate_workload(params.workload, o.seed);
      ctx.workload = params.workload.kind;
    }
    const sim::Workload& first = study.trace ? *study.trace : generated;
    ctx.requests = first.requests.size();
    fs::create_directories(out_dir);
    std::ofstream trace(out_dir / "workload.jsonl");
    sim::write_trace(first, trace);
    if (!trace) throw Error(fmt::format("cannot write {}", (out_dir / "workload.jsonl").string()));
  }

  if (o.slo_grid) {
    const std::vector<sim::SloSet> sets = sim::slo_grid_sets(params.slo);
    const sim::SloGridResult grid = sim::run_slo_grid(
        policies, study, sets,
        [&](std::size_t i) {
          bar.finish();
          bar.start(fmt::format("SLO grid {}/{}: {}", i + 1, sets.size(), sets[i].label));
        },
        search);
    bar.finish();
    write_file(out_dir / "slo-grid.json", sim::slo_grid_json(grid, ctx));
    const std::string md = sim::slo_grid_markdown(grid, ctx);
    write_file(out_dir / "slo-grid.md", md);
    fmt::print("{}\nwrote {}/slo-grid.{{json,md}} (plots: benchmarks/plot_replay.py {})\n", md,
               out_dir.string(), out_dir.string());
    return 0;
  }

  if (o.goodput) {
    bar.start("goodput search");
    const sim::GoodputResult g = sim::find_goodput(policies, study, search);
    bar.finish();
    if (g.vllm_best) study.vllm_best = g.vllm_best->best();
    std::optional<sim::GoodputResult> doubled;
    if (o.window_check) {
      sim::StudyOptions twice = study;
      twice.params.workload.duration_s *= 2;
      validate_params(o, twice.params);
      bar.start(fmt::format("window check: goodput over {:g} s", twice.params.workload.duration_s));
      doubled = sim::find_goodput(policies, twice, search);
      bar.finish();
    }
    const sim::GoodputResult* check = doubled ? &*doubled : nullptr;
    write_file(out_dir / "goodput.json", sim::goodput_json(g, ctx, check));
    const std::string md = sim::goodput_markdown(g, check);
    write_file(out_dir / "goodput.md", md);
    fmt::print("{}\n", md);
  }

  if (study.vllm_best) ctx.vllm_best = study.vllm_best->label();
  bar.start(fmt::format("A/B: {} policies x {} seeds", policies.size(), study.seeds.size()));
  const auto ab_started = std::chrono::steady_clock::now();
  if (should_log(LogLevel::kInfo)) {
    log_message(LogLevel::kInfo,
                fmt::format("replay started: {} policies x {} seeds, workload {} ({} requests)",
                            policies.size(), study.seeds.size(), ctx.workload, ctx.requests));
  }
  const auto runs = sim::run_seeds(policies, study);
  bar.finish();
  if (should_log(LogLevel::kInfo)) {
    std::string slo;
    for (const auto& r : runs) {
      slo += fmt::format(" {} {:.1f}%", sim::to_string(r.policy),
                         sim::metric_stat(r, "slo_attainment_pct").mean);
    }
    log_message(
        LogLevel::kInfo,
        fmt::format("replay finished in {:.2f} s; SLO attainment:{}; reports in {}",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - ab_started).count(), slo,
                    out_dir.string()));
  }
  for (const auto& r : runs) {
    write_file(out_dir / std::string(sim::to_string(r.policy)) / "report.json",
               sim::policy_report_json(r.seeds.front(), ctx));
  }
  write_file(out_dir / "ab-report.json", sim::ab_report_json(runs, ctx));
  const std::string md = sim::ab_report_markdown(runs, ctx);
  write_file(out_dir / "ab-report.md", md);
  write_file(out_dir / "replay-params.toml", sim::to_toml(params));
  // The terminal gets the headline and the targets; the file has every metric.
  fmt::print("{}\n", md.substr(0, md.find("\n## All metrics")));

  if (o.pareto) {
    bar.start("forcing Pareto sweep");
    const sim::ParetoResult pr = sim::run_pareto(sim::default_pareto_settings(config), study);
    bar.finish();
    write_file(out_dir / "pareto.json", sim::pareto_json(pr, ctx));
    const std::string pmd = sim::pareto_markdown(pr);
    write_file(out_dir / "pareto.md", pmd);
    fmt::print("{}\n", pmd);
  }

  double tokens = 0;
  double wall = 0;
  for (const auto& r : runs) {
    for (const auto& s : r.seeds) {
      tokens += s.metric("simulated_tokens");
      wall += s.metric("sim_wall_s");
    }
  }
  fmt::print(
      "simulator (A/B runs): {:.0f} simulated tokens in {:.2f} s of run time = {:.2f} M tokens/s per "
      "thread\n",
      tokens, wall, wall > 0 ? tokens / wall / 1e6 : 0.0);
  fmt::print("wrote {}/ab-report.{{json,md}}{}{} and {}/<policy>/report.json\n", out_dir.string(),
             o.goodput ? ", goodput.{json,md}" : "", o.pareto ? ", pareto.{json,md}" : "", out_dir.string());
  std::fflush(stdout);
  if (live && o.linger_s > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(o.linger_s));
  }
  return 0;
}

}  // namespace

std::function<int()> add_replay(CLI::App& app) {
  auto o = std::make_shared<ReplayCliOptions>();
  CLI::App* sub = app.add_subcommand("replay", "A/B replay simulator: Meridian against vLLM's policies");
  sub->add_option("--policies", o->policies,
                  "comma-separated: vllm-fcfs, vllm-fcfs-tuned, vllm-priority, vllm-best, static-budget, "
                  "pascal, meridian-no-forcing, meridian, adversary-hold, adversary-abort (the ruler's "
                  "tests); or all (vllm-best with --goodput or --slo-grid, "
                  "which pick its "
                  "setting)")
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "first workload and signal seed")
      ->transform(integer_in(0, std::numeric_limits<std::uint64_t>::max()))
      ->capture_default_str();
  sub->add_option("--seeds", o->seeds,
                  "number of seeds (--seed, --seed + 1, ...); reports give 95% intervals")
      ->transform(integer_in(1, kMaxSeeds))
      ->capture_default_str();
  sub->add_option("--jobs", o->jobs, "worker threads (0: one per hardware thread)")
      ->transform(integer_in(0, kMaxJobs))
      ->capture_default_str();
  sub->add_flag(
      "--goodput", o->goodput,
      "also find each policy's goodput (the highest rate whose run meets --ruler, beside its physical "
      "bound); writes goodput.json");
  sub->add_option(
         "--ruler", o->ruler,
         "what a goodput rate must meet: sustainable (every request completes, each class meets the "
         "target, late arrivals too, no backlog growth; docs/replay.md#the-ruler) or pooled-window (the "
         "retired finite-window, pooled-attainment ruler, for comparison)")
      ->check(CLI::IsMember({"sustainable", "pooled-window"}))
      ->capture_default_str();
  sub->add_flag("--window-check", o->window_check,
                "with --goodput: also search over twice the window and report whether each policy's goodput "
                "agrees within 5% (goodput.json window_check)");
  sub->add_flag("--slo-grid", o->slo_grid,
                "find each policy's goodput under every SLO set of the grid (docs/replay.md#the-slo-grid; "
                "policies all: vllm-fcfs, vllm-best, pascal, meridian-no-forcing, meridian); writes "
                "slo-grid.{json,md}");
  sub->add_flag("--pareto", o->pareto,
                "also sweep static thinking budgets and Meridian's forcing thresholds; writes pareto.json");
  sub->add_option("--arrival-rate", o->arrival_rate,
                  "conversations per second (Poisson); overrides the params")
      ->check(number_in(0, kMaxRate, true));
  sub->add_option("--duration-s", o->duration_s, "seconds of arrivals; overrides the params")
      ->check(number_in(0, kMaxDurationS, true));
  sub->add_option("--reasoning-ratio", o->reasoning_ratio, "share of reasoning conversations in [0, 1]")
      ->check(number_in(0, 1));
  sub->add_option("--workload", o->workload,
                  "synthetic workload: mixed (default), seeds-mix, long-think or long-prompt");
  sub->add_option("--trace", o->trace, "replay a JSONL trace instead of a synthetic workload")
      ->check(CLI::ExistingFile);
  sub->add_option("--params", o->params_file,
                  "replay TOML: [engine], [cost_model], [workload], [signal_model]")
      ->check(CLI::ExistingFile);
  sub->add_option("--config", o->config_files, "meridian.toml for the Meridian policies (repeatable)")
      ->check(CLI::ExistingFile);
  sub->add_option("--model", o->model, "model whose boundary token ids drive the router")
      ->capture_default_str();
  sub->add_option_function<std::string>(
         "--load-sweep",
         [o](const std::string& text) {
           o->load_sweep.clear();
           for (const std::string& item : split_list(text, "--load-sweep")) {
             o->load_sweep.push_back(std::stod(item));
           }
         },
         "arrival rates to sweep (comma-separated); writes load-sweep.json")
      ->check(number_list_in(0, kMaxRate, true));
  sub->add_option("--out-dir", o->out_dir, "where reports go")->capture_default_str();
  sub->add_flag("--no-progress", o->no_progress, "no progress bar on stderr");
  sub->add_flag("--print-params", o->print_params, "print the effective replay parameters as TOML and exit");
  CLI::Option* port =
      sub->add_option("--metrics-port", o->metrics_port,
                      "serve Prometheus /metrics of the A/B run of policy meridian (meridian-no-forcing when "
                      "only that runs), first seed, live while it runs; 0 picks a free port (printed)")
          ->transform(integer_in(0, 65535));
  sub->add_option("--metrics-host", o->metrics_host,
                  "address --metrics-port listens on (numeric IPv4/IPv6 or localhost)")
      ->capture_default_str()
      ->transform(listen_host())
      ->check(
          [](const std::string& host) -> std::string {
            if (host.find(':') == std::string::npos || telemetry::MetricsServer::serves_ipv6()) return {};
            return fmt::format(
                "{} is IPv6, and this build's HTTP server (civetweb) listens on IPv4 only; use "
                "an IPv4 address such as 127.0.0.1",
                host);
          },
          "ADDRESS")
      ->needs(port);
  sub->add_option("--realtime-factor", o->realtime_factor,
                  "pace the observed run: F simulated seconds per wall-clock second")
      ->check(number_in(0, kMaxRealtimeFactor, true))
      ->needs(port);
  sub->add_option("--linger-s", o->linger_s, "keep serving metrics S seconds after the run, then exit")
      ->check(number_in(0, kMaxLingerS))
      ->capture_default_str()
      ->needs(port);
  sub->add_option("--disagg-fabric", o->disagg_fabric,
                  "disaggregated mode: offload KV over this fabric's link (nixl, mooncake; none: off); "
                  "Meridian policies only")
      ->check(CLI::IsMember({"nixl", "mooncake", "none"}));
  sub->add_option("--disagg-bandwidth-gbps", o->disagg_bandwidth_gbps,
                  "disaggregated mode: link bandwidth in GB/s (default: the fabric's measured figure)")
      ->check(number_in(0, 1e6, true));
  sub->add_option("--disagg-latency-us", o->disagg_latency_us,
                  "disaggregated mode: per-transfer latency in microseconds")
      ->check(number_in(0, 1e7));
  return [o] { return run_replay_command(*o); };
}

}  // namespace meridian::cli
