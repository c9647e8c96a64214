// Links the installed libraries and uses each: the config and the router
// (meridian_core), one replay of a two-request trace (meridian_sim) and the
// Prometheus exposition of its live metrics (meridian_telemetry) and an MRDN v1 frame
// round trip (meridian_mrdn, with the installed BLAKE3), and a KV offload round trip
// over the in-process fabric (meridian_disagg).
#include <cstdio>
#include <sstream>
#include <vector>

#include <meridian/config.h>
#include <meridian/kv_offload.h>
#include <meridian/metrics.h>
#include <meridian/mrdn.h>
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

bool mrdn_round_trips() {
  const std::vector<std::byte> body(100, std::byte{0x5a});
  std::vector<std::byte> frame;
  meridian::mrdn::encode_append(meridian::BlockTier::kThinkComplete, body, frame);
  const bool decodes = meridian::mrdn::decode(frame).ok();
  frame.back() = std::byte{0};  // a changed body byte must fail the BLAKE3 check
  return decodes && meridian::mrdn::decode(frame).status == meridian::mrdn::DecodeStatus::kChecksumMismatch;
}

bool offload_round_trips() {
  meridian::KvBlockManagerOptions options;
  options.num_blocks = 4;
  options.block_size_bytes = 64;
  meridian::KvBlockManager kv(options);
  meridian::HostBlockStore store(4, 64);
  meridian::InProcessFabric fabric;
  meridian::KvOffloader offloader(kv, store, fabric);
  if (!kv.allocate(1, meridian::BlockTier::kThinkActive, 2).ok()) return false;
  store.block_bytes(kv.blocks_of(1)[1])[7] = std::byte{42};
  kv.demote_think_blocks(1);
  offloader.on_exit_think(1);
  offloader.poll();
  const bool remote = !kv.holds_blocks(1) && kv.block_locations(1).size() == 2;
  const meridian::IngestResult in = offloader.ingest(1);
  return remote && in.restored.size() == 2 && store.block_bytes(kv.blocks_of(1)[1])[7] == std::byte{42};
}

}  // namespace

int main() {
  const bool router_ok = router_enters_think();
  meridian::telemetry::MetricRegistry registry;
  meridian::telemetry::EngineMetrics metrics(registry);
  const bool replay_ok = replay_completes_a_trace(&metrics);
  const bool metrics_ok = meridian::telemetry::exposition_text(registry).find(
                              "meridian_requests_completed_total{how=\"eos\"} 2") != std::string::npos;
  const bool mrdn_ok = mrdn_round_trips();
  const bool offload_ok = offload_round_trips();
  std::printf("find_package(meridian) consumer: router %s, replay %s, metrics %s, mrdn %s, offload %s\n",
              router_ok ? "ok" : "FAILED", replay_ok ? "ok" : "FAILED", metrics_ok ? "ok" : "FAILED",
              mrdn_ok ? "ok" : "FAILED", offload_ok ? "ok" : "FAILED");
  return router_ok && replay_ok && metrics_ok && mrdn_ok && offload_ok ? 0 : 1;
}
