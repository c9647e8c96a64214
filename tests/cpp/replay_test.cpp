// The replay engine: cost model against hand-computed steps, determinism,
// conservation, and what each policy must (not) do on a shared workload.
#include "meridian/replay.h"

#include <cmath>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "meridian/replay_study.h"

namespace meridian::sim {
namespace {

// Hand computation for Qwen3-8B bf16 on an H100 SXM (docs/replay.md):
//   linear params  = 8.19e9 - 622,329,856 (embedding) = 7,567,670,144
//   linear bytes   = 16.4e9 * 7,567,670,144 / 8.19e9 = 15,153,820,557 B
//   bandwidth      = 3350e9 * 0.8 = 2.68e9 B/ms;  compute = 989e12 * 0.55 = 5.4395e11 FLOP/ms
//   attention      = 4 * 36 * 32 * 128 = 589,824 FLOP per query-key pair; KV 147,456 B per token
TEST(RooflineCostModel, DecodeStepIsMemoryBoundAndMatchesHandComputation) {
  const RooflineCostModel m(CostModelParams{});
  // Qwen3-8B: 36 layers x 8 KV heads x 128 x (K, V) x 2 B = 147,456 B per token.
  EXPECT_EQ(m.params().kv_bytes_per_token(), 147456U);
  EXPECT_NEAR(m.linear_weight_bytes(), 15153820557.0, 1.0);
  StepShape decode;
  decode.tokens = 1;
  decode.kv_tokens_read = 1000;
  decode.attended_pairs = 1000;
  // Linear: max(15.1538e9 / 2.68e9, 2 * 7.5677e9 / 5.4395e11) = 5.654411 ms (weight read).
  // Attention: max(147456 * 1000 / 2.68e9, 589824 * 1000 / 5.4395e11) = 0.0550209 ms (KV read).
  EXPECT_NEAR(m.linear_ms(decode), 5.654411, 1e-5);
  EXPECT_NEAR(m.attention_ms(decode), 0.0550209, 1e-6);
  EXPECT_NEAR(m.step_ms(decode), 1.5 + 5.654411 + 0.0550209, 1e-5);
}

TEST(RooflineCostModel, PrefillChunkIsComputeBoundAndSwapAddsPcieTime) {
  const RooflineCostModel m(CostModelParams{});
  StepShape prefill;
  prefill.tokens = 4096;
  prefill.kv_tokens_read = 4096;
  prefill.attended_pairs = 4096.0 * 4097.0 / 2.0;
  // Linear: 2 * 7.5677e9 * 4096 / 5.4395e11 = 113.97068 ms (compute-bound).
  // Attention: 589824 * 8,390,656 / 5.4395e11 = 9.098282 ms (quadratic FLOPs).
  EXPECT_NEAR(m.linear_ms(prefill), 113.97068, 1e-4);
  EXPECT_NEAR(m.attention_ms(prefill), 9.098282, 1e-5);
  EXPECT_NEAR(m.step_ms(prefill), 1.5 + 113.97068 + 9.098282, 1e-3);
  // 1000 tokens of KV over 50 GB/s: 147.456 MB -> 2.94912 ms.
  EXPECT_NEAR(m.swap_ms(1000), 2.94912, 1e-6);
  prefill.swap_tokens = 1000;
  EXPECT_NEAR(m.step_ms(prefill), 1.5 + 113.97068 + 9.098282 + 2.94912, 1e-3);
}

TEST(RooflineCostModel, PiggyBackedPrefillIsNotFree) {
  const RooflineCostModel m(CostModelParams{});
  // 80 decodes at 2,048 tokens of context plus a 256-token prefill chunk.
  StepShape mixed;
  mixed.tokens = 80 + 256;
  mixed.kv_tokens_read = 80 * 2049 + 256;
  mixed.attended_pairs = 80.0 * 2049 + 256.0 * 257 / 2;
  // Linear: 2 * 7.5677e9 * 336 / 5.4395e11 = 9.349158 ms (the chunk makes it compute-bound).
  // Attention: 147456 * 164,176 / 2.68e9 = 9.033111 ms (the decodes' KV reads). They add.
  EXPECT_NEAR(m.linear_ms(mixed), 9.349158, 1e-5);
  EXPECT_NEAR(m.attention_ms(mixed), 9.033111, 1e-5);
  EXPECT_NEAR(m.step_ms(mixed), 1.5 + 9.349158 + 9.033111, 1e-4);
  // The same decodes without the chunk: weight-read-bound linear layers.
  StepShape decodes;
  decodes.tokens = 80;
  decodes.kv_tokens_read = 80 * 2049;
  decodes.attended_pairs = 80.0 * 2049;
  EXPECT_GT(m.step_ms(mixed) - m.step_ms(decodes), 3.5);
}

TEST(RooflineCostModel, KvCapacityIsMemoryLeftAfterWeightsAndActivations) {
  const RooflineCostModel m(CostModelParams{});
  // 79.19 GiB * 0.9 - 16.4e9 B - 4 GiB = 55,831,686,242 B; / (147456 * 16) = 23,664.6 blocks.
  EXPECT_NEAR(m.kv_capacity_bytes(), 55831686242.304, 1.0);
  EXPECT_EQ(m.kv_capacity_blocks(16), 23664U);
}

TEST(RooflineCostModel, RejectsBadCoefficientsByDottedPath) {
  CostModelParams p;
  p.bandwidth_efficiency = 1.5;
  p.gpu_memory_gib = 10;  // less than the weights
  try {
    (void)RooflineCostModel(p);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cost_model.bandwidth_efficiency must be in (0, 1]; got 1.5"), std::string::npos)
        << what;
  }
  p.bandwidth_efficiency = 0.8;
  EXPECT_THROW((void)RooflineCostModel(p), ConfigError);
}

ReplayParams small_params(double rate = 2.0, double duration = 40) {
  ReplayParams p;
  p.workload.arrival_rate = rate;
  p.workload.duration_s = duration;
  return p;
}

ReplayResult run(PolicyKind policy, const Workload& w, const ReplayParams& params, std::uint64_t seed = 7,
                 double think_fraction = 0.40) {
  ReplayOptions o;
  o.policy = policy;
  o.params = params;
  o.seed = seed;
  o.config.kv_memory.think_phase_memory_fraction = think_fraction;
  return run_replay(w, o);
}

std::vector<std::pair<std::string, double>> deterministic(const ReplayResult& r) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& kv : r.metrics) {
    if (kv.first != "sim_wall_s" && kv.first != "sim_tokens_per_s") out.push_back(kv);
  }
  return out;
}

TEST(Replay, SameSeedGivesIdenticalReports) {
  const ReplayParams params = small_params();
  const Workload w1 = generate_workload(params.workload, 11);
  const Workload w2 = generate_workload(params.workload, 11);
  ASSERT_EQ(w1.requests.size(), w2.requests.size());
  for (PolicyKind p : kAllPolicies) {
    const ReplayResult a = run(p, w1, params);
    const ReplayResult b = run(p, w2, params);
    EXPECT_EQ(deterministic(a), deterministic(b)) << to_string(p);
    EXPECT_EQ(a.output_itl_ms, b.output_itl_ms) << to_string(p);
    EXPECT_EQ(a.series.size(), b.series.size()) << to_string(p);
  }
  // A different seed is a different workload.
  const Workload w3 = generate_workload(params.workload, 12);
  EXPECT_NE(deterministic(run(PolicyKind::kMeridian, w1, params)),
            deterministic(run(PolicyKind::kMeridian, w3, params)));
}

// Every request of the workload is in exactly one bucket of the report.
void expect_conserved(const ReplayResult& r, const Workload& w) {
  const std::string name(to_string(r.policy));
  EXPECT_EQ(r.metric("requests"), static_cast<double>(w.requests.size())) << name;
  EXPECT_EQ(r.metric("arrived") + r.metric("never_arrived"), r.metric("requests")) << name;
  EXPECT_EQ(r.metric("completed") + r.metric("aborted") + r.metric("rejected") + r.metric("unfinished"),
            r.metric("arrived"))
      << name;
  ASSERT_EQ(r.outcomes.size(), w.requests.size()) << name;
  double arrived = 0;
  double completed = 0;
  for (const RequestOutcome& o : r.outcomes) {
    arrived += o.arrived ? 1 : 0;
    completed += o.completed ? 1 : 0;
    EXPECT_TRUE(o.ttft_ms == -1 || o.ttft_ms >= 0) << name << " ttft " << o.ttft_ms;
  }
  EXPECT_EQ(arrived, r.metric("arrived")) << name;
  EXPECT_EQ(completed, r.metric("completed")) << name;
}

TEST(Replay, EveryRequestFinishesOrIsReportedUnderMemoryPressure) {
  // A small GPU: ~1,300 blocks of KV, so every policy must preempt.
  ReplayParams params = small_params(3.0, 60);
  params.cost_model.gpu_memory_gib = 22.35;  // a "24 GB" GPU
  params.cost_model.gpu_memory_utilization = 0.95;
  const Workload w = generate_workload(params.workload, 3);
  double answer_tokens = 0;
  for (const RequestSpec& r : w.requests) answer_tokens += r.answer_tokens;
  for (PolicyKind p : kAllPolicies) {
    // With the default 40% think cap a long reasoning request cannot fit in
    // this small KV at all (Meridian aborts it, and reports it): see below.
    const ReplayResult r = run(p, w, params, 7, 0.9);
    expect_conserved(r, w);
    EXPECT_EQ(r.metric("completed"), r.metric("requests")) << to_string(p);
    EXPECT_EQ(r.metric("output_tokens_total"), answer_tokens) << to_string(p);
    EXPECT_GT(r.metric("preemptions"), 0) << to_string(p);
  }
}

TEST(Replay, RequestsThatCanNeverFitAreAbortedAndReported) {
  ReplayParams params = small_params(3.0, 60);
  params.cost_model.gpu_memory_gib = 22.35;  // a "24 GB" GPU: ~890 blocks, ~14 K tokens of KV
  params.cost_model.gpu_memory_utilization = 0.95;
  Workload w;
  w.name = "never-fits";
  RequestSpec small;
  small.id = 1;
  small.prompt_tokens = 100;
  small.think_tokens = 500;
  small.answer_tokens = 50;
  RequestSpec huge = small;  // its reasoning alone is larger than the whole pool
  huge.id = 2;
  huge.arrival_s = 0.5;
  huge.think_tokens = 20000;
  w.requests = {small, huge};
  for (PolicyKind p : {PolicyKind::kMeridian, PolicyKind::kMeridianNoForcing}) {
    const ReplayResult r = run(p, w, params, 7, 0.9);
    expect_conserved(r, w);
    EXPECT_EQ(r.metric("aborted"), 1) << to_string(p);
    EXPECT_EQ(r.metric("completed"), 1) << to_string(p);
  }
}

RequestSpec chat_request(std::uint64_t id, double arrival_s, std::uint32_t prompt = 100) {
  RequestSpec r;
  r.id = id;
  r.arrival_s = arrival_s;
  r.prompt_tokens = prompt;
  r.answer_tokens = 20;
  return r;
}

TEST(Replay, AsyncSchedulingPlansAStepAheadAsVllmsBatchQueueDoes) {
  // Request 1 arrives at 0, request 2 a millisecond later, during 1's prefill. Lockstep admits 2
  // when that step ends; with two steps in flight the plan made then saw arrivals only up to the
  // step's start, so 2 waits one step more. A finished request runs one more step (its output
  // dropped) before its KV is given back.
  ReplayParams params = small_params();
  Workload w;
  w.requests = {chat_request(1, 0.0, 2000), chat_request(2, 0.001)};
  const ReplayResult sync = run(PolicyKind::kVllmFcfs, w, params);
  params.engine.async_scheduling = true;
  const ReplayResult two = run(PolicyKind::kVllmFcfs, w, params);
  ASSERT_EQ(two.metric("completed"), 2);
  EXPECT_EQ(two.outcomes[0].ttft_ms, sync.outcomes[0].ttft_ms);
  EXPECT_GT(two.outcomes[1].ttft_ms, sync.outcomes[1].ttft_ms);
  // Request 1 runs one extra decode; the last request's extra step changes nothing measured.
  EXPECT_EQ(two.metric("simulated_tokens"), sync.metric("simulated_tokens") + 1);
  // Meridian's policy steps the same way under async (the adapter holds think decodes through
  // next_decode_eligible_step, ADR-0024): a step later for request 2, one extra decode.
  const ReplayResult meridian_two = run(PolicyKind::kMeridianNoForcing, w, params);
  params.engine.async_scheduling = false;
  const ReplayResult meridian_sync = run(PolicyKind::kMeridianNoForcing, w, params);
  ASSERT_EQ(meridian_two.metric("completed"), 2);
  EXPECT_GT(meridian_two.outcomes[1].ttft_ms, meridian_sync.outcomes[1].ttft_ms);
  EXPECT_EQ(meridian_two.metric("simulated_tokens"), meridian_sync.metric("simulated_tokens") + 1);
}

TEST(Replay, AsyncSchedulingTellsTheSchedulerOfThinkEndsAfterItPlannedTheNextStep) {
  // Answers bind (15 ms a token), so Meridian paces reasoning decodes and most do not run in
  // consecutive steps. Lockstep, a request whose </think> came at the end of a step is served
  // first in the next; with two in flight the next step was planned before its output was
  // back, so its first answer token comes a step later unless that step ran it anyway (the
  // in-flight decode samples it), as vLLM's update_from_output follows schedule().
  ReplayParams params = small_params(25, 30);
  params.slo.ttft_ms = 500;
  params.slo.output_tpot_ms = 15;
  params.slo.think_tpot_ms = 40;
  const Workload w = generate_workload(params.workload, 44);
  const ReplayResult sync = run(PolicyKind::kMeridianNoForcing, w, params);
  params.engine.async_scheduling = true;
  const ReplayResult two = run(PolicyKind::kMeridianNoForcing, w, params);
  expect_conserved(two, w);
  // A step, measured as the answers' token gap (about 14.7 ms here).
  const double step_ms = sync.metric("output_tpot_p50_ms");
  EXPECT_LT(sync.metric("ttot_p50_ms"), 1.3 * step_ms);
  EXPECT_GT(two.metric("ttot_p50_ms"), 1.8 * step_ms);  // 29.9 ms; 15.0 when it learnt at once
  EXPECT_LT(two.metric("ttot_p50_ms"), 2.3 * step_ms);
}

// Issue 15: a trace request whose prompt can never fit made vLLM's policies
// recompute for minutes and Meridian's throw out of the whole run.
TEST(Replay, EveryPolicyAbortsARequestThatCanNeverFitAtAdmission) {
  Workload w;
  w.requests = {chat_request(1, 0), chat_request(2, 0.1, 4294967295U), chat_request(3, 0.2)};
  for (PolicyKind p : kAllPolicies) {
    const ReplayResult r = run(p, w, small_params());
    expect_conserved(r, w);
    EXPECT_EQ(r.metric("aborted"), 1) << to_string(p);
    EXPECT_EQ(r.metric("completed"), 2) << to_string(p);
    EXPECT_FALSE(r.outcomes[1].completed) << to_string(p);
    EXPECT_FALSE(r.outcomes[1].slo_met) << to_string(p);
  }
}

// A request whose reasoning outgrows the whole KV pool: vLLM's policies
// preempted it by recompute and re-ran it until the time limit.
TEST(Replay, EveryPolicyAbortsARequestThatOutgrowsTheWholePool) {
  ReplayParams params = small_params();
  params.cost_model.gpu_memory_gib = 22.35;  // ~14 K tokens of KV
  params.cost_model.gpu_memory_utilization = 0.95;
  params.engine.max_sim_time_s = 3600;
  Workload w;
  RequestSpec huge = chat_request(1, 0);
  huge.think_tokens = 20000;
  w.requests = {huge, chat_request(2, 0.5)};
  for (PolicyKind p : kAllPolicies) {
    const ReplayResult r = run(p, w, params, 7, 0.9);
    expect_conserved(r, w);
    EXPECT_EQ(r.metric("completed"), 2 - r.metric("aborted")) << to_string(p);
    // Forcing can end the reasoning in time: static-budget's at 2,048 tokens
    // always does, Meridian's entropy forcing may. Without forcing it cannot fit.
    if (p == PolicyKind::kStaticBudget) {
      EXPECT_EQ(r.metric("aborted"), 0);
    }
    if (p != PolicyKind::kStaticBudget && p != PolicyKind::kMeridian) {
      EXPECT_EQ(r.metric("aborted"), 1) << to_string(p);
    }
    EXPECT_LT(r.metric("makespan_s"), 600) << to_string(p);
  }
}

// Issue 15: arrival_s = 1e10 overflowed the nanosecond clock (TTFT -9.2e12 ms).
TEST(Replay, ArrivalTimesAreCheckedAndLateArrivalsAreReportedAsNeverArrived) {
  ReplayParams params = small_params();
  params.engine.max_sim_time_s = 100;
  Workload w;
  w.requests = {chat_request(1, 0), chat_request(2, 1e10)};
  try {
    (void)run(PolicyKind::kVllmFcfs, w, params);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("workload request 2: arrival_s must be in [0, 1e+09] s; got 1e+10"),
              std::string::npos)
        << e.what();
  }
  // Past the time limit but representable: in the never-arrived bucket.
  w.requests[1].arrival_s = 5000;
  RequestSpec follow_up = chat_request(3, 0);
  follow_up.after = 1;
  follow_up.conversation = 1;
  follow_up.delay_s = 1e9;  // sent after the time limit too
  w.requests[0].conversation = 1;
  w.requests.push_back(follow_up);
  for (PolicyKind p : kAllPolicies) {
    const ReplayResult r = run(p, w, params);
    expect_conserved(r, w);
    EXPECT_EQ(r.metric("completed"), 1) << to_string(p);
    EXPECT_EQ(r.metric("never_arrived"), 2) << to_string(p);
    EXPECT_GE(r.metric("ttft_p50_ms"), 0) << to_string(p);
    // The arrival window ends at the time limit, not at the late arrival.
    EXPECT_GT(r.metric("arrival_window_throughput_tokens_per_s"), 0) << to_string(p);
  }
  w.requests[2].delay_s = -1;
  EXPECT_THROW((void)run(PolicyKind::kMeridian, w, params), InvalidArgument);
}

TEST(Trace, ArrivalAndDelayMustConvertToTheNanosecondClock) {
  std::istringstream late(R"({"arrival_s": 1e10, "prompt_tokens": 10, "answer_tokens": 5})");
  try {
    (void)read_trace(late, "t.jsonl");
    FAIL() << "expected TraceError";
  } catch (const TraceError& e) {
    EXPECT_NE(
        std::string(e.what()).find("t.jsonl:1: arrival_s: must be a finite number of seconds in [0, 1e+09]"),
        std::string::npos)
        << e.what();
  }
  std::istringstream delay(
      "{\"arrival_s\": 0, \"prompt_tokens\": 10, \"answer_tokens\": 5, \"conversation\": 1}\n"
      "{\"after\": 1, \"delay_s\": 2e9, \"prompt_tokens\": 10, \"answer_tokens\": 5, \"conversation\": 1}\n");
  EXPECT_THROW((void)read_trace(delay, "t.jsonl"), TraceError);
}

// Issue 15: far more arrivals than the engine can serve grew without bound.
// The engine holds max_num_seqs + kMaxWaitingRequests requests; the rest are
// rejected at once, so the run ends soon after the arrivals stop.
TEST(Replay, ArrivalsBeyondTheWaitingBoundAreRejected) {
  ReplayParams params = small_params();
  params.engine.max_num_seqs = 64;
  Workload w;
  const std::uint64_t n = kMaxWaitingRequests + 64 + 1000;
  for (std::uint64_t i = 1; i <= n; ++i) {
    RequestSpec r = chat_request(i, 0, 16);
    r.answer_tokens = 1;
    w.requests.push_back(r);
  }
  for (PolicyKind p : {PolicyKind::kVllmFcfs, PolicyKind::kMeridian}) {
    const ReplayResult r = run(p, w, params);
    expect_conserved(r, w);
    EXPECT_EQ(r.metric("rejected"), 1000) << to_string(p);
    EXPECT_EQ(r.metric("completed"), static_cast<double>(n - 1000)) << to_string(p);
  }
}

TEST(Replay, ConservationHoldsWhenTheRunIsCutShort) {
  ReplayParams params = small_params(4.0, 60);
  params.engine.max_sim_time_s = 30;  // stops with requests in flight
  const Workload w = generate_workload(params.workload, 5);
  for (PolicyKind p : kAllPolicies) {
    const ReplayResult r = run(p, w, params);
    expect_conserved(r, w);
    EXPECT_GT(r.metric("unfinished") + r.metric("never_arrived"), 0) << to_string(p);
  }
}

TEST(Replay, StaticBudgetCapsThinkingAndVllmNeverForces) {
  const ReplayParams params = small_params();
  const Workload w = generate_workload(params.workload, 9);
  const ReplayResult budget = run(PolicyKind::kStaticBudget, w, params);
  EXPECT_LE(budget.metric("think_tokens_p95"), params.engine.thinking_token_budget);
  EXPECT_GT(budget.metric("forced_hard_cap_pct"), 0);
  EXPECT_EQ(budget.metric("forced_converged_pct") + budget.metric("forced_overthinking_pct"), 0);
  for (PolicyKind p : {PolicyKind::kVllmFcfs, PolicyKind::kVllmPriority, PolicyKind::kMeridianNoForcing}) {
    const ReplayResult r = run(p, w, params);
    EXPECT_EQ(r.metric("forced_pct"), 0) << to_string(p);
    // Without forcing every request thinks its natural length.
    EXPECT_GT(r.metric("think_tokens_total"), budget.metric("think_tokens_total")) << to_string(p);
  }
}

TEST(Replay, MeridianForcesOnEntropySignalsAndSavesThinkTokens) {
  const ReplayParams params = small_params(1.0, 120);
  const Workload w = generate_workload(params.workload, 21);
  const ReplayResult forced = run(PolicyKind::kMeridian, w, params);
  const ReplayResult unforced = run(PolicyKind::kMeridianNoForcing, w, params);
  EXPECT_GT(forced.metric("forced_overthinking_pct") + forced.metric("forced_converged_pct"), 0);
  EXPECT_LT(forced.metric("think_tokens_total"), unforced.metric("think_tokens_total"));
  EXPECT_EQ(forced.metric("output_tokens_total"), unforced.metric("output_tokens_total"));
  EXPECT_GT(forced.metric("probe_passes"), 0);
  EXPECT_EQ(unforced.metric("probe_passes"), 0);
}

TEST(Replay, VllmBaselinesKeepOneLruTierMeridianTiersReasoning) {
  ReplayParams params = small_params(3.0, 60);
  params.cost_model.gpu_memory_gib = 22.35;  // a "24 GB" GPU
  params.cost_model.gpu_memory_utilization = 0.95;
  const Workload w = generate_workload(params.workload, 3);
  const ReplayResult fcfs = run(PolicyKind::kVllmFcfs, w, params);
  EXPECT_EQ(fcfs.metric("evictions_think_complete") + fcfs.metric("evictions_think_active"), 0);
  const ReplayResult meridian = run(PolicyKind::kMeridian, w, params);
  EXPECT_GT(meridian.metric("evictions_think_complete") + meridian.metric("evictions_think_active"), 0);
}

TEST(Replay, ReportsCarryTheContractKeys) {
  const ReplayParams params = small_params(1.0, 20);
  const Workload w = generate_workload(params.workload, 1);
  std::vector<ReplayResult> results;
  for (PolicyKind p : kAllPolicies) results.push_back(run(p, w, params));
  ReportContext ctx;
  ctx.requests = w.requests.size();
  ctx.params = params;
  std::vector<PolicyRuns> runs;
  for (ReplayResult& r : results) runs.push_back({r.policy, {r}});
  const std::string json = ab_report_json(runs, ctx);
  for (const char* key : {"ttft_p95_ms", "ttot_p95_ms", "output_itl_p99_ms", "think_tpot_p99_ms",
                          "think_tokens_avg", "throughput_tokens_per_s", "preemptions",
                          "output_critical_eviction_events", "simulated_tokens", "sim_wall_s"}) {
    EXPECT_NE(json.find(std::string("\"") + key + "\""), std::string::npos) << key;
  }
  // Every catalog metric is reported, in catalog order.
  ASSERT_EQ(results[0].metrics.size(), metric_catalog().size());
  for (std::size_t i = 0; i < metric_catalog().size(); ++i) {
    EXPECT_EQ(results[0].metrics[i].first, metric_catalog()[i].name);
  }
  for (const char* key : {"\"ttfv_p95_ms\"", "\"slo_attainment_pct\"", "\"vllm-fcfs-tuned\"", "\"intervals\"",
                          "\"per_seed\"", "\"ci95\""}) {
    EXPECT_NE(json.find(key), std::string::npos) << key;
  }
  const std::string md = ab_report_markdown(runs, ctx);
  EXPECT_NE(md.find("meridian Δ% vs vllm-fcfs"), std::string::npos);
  EXPECT_NE(md.find("meridian-no-forcing Δ% vs vllm-fcfs-tuned"), std::string::npos);
}

TEST(DeltaFlags, ThresholdsAndDirection) {
  EXPECT_EQ(delta_flag(-25, Better::kLower), "WIN");
  EXPECT_EQ(delta_flag(-5, Better::kLower), "win");
  EXPECT_EQ(delta_flag(1.5, Better::kLower), "FLAT");
  EXPECT_EQ(delta_flag(5, Better::kLower), "loss");
  EXPECT_EQ(delta_flag(25, Better::kLower), "LOSS");
  EXPECT_EQ(delta_flag(25, Better::kHigher), "WIN");
  EXPECT_EQ(delta_pct(50, 100), -50);
  EXPECT_EQ(delta_pct(0, 0), 0);
  EXPECT_TRUE(std::isinf(delta_pct(1, 0)));
}

}  // namespace
}  // namespace meridian::sim
