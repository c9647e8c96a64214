// meridian replay: the A/B replay simulator (docs/benchmarks.md).
//   meridian replay [--policies all|p1,p2] [--seed N] [--arrival-rate R] [--duration-s S]
//                   [--reasoning-ratio X] [--workload mixed|seeds-mix] [--trace FILE]
//                   [--params replay.toml] [--config meridian.toml]... [--model NAME]
//                   [--load-sweep R1,R2,...] [--out-dir DIR] [--no-progress] [--print-params]
#include "meridian/replay.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "meridian/config.h"
#include <unistd.h>

namespace meridian::cli {
namespace {

namespace fs = std::filesystem;
using sim::PolicyKind;

struct ReplayCliOptions {
  std::string policies = "all";
  std::uint64_t seed = 42;
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
};

// The replay as a command line that reproduces it.
std::string describe_command(const ReplayCliOptions& o) {
  std::string c = fmt::format("meridian replay --policies {} --seed {}", o.policies, o.seed);
  if (o.arrival_rate) c += fmt::format(" --arrival-rate {}", *o.arrival_rate);
  if (o.duration_s) c += fmt::format(" --duration-s {}", *o.duration_s);
  if (o.reasoning_ratio) c += fmt::format(" --reasoning-ratio {}", *o.reasoning_ratio);
  if (o.workload) c += fmt::format(" --workload {}", *o.workload);
  if (!o.trace.empty()) c += fmt::format(" --trace {}", o.trace);
  if (!o.params_file.empty()) c += fmt::format(" --params {}", o.params_file);
  for (const std::string& f : o.config_files) c += fmt::format(" --config {}", f);
  if (o.model != "qwen3") c += fmt::format(" --model {}", o.model);
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

std::vector<PolicyKind> parse_policies(const std::string& text) {
  if (text == "all") return {sim::kAllPolicies.begin(), sim::kAllPolicies.end()};
  std::vector<PolicyKind> out;
  std::stringstream in(text);
  std::string name;
  while (std::getline(in, name, ',')) {
    const auto p = sim::parse_policy(name);
    if (!p) {
      throw std::invalid_argument(
          fmt::format("--policies: unknown policy \"{}\" (known: vllm-fcfs, vllm-priority, static-budget, "
                      "meridian-no-forcing, meridian, all)",
                      name));
    }
    out.push_back(*p);
  }
  if (out.empty()) throw std::invalid_argument("--policies: no policy named");
  return out;
}

void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path);
  out << text;
  if (!out) throw std::runtime_error(fmt::format("cannot write {}", path.string()));
}

std::vector<sim::ReplayResult> run_all(const sim::Workload& workload, const std::vector<PolicyKind>& policies,
                                       const MeridianConfig& config, const ReplayCliOptions& o,
                                       const sim::ReplayParams& params, ProgressBar& bar,
                                       std::string_view tag) {
  std::vector<sim::ReplayResult> results;
  for (std::size_t i = 0; i < policies.size(); ++i) {
    sim::ReplayOptions ro;
    ro.policy = policies[i];
    ro.config = config;
    ro.model = o.model;
    ro.params = params;
    ro.seed = o.seed;
    bar.start(fmt::format("{}{} ({}/{})", tag, sim::to_string(policies[i]), i + 1, policies.size()));
    ro.progress = [&bar](double f) { bar.update(f); };
    results.push_back(sim::run_replay(workload, ro));
    bar.finish();
  }
  return results;
}

int run_replay_command(const ReplayCliOptions& o) {
  sim::ReplayParams params =
      o.params_file.empty() ? sim::ReplayParams{} : sim::load_replay_params(o.params_file);
  if (o.arrival_rate) params.workload.arrival_rate = *o.arrival_rate;
  if (o.duration_s) params.workload.duration_s = *o.duration_s;
  if (o.reasoning_ratio) params.workload.reasoning_ratio = *o.reasoning_ratio;
  if (o.workload) params.workload.kind = *o.workload;
  sim::validate(params);
  if (o.print_params) {
    fmt::print("{}", sim::to_toml(params));
    return 0;
  }
  MeridianConfig config = MeridianConfig::defaults();
  if (!o.config_files.empty()) {
    config = load_config(std::vector<fs::path>(o.config_files.begin(), o.config_files.end()));
  }
  const auto policies = parse_policies(o.policies);
  if (!o.trace.empty() && !o.load_sweep.empty()) {
    throw std::invalid_argument(
        "--load-sweep varies the synthetic arrival rate; it cannot be used with --trace");
  }
  sim::ReportContext ctx;
  ctx.seed = o.seed;
  ctx.command = describe_command(o);
  ctx.params = params;
  ProgressBar bar(!o.no_progress && isatty(STDERR_FILENO) != 0);
  const fs::path out_dir(o.out_dir);
  fs::create_directories(out_dir);

  if (!o.load_sweep.empty()) {
    nlohmann::ordered_json sweep;
    sweep["schema_version"] = 1;
    sweep["rates"] = o.load_sweep;
    nlohmann::ordered_json runs;
    for (double rate : o.load_sweep) {
      sim::ReplayParams p = params;
      p.workload.arrival_rate = rate;
      const sim::Workload w = sim::generate_workload(p.workload, o.seed);
      const auto results = run_all(w, policies, config, o, p, bar, fmt::format("rate {} ", rate));
      for (const auto& r : results) {
        nlohmann::ordered_json m;
        for (const auto& [k, v] : r.metrics) m[k] = std::isfinite(v) ? v : 0.0;
        runs[std::string(sim::to_string(r.policy))].push_back({{"arrival_rate", rate}, {"metrics", m}});
      }
      fmt::print("rate {:>6}/s:", rate);
      for (const auto& r : results) {
        fmt::print("  {} ttot_p95 {:.0f} ms itl_p99 {:.0f} ms", sim::to_string(r.policy),
                   r.metric("ttot_p95_ms"), r.metric("output_itl_p99_ms"));
      }
      fmt::print("\n");
    }
    sweep["runs"] = runs;
    write_file(out_dir / "load-sweep.json", sweep.dump(1) + "\n");
    fmt::print("wrote {}\n", (out_dir / "load-sweep.json").string());
    return 0;
  }

  sim::Workload workload;
  if (!o.trace.empty()) {
    workload = sim::load_trace(o.trace);
    ctx.workload = fmt::format("trace {}", o.trace);
  } else {
    workload = sim::generate_workload(params.workload, o.seed);
    ctx.workload = params.workload.kind;
  }
  ctx.requests = workload.requests.size();
  const auto results = run_all(workload, policies, config, o, params, bar, "");
  for (const auto& r : results) {
    write_file(out_dir / std::string(sim::to_string(r.policy)) / "report.json",
               sim::policy_report_json(r, ctx));
  }
  write_file(out_dir / "ab-report.json", sim::ab_report_json(results, ctx));
  const std::string md = sim::ab_report_markdown(results, ctx);
  write_file(out_dir / "ab-report.md", md);
  write_file(out_dir / "replay-params.toml", sim::to_toml(params));
  {
    std::ostringstream trace;
    sim::write_trace(workload, trace);
    write_file(out_dir / "workload.jsonl", trace.str());
  }
  fmt::print("{}\n", md);
  double tokens = 0;
  double wall = 0;
  for (const auto& r : results) {
    tokens += r.metric("simulated_tokens");
    wall += r.metric("sim_wall_s");
  }
  fmt::print("simulator: {:.0f} simulated tokens in {:.2f} s wall = {:.2f} M tokens/s\n", tokens, wall,
             wall > 0 ? tokens / wall / 1e6 : 0.0);
  fmt::print("wrote {}/ab-report.{{json,md}} and {}/<policy>/report.json\n", out_dir.string(),
             out_dir.string());
  return 0;
}

}  // namespace

std::function<int()> add_replay(CLI::App& app) {
  auto o = std::make_shared<ReplayCliOptions>();
  CLI::App* sub = app.add_subcommand("replay", "A/B replay simulator: Meridian against vLLM's policies");
  sub->add_option(
         "--policies", o->policies,
         "comma-separated: vllm-fcfs, vllm-priority, static-budget, meridian-no-forcing, meridian; or all")
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "workload and signal seed")->capture_default_str();
  sub->add_option("--arrival-rate", o->arrival_rate,
                  "conversations per second (Poisson); overrides the params");
  sub->add_option("--duration-s", o->duration_s, "seconds of arrivals; overrides the params");
  sub->add_option("--reasoning-ratio", o->reasoning_ratio, "share of reasoning conversations in [0, 1]");
  sub->add_option("--workload", o->workload, "synthetic workload: mixed (default) or seeds-mix");
  sub->add_option("--trace", o->trace, "replay a JSONL trace instead of a synthetic workload")
      ->check(CLI::ExistingFile);
  sub->add_option("--params", o->params_file,
                  "replay TOML: [engine], [cost_model], [workload], [signal_model]")
      ->check(CLI::ExistingFile);
  sub->add_option("--config", o->config_files, "meridian.toml for the Meridian policies (repeatable)")
      ->check(CLI::ExistingFile);
  sub->add_option("--model", o->model, "model whose boundary token ids drive the router")
      ->capture_default_str();
  sub->add_option("--load-sweep", o->load_sweep,
                  "arrival rates to sweep (comma-separated); writes load-sweep.json")
      ->delimiter(',');
  sub->add_option("--out-dir", o->out_dir, "where reports go")->capture_default_str();
  sub->add_flag("--no-progress", o->no_progress, "no progress bar on stderr");
  sub->add_flag("--print-params", o->print_params, "print the effective replay parameters as TOML and exit");
  return [o] { return run_replay_command(*o); };
}

}  // namespace meridian::cli
