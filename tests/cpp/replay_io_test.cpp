// Replay inputs: the replay TOML, JSONL traces, workload generators and the
// signal model; bad input names the file, line and field.
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "meridian/replay.h"
#include "source_path.h"

namespace meridian::sim {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(ReplayParams, DefaultsRoundTripThroughToml) {
  const ReplayParams defaults;
  const ReplayParams back = parse_replay_params(to_toml(defaults));
  EXPECT_EQ(to_toml(back), to_toml(defaults));
}

TEST(ReplayParams, OverlaysNestedTables) {
  const ReplayParams p = parse_replay_params(
      "[engine]\nmax_num_seqs = 256\n[cost_model]\nhbm_bandwidth_gbps = 4800\n[workload.think]\nmedian = "
      "4000\n");
  EXPECT_EQ(p.engine.max_num_seqs, 256U);
  EXPECT_EQ(p.cost_model.hbm_bandwidth_gbps, 4800);
  EXPECT_EQ(p.workload.think.median, 4000);
  EXPECT_EQ(p.workload.think.sigma, WorkloadParams{}.think.sigma);
}

TEST(ReplayParams, EveryMistakeIsNamedByDottedPath) {
  const std::string msg = error_of([] {
    (void)parse_replay_params(
        "[engine]\nmax_num_seqs = -1\nbogus = 1\n[cost_model]\nbandwidth_efficiency = 1.5\n"
        "[workload]\nkind = 3\n[workload.thinking]\nmedian = 1\n",
        "replay.toml");
  });
  // The same reader and wording as meridian.toml (config/toml_fields.h).
  EXPECT_NE(msg.find("engine.max_num_seqs must be >= 0; got -1 (at replay.toml:2:16)"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("engine.bogus is not a known key of [engine] (known: max_num_batched_tokens"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("workload.kind must be a string; got integer 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("workload.thinking is not a known key of [workload]; did you mean 'think'?"),
            std::string::npos)
      << msg;
  EXPECT_LT(msg.find("engine.max_num_seqs"), msg.find("engine.bogus")) << "file order";
  EXPECT_NE(msg.find("replay.toml:2"), std::string::npos) << msg;
  const std::string range =
      error_of([] { (void)parse_replay_params("[cost_model]\nbandwidth_efficiency = 1.5\n"); });
  EXPECT_NE(range.find("cost_model.bandwidth_efficiency must be in (0, 1]; got 1.5"), std::string::npos)
      << range;
  const std::string dist =
      error_of([] { (void)parse_replay_params("[workload.answer]\nmin = 50\nmax = 10\n"); });
  EXPECT_NE(dist.find("workload.answer.max must be >= workload.answer.min (50); got 10"), std::string::npos)
      << dist;
  const std::string syntax = error_of([] { (void)parse_replay_params("[engine\n", "x.toml"); });
  EXPECT_NE(syntax.find("TOML syntax error"), std::string::npos) << syntax;
}

// ---- hardening (issue 15): values that passed validation but hung the engine,
// blew up its memory or made an undefined float -> integer cast.

std::vector<ConfigIssue> replay_issues(const std::string& toml) {
  try {
    (void)parse_replay_params(toml, "r.toml");
  } catch (const ConfigError& e) {
    return e.issues();
  }
  return {};
}

TEST(ReplayParams, SeriesIntervalAndSimTimeKeepTheRunBounded) {
  // 1e-9: 15 GB of samples in 60 s; 1e-10: a 0 ns interval, an endless loop;
  // 1e300 and inf: undefined casts to int64 nanoseconds (inf ran nothing).
  const struct {
    const char* toml;
    const char* message;
  } cases[] = {
      {"[engine]\nseries_interval_s = 1e-9\n",
       "engine.series_interval_s must be in [0.001, 2592000]; got 1e-09"},
      {"[engine]\nseries_interval_s = 1e-10\n",
       "engine.series_interval_s must be in [0.001, 2592000]; got 1e-10"},
      {"[engine]\nseries_interval_s = 1e300\n",
       "engine.series_interval_s must be in [0.001, 2592000]; got 1e+300"},
      {"[engine]\nmax_sim_time_s = inf\n",
       "engine.max_sim_time_s must be a finite number in (0, 2592000]; got inf"},
      {"[engine]\nmax_sim_time_s = 1e300\n", "engine.max_sim_time_s must be in (0, 2592000]; got 1e+300"},
      {"[engine]\nseries_interval_s = 0.01\n",
       "engine.series_interval_s must be >= engine.max_sim_time_s / 1000000 (0.0864), so the time series "
       "holds "
       "at most 1000000 samples; got 0.01"},
      {"[engine]\nmax_sim_time_s = 100\nseries_interval_s = 200\n",
       "engine.series_interval_s must be <= engine.max_sim_time_s (100.0); got 200.0"},
  };
  for (const auto& c : cases) {
    const auto issues = replay_issues(c.toml);
    ASSERT_EQ(issues.size(), 1U) << c.toml;
    EXPECT_EQ(issues[0].message, c.message);
  }
  EXPECT_NO_THROW((void)parse_replay_params("[engine]\nmax_sim_time_s = 1000\nseries_interval_s = 0.001\n"));
}

TEST(ReplayParams, EveryNumberMustBeFiniteAndBounded) {
  // Every numeric field of the printed defaults, set to inf, nan and (but the SLOs) 1e300.
  std::istringstream doc(to_toml(ReplayParams{}));
  std::string line;
  std::string table;
  int numbers = 0;
  while (std::getline(doc, line)) {
    if (line.starts_with("[")) {
      table = line;
      continue;
    }
    const auto eq = line.find(" = ");
    if (eq == std::string::npos || line[eq + 3] == '"') continue;
    const std::string key = line.substr(0, eq);
    const std::string path = table.substr(1, table.size() - 2) + "." + key;
    ++numbers;
    for (const char* bad : {"inf", "-inf", "nan", "1e300"}) {
      // SLO bounds are only compared with, never converted: any finite value is fine.
      if (path.starts_with("slo.") && std::string_view(bad) == "1e300") continue;
      const auto issues = replay_issues(fmt::format("{}\n{} = {}\n", table, key, bad));
      ASSERT_FALSE(issues.empty()) << path << " = " << bad << " was accepted";
      EXPECT_EQ(issues[0].path, path) << bad << ": " << issues[0].message;
    }
  }
  EXPECT_GE(numbers, 60);
}

TEST(ReplayParams, ArrivalRateIsBoundedByTheRequestsItWouldGenerate) {
  // --arrival-rate 1e6 generated 6e8 requests: gigabytes before any progress.
  ReplayParams p;
  p.workload.arrival_rate = 1e6;
  try {
    validate(p);
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.issues().size(), 1U);
    EXPECT_EQ(e.issues()[0].path, "workload.arrival_rate");
  }
  p.workload.arrival_rate = 600;  // 4.3 M expected requests over the default hour: allowed
  EXPECT_NO_THROW(validate(p));
  p.workload.arrival_rate = 1000;  // 7.2 M: refused
  EXPECT_THROW(validate(p), ConfigError);
  p.workload.arrival_rate = 1e6;
  p.workload.duration_s = 1;
  EXPECT_THROW(validate(p), ConfigError);  // above the 10 000 /s field bound
}

TEST(ReplayParams, CostModelCannotMakeHugeCachesOrEndlessSteps) {
  EXPECT_EQ(replay_issues("[cost_model]\ngpu_memory_gib = 60000\n").at(0).path, "cost_model.gpu_memory_gib");
  EXPECT_EQ(replay_issues("[cost_model]\nbandwidth_efficiency = 1e-300\n").at(0).path, "cost_model");
  // Per-token KV size stays a small 64-bit product.
  EXPECT_EQ(replay_issues("[cost_model]\nlayers = 4294967295\n").at(0).path, "cost_model.layers");
}

TEST(ReplayParams, AFileThatCannotBeReadIsAnError) {
  const auto dir = std::filesystem::temp_directory_path();
  try {
    (void)load_replay_params(dir);
    FAIL() << "a directory was read as the defaults";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("it is a directory"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)load_replay_params("/nonexistent/replay.toml"), ConfigError);
}

TEST(ReplayParams, RenamedFieldsPointAtTheNewName) {
  EXPECT_EQ(replay_issues("[cost_model]\ngpu_memory_gb = 80\n").at(0).message,
            "cost_model.gpu_memory_gb was renamed to cost_model.gpu_memory_gib (GiB, as CUDA reports device "
            "memory)");
}

TEST(Trace, ReadsWritesAndReadsBack) {
  std::istringstream in(
      "# a comment\n"
      "{\"arrival_s\": 0.5, \"prompt_tokens\": 100, \"think_tokens\": 900, \"answer_tokens\": 50, "
      "\"conversation\": 7}\n"
      "\n"
      "{\"after\": 1, \"delay_s\": 3, \"prompt_tokens\": 180, \"answer_tokens\": 20, \"conversation\": 7, "
      "\"turn\": 1}\n");
  const Workload w = read_trace(in, "t.jsonl");
  ASSERT_EQ(w.requests.size(), 2U);
  EXPECT_EQ(w.requests[0].think_tokens, 900U);
  EXPECT_EQ(w.requests[1].after, 1U);
  std::ostringstream out;
  write_trace(w, out);
  std::istringstream again(out.str());
  const Workload w2 = read_trace(again, "again");
  ASSERT_EQ(w2.requests.size(), 2U);
  EXPECT_EQ(w2.requests[1].delay_s, 3);
  EXPECT_EQ(w2.requests[0].conversation, 7U);
}

TEST(Trace, ATurnHasOneFollowUpInItsOwnConversation) {
  // Two follow-ups of one turn: the second would never arrive (issue 27: a
  // 100 K-line fan-out replayed one request and dropped the rest, exit 0).
  auto err = [](const std::string& text) {
    return error_of([&] {
      std::istringstream in(text);
      (void)read_trace(in, "t.jsonl");
    });
  };
  const std::string first =
      "{\"arrival_s\": 0, \"prompt_tokens\": 3, \"answer_tokens\": 5, \"conversation\": 4}\n";
  const std::string turn =
      "{\"after\": 1, \"prompt_tokens\": 3, \"answer_tokens\": 5, \"conversation\": 4}\n";
  EXPECT_EQ(
      err(first + turn + "# a comment\n" + turn),
      "t.jsonl:4: after: request 1 (line 1) already has a follow-up on line 2; a turn has one next turn "
      "(start a new conversation for a branch)");
  EXPECT_EQ(
      err(first + "{\"after\": 1, \"prompt_tokens\": 3, \"answer_tokens\": 5, \"conversation\": 9}\n"),
      "t.jsonl:2: conversation: must be the conversation of the turn it follows (request 1 on line 1: 4); "
      "got 9");
  // A chain is fine: 1 -> 2 -> 3.
  std::istringstream chain(
      first + turn + "{\"after\": 2, \"prompt_tokens\": 3, \"answer_tokens\": 5, \"conversation\": 4}\n");
  EXPECT_EQ(read_trace(chain, "t.jsonl").requests.size(), 3U);
}

TEST(Trace, NoConversationIdCanFakeAPrefixHit) {
  // Blocks were hashed from the ids themselves: conversation c's prompt blocks as
  // mix64(mix64(c * K1 + 1) ^ i), request r's own as mix64(mix64(r * K2 + 2) ^ i). The id below
  // solves c * K1 + 1 = 1 * K2 + 2 (mod 2^64), so request 2 "found" request 1's blocks: a prefix
  // hit rate of 0.5 between two unrelated requests (issue 48).
  constexpr std::uint64_t kCrafted = 18066064734844682768ULL;
  std::istringstream in(
      "{\"arrival_s\": 0, \"prompt_tokens\": 256, \"answer_tokens\": 4}\n"
      "{\"arrival_s\": 2, \"prompt_tokens\": 256, \"answer_tokens\": 4, \"conversation\": " +
      std::to_string(kCrafted) + "}\n");
  const Workload w = read_trace(in, "collide.jsonl");
  ReplayOptions o;
  o.policy = PolicyKind::kVllmFcfs;
  const ReplayResult r = run_replay(w, o);
  EXPECT_EQ(r.metric("completed"), 2);
  EXPECT_EQ(r.metric("prefix_hit_rate"), 0);
  // The control: the same second request as a real next turn of a conversation of request 1
  // finds its prompt.
  std::istringstream turn(
      "{\"arrival_s\": 0, \"prompt_tokens\": 256, \"answer_tokens\": 4, \"conversation\": 7}\n"
      "{\"arrival_s\": 2, \"prompt_tokens\": 256, \"answer_tokens\": 4, \"conversation\": 7}\n");
  EXPECT_GT(run_replay(read_trace(turn, "turn.jsonl"), o).metric("prefix_hit_rate"), 0);
}

TEST(Trace, TheEngineRefusesAFanOutThatDidNotComeFromATrace) {
  // Workloads built in code (bindings, tests) reach the engine without read_trace.
  Workload w;
  for (std::uint64_t id = 1; id <= 3; ++id) {
    RequestSpec r;
    r.id = id;
    r.prompt_tokens = 3;
    r.answer_tokens = 5;
    r.conversation = 1;
    r.after = id == 1 ? 0 : 1;
    w.requests.push_back(r);
  }
  ReplayOptions o;
  EXPECT_EQ(error_of([&] { (void)run_replay(w, o); }),
            "workload request 3: after (1) already has a follow-up (request 2)");
}

TEST(Trace, BadLinesNameFileLineAndField) {
  auto err = [](const std::string& text) {
    return error_of([&] {
      std::istringstream in(text);
      (void)read_trace(in, "t.jsonl");
    });
  };
  EXPECT_EQ(err("{\"arrival_s\": 0, \"answer_tokens\": 5}\n"), "t.jsonl:1: prompt_tokens: is required");
  EXPECT_EQ(err("\n{\"arrival_s\": 0, \"prompt_tokens\": -3, \"answer_tokens\": 5}\n"),
            "t.jsonl:2: prompt_tokens: must be in [1, 4294967295]; got -3");
  EXPECT_NE(err("{\"arrival_s\": 0, \"prompt_tokens\": 3, \"answer_tokens\": 5, \"colour\": 1}\n")
                .find("t.jsonl:1: colour: is not a trace field"),
            std::string::npos);
  EXPECT_EQ(err("{\"after\": 1, \"prompt_tokens\": 3, \"answer_tokens\": 5, \"conversation\": 1}\n"),
            "t.jsonl:1: after: must name an earlier line's request (1..0); got 1");
  EXPECT_NE(err("{\"arrival_s\": 0, \n").find("t.jsonl:1: not valid JSON (byte"), std::string::npos);
  EXPECT_EQ(err("{\"arrival_s\": 0, \"prompt_tokens\": 3, \"think_tokens\": 5, \"answer_tokens\": 5, "
                "\"answer_at\": 9}\n"),
            "t.jsonl:1: answer_at: must be <= think_tokens (5); got 9");
  EXPECT_EQ(err("# nothing\n"), "t.jsonl: the trace holds no requests");
}

// Fuzzing findings (fuzz/regressions/fuzz_trace): a number too large for a
// double escaped as an nlohmann exception; integers above 2^63 - 1 were read
// as negative int64 ("got -1" for 18446744073709551615, a valid conversation id rejected).
TEST(Trace, NumbersBeyondTheirTypeAreTraceErrorsThatShowTheValue) {
  const auto read = [](const std::string& text) {
    std::istringstream in(text);
    return read_trace(in, "t.jsonl");
  };
  EXPECT_THROW((void)read("{\"arrival_s\": 1e400, \"prompt_tokens\": 1, \"answer_tokens\": 1}\n"),
               TraceError);
  EXPECT_NE(error_of([&] {
              (void)read("{\"arrival_s\": 1e400, \"prompt_tokens\": 1, \"answer_tokens\": 1}\n");
            }).find("t.jsonl:1: not valid JSON"),
            std::string::npos);
  EXPECT_EQ(
      error_of([&] {
        (void)read("{\"arrival_s\": 0, \"prompt_tokens\": 18446744073709551615, \"answer_tokens\": 1}\n");
      }),
      "t.jsonl:1: prompt_tokens: must be in [1, 4294967295]; got 18446744073709551615");
  const Workload w = read(
      "{\"arrival_s\": 0, \"prompt_tokens\": 1, \"answer_tokens\": 1, \"conversation\": "
      "18446744073709551615}\n");
  EXPECT_EQ(w.requests.at(0).conversation, 18446744073709551615ULL);
}

TEST(Trace, AFileThatCannotBeReadIsAnError) {
  // Was "holds no requests" for a directory, and a silently cut-short trace for a read error.
  const std::string dir = std::filesystem::temp_directory_path().string();
  EXPECT_NE(
      error_of([&] { (void)load_trace(dir); }).find(dir + ": cannot read the trace file: it is a directory"),
      std::string::npos);
  if (std::filesystem::exists("/proc/self/mem")) {
    EXPECT_NE(error_of([] { (void)load_trace("/proc/self/mem"); }).find("cannot read the trace file"),
              std::string::npos);
  }
  // Memory without bound (issue 48): an endless stream is cut off at the input-file limit.
  if (std::filesystem::exists("/dev/zero")) {
    EXPECT_NE(error_of([] { (void)load_trace("/dev/zero"); }).find("it is larger than 64 MiB"),
              std::string::npos);
  }
}

TEST(Workloads, TheRequestLimitHoldsForEveryCallerOfTheGenerator) {
  // The CLI checked it in validate(ReplayParams); the Python API called the generator directly
  // and grew until the OOM killer. The limit now lives in validate(WorkloadParams).
  WorkloadParams w = workload_preset("mixed");
  w.arrival_rate = 1e6;
  w.duration_s = 3600;
  try {
    (void)generate_workload(w, 1);
    FAIL() << "generated";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.issues().size(), 1U);
    EXPECT_EQ(e.issues()[0].path, "workload.arrival_rate");
    EXPECT_NE(e.issues()[0].message.find("(the expected request count) must be <= 5000000"),
              std::string::npos);
  }
  w.arrival_rate = kMaxWorkloadRequests / w.duration_s / w.mean_turns * 0.999;
  EXPECT_NO_THROW(validate(w));
}

TEST(Trace, ShippedExampleTraceLoads) {
  const Workload w = load_trace(meridian::test::source_path("benchmarks/traces/example.jsonl"));
  EXPECT_GE(w.requests.size(), 10U);
}

TEST(Workload, SameSeedSameWorkloadAndFollowUpsPointBack) {
  WorkloadParams p;
  p.duration_s = 120;
  const Workload a = generate_workload(p, 5);
  const Workload b = generate_workload(p, 5);
  ASSERT_EQ(a.requests.size(), b.requests.size());
  std::size_t reasoning = 0;
  std::size_t follow_ups = 0;
  for (std::size_t i = 0; i < a.requests.size(); ++i) {
    const RequestSpec& r = a.requests[i];
    EXPECT_EQ(r.id, i + 1);
    EXPECT_EQ(r.prompt_tokens, b.requests[i].prompt_tokens);
    EXPECT_EQ(r.think_tokens, b.requests[i].think_tokens);
    if (r.after != 0) {
      ++follow_ups;
      const RequestSpec& prev = a.requests[r.after - 1];
      EXPECT_LT(r.after, r.id);
      EXPECT_EQ(prev.conversation, r.conversation);
      // The follow-up's prompt carries the previous prompt and visible answer.
      EXPECT_GT(r.prompt_tokens, prev.prompt_tokens + prev.answer_tokens);
    }
    reasoning += r.reasoning() ? 1U : 0U;
  }
  EXPECT_GT(follow_ups, 0U);
  const double share = static_cast<double>(reasoning) / static_cast<double>(a.requests.size());
  EXPECT_NEAR(share, p.reasoning_ratio, 0.1);
}

TEST(Workload, SeedsMixUsesTheSeedsRanges) {
  WorkloadParams p;
  p.kind = "seeds-mix";
  p.duration_s = 200;
  for (const RequestSpec& r : generate_workload(p, 2).requests) {
    EXPECT_EQ(r.after, 0U);
    if (r.reasoning()) {
      EXPECT_GE(r.think_tokens, 600U);
      EXPECT_LE(r.think_tokens, 6000U);
    } else {
      EXPECT_GE(r.answer_tokens, 40U);
      EXPECT_LE(r.answer_tokens, 240U);
    }
  }
}

TEST(SignalModel, DeterministicAndSettlesAfterTheAnswer) {
  const SignalModel m(SignalModelParams{}, 4);
  RequestSpec spec;
  spec.id = 3;
  spec.think_tokens = 4000;
  spec.answer_at = 2000;
  const RequestSignals s = m.plan(spec);
  EXPECT_EQ(s.answer_at, 2000U);
  EXPECT_EQ(m.eat(s, 100), m.eat(s, 100));
  EXPECT_EQ(m.token_entropy(s, 77), m.token_entropy(s, 77));
  // Well after the answer EAT sits near the floor with tiny noise.
  EXPECT_NEAR(m.eat(s, 3500), SignalModelParams{}.eat_floor, 0.05);
  // Before it, it is far above the floor.
  EXPECT_GT(m.eat(s, 500), 1.0);
  // An overthinking loop raises the share of transition tokens.
  RequestSignals looping = s;
  looping.loop_start = 2100;
  int before = 0;
  int inside = 0;
  for (std::uint32_t t = 1000; t < 1900; ++t) before += m.token_entropy(looping, t) > 2.5 ? 1 : 0;
  for (std::uint32_t t = 2200; t < 3100; ++t) inside += m.token_entropy(looping, t) > 2.5 ? 1 : 0;
  EXPECT_GT(inside, 3 * before);
}

}  // namespace
}  // namespace meridian::sim
