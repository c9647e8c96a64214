// Links the installed libraries and uses each: the config and the router
// (meridian_core), one replay of a two-request trace (meridian_sim) and the
// Prometheus exposition of its live metrics (meridian_telemetry).
#include <cstdio>
#include <sstream>

#include <meridian/config.h>
#include <meridian/metrics.h>
#include <meridian/phase_router.h>
#include <meridian/replay.h>
#include <meridian/sim_workload.h>
#include <meridian/telemetry.h>

namespace {

bool router_enters_think() {
  const meridian::MeridianConfig config = meridian::parse_config("[scheduler]\nmax_think_tokens = 1000\n");
  meridian::PhaseRouter router(config, "qwen3");
  router.begin(1);
  const auto event = router.on_token(1, 151667);
  return event && event->kind == meridian::PhaseEventKind::kEnterThink;
}

bool replay_completes_a_trace(meridian::telemetry::EngineMetrics* metrics) {
  std::istringstream trace(
      R"({"arrival_s": 0.0, "prompt_tokens": 32, "think_tokens": 64, "answer_tokens": 16})"
      "\n"
      R"({"arrival_s": 0.1, "prompt_tokens": 32, "think_tokens": 0, "answer_tokens": 16})"
      "\n");
  const meridian::sim::Workload workload = meridian::sim::read_trace(trace, "<consumer>");
  meridian::sim::ReplayOptions options;
  options.metrics = metrics;
  const meridian::sim::ReplayResult result = meridian::sim::run_replay(workload, options);
  return result.metric("completed") == 2.0;
}

}  // namespace

int main() {
  const bool router_ok = router_enters_think();
  meridian::telemetry::MetricRegistry registry;
  meridian::telemetry::EngineMetrics metrics(registry);
  const bool replay_ok = replay_completes_a_trace(&metrics);
  const bool metrics_ok = meridian::telemetry::exposition_text(registry).find(
                              "meridian_requests_completed_total{how=\"eos\"} 2") != std::string::npos;
  std::printf("find_package(meridian) consumer: router %s, replay %s, metrics %s\n",
              router_ok ? "ok" : "FAILED", replay_ok ? "ok" : "FAILED", metrics_ok ? "ok" : "FAILED");
  return router_ok && replay_ok && metrics_ok ? 0 : 1;
}
