// Replay inputs: the replay TOML, JSONL traces, workload generators and the
// signal model; bad input names the file, line and field.
#include <sstream>

#include <gtest/gtest.h>

#include "meridian/replay.h"

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
  EXPECT_NE(msg.find("engine.max_num_seqs must be an integer"), std::string::npos) << msg;
  EXPECT_NE(msg.find("engine.bogus is not a known field"), std::string::npos) << msg;
  EXPECT_NE(msg.find("workload.kind must be a string"), std::string::npos) << msg;
  EXPECT_NE(msg.find("workload.thinking is not a known section"), std::string::npos) << msg;
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

TEST(Trace, ShippedExampleTraceLoads) {
  const Workload w = load_trace(MERIDIAN_SOURCE_DIR "/benchmarks/traces/example.jsonl");
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
