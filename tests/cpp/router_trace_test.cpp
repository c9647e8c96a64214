// Trace-table tests of the phase router: each row is one input (token, text,
// force request) with the event and phase expected after it.
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meridian/phase_router.h"
#include "router_test_model.h"

namespace meridian {
namespace {

using testing::id_model;
using testing::kEnd;
using testing::kEos;
using testing::kStart;
using testing::kTool;
using testing::kToolEnd;
using testing::kWord;
constexpr RequestId kReq = 7;

ModelConfig prose_model() {
  ModelConfig m = MeridianConfig::defaults().model("granite_3_2");
  m.eos_token_ids = {kEos};
  return m;
}

RouterLimits limits(std::uint64_t min_think = 2, std::uint64_t max_think = 5, std::uint32_t grace = 1) {
  RouterLimits l;
  l.min_think_tokens = min_think;
  l.max_think_tokens = max_think;
  l.force_reissue_grace_steps = grace;
  return l;
}

struct Expect {
  PhaseEventKind kind;
  std::uint64_t think_tokens;
  ForceReason reason = ForceReason::kHardCap;
  bool reissue = false;
  bool forced = false;
};

enum class Op { kToken, kForce };

struct Row {
  Op op;
  TokenId token;             // kToken
  std::string text;          // kToken, prose models
  ForceReason reason;        // kForce
  ForceResult force_result;  // kForce
  std::optional<Expect> event;
  std::optional<Phase> phase;  // nullopt: request no longer tracked
};

Row tok(TokenId token, std::optional<Expect> event, std::optional<Phase> phase) {
  return {Op::kToken, token, "", ForceReason::kHardCap, ForceResult::kIssued, event, phase};
}
Row text(std::string piece, std::optional<Expect> event, std::optional<Phase> phase) {
  return {Op::kToken, kWord, std::move(piece), ForceReason::kHardCap, ForceResult::kIssued, event, phase};
}
Row force(ForceReason reason, ForceResult result, std::optional<Expect> event, std::optional<Phase> phase) {
  return {Op::kForce, 0, "", reason, result, event, phase};
}

constexpr auto kPre = Phase::kPrefill;
constexpr auto kThink = Phase::kThinkDecode;
constexpr auto kOut = Phase::kOutputDecode;
constexpr std::nullopt_t kGone = std::nullopt;

Expect enter(std::uint64_t n = 0) { return {PhaseEventKind::kEnterThink, n}; }
Expect exit_think(std::uint64_t n, bool forced = false, ForceReason r = ForceReason::kHardCap) {
  return {PhaseEventKind::kExitThink, n, r, false, forced};
}
Expect complete(std::uint64_t n) { return {PhaseEventKind::kComplete, n}; }
Expect forced(ForceReason r, std::uint64_t n, bool reissue = false) {
  return {PhaseEventKind::kForceBudget, n, r, reissue, false};
}

void run_trace(PhaseRouter& router, const std::vector<Row>& rows) {
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    SCOPED_TRACE("row " + std::to_string(i));
    std::optional<PhaseEvent> got;
    if (row.op == Op::kToken) {
      got = router.on_token(kReq, row.token, row.text);
    } else {
      PhaseEvent e;
      const ForceResult result = router.request_force(kReq, row.reason, &e);
      EXPECT_EQ(result, row.force_result) << to_string(result);
      if (result == ForceResult::kIssued) got = e;
    }
    ASSERT_EQ(got.has_value(), row.event.has_value())
        << (got ? std::string(to_string(got->kind)) : std::string("no event"));
    if (got) {
      EXPECT_EQ(got->request_id, kReq);
      EXPECT_EQ(got->kind, row.event->kind) << to_string(got->kind);
      EXPECT_EQ(got->think_tokens, row.event->think_tokens);
      if (got->kind == PhaseEventKind::kForceBudget) {
        EXPECT_EQ(got->reason, row.event->reason);
        EXPECT_EQ(got->reissue, row.event->reissue);
      }
      if (got->kind == PhaseEventKind::kExitThink) {
        EXPECT_EQ(got->forced, row.event->forced);
      }
    }
    const auto snap = router.snapshot(kReq);
    ASSERT_EQ(snap.has_value(), row.phase.has_value());
    if (snap) {
      EXPECT_EQ(snap->phase, *row.phase) << to_string(snap->phase);
    }
  }
}

TEST(RouterTrace, ThinkThenAnswerThenEos) {
  PhaseRouter router(id_model(), limits());
  EXPECT_EQ(router.begin(kReq), kPre);
  run_trace(router, {tok(kStart, enter(), kThink), tok(kWord, {}, kThink), tok(kWord, {}, kThink),
                     tok(kEnd, exit_think(2), kOut), tok(kWord, {}, kOut), tok(kEos, complete(2), kGone)});
  EXPECT_EQ(router.tracked(), 0U);
  const auto c = router.counters();
  EXPECT_EQ(c.enter_think, 1U);
  EXPECT_EQ(c.exit_think, 1U);
  EXPECT_EQ(c.completed, 1U);
}

TEST(RouterTrace, AnswerWithoutThinking) {
  PhaseRouter router(id_model(), limits());
  router.begin(kReq);
  run_trace(router, {tok(kWord, {}, kOut), tok(kStart, {}, kOut), tok(kEnd, {}, kOut),
                     tok(kEos, complete(0), kGone)});
  EXPECT_EQ(router.tracked(), 0U);
}

TEST(RouterTrace, EosInPrefillCompletes) {
  PhaseRouter router(id_model(), limits());
  router.begin(kReq);
  run_trace(router, {tok(kEos, complete(0), kGone)});
}

TEST(RouterTrace, EosDuringThinkCompletes) {
  // The original system ignored EOS while thinking and leaked the request.
  PhaseRouter router(id_model(), limits(2, 100));
  router.begin(kReq);
  run_trace(router, {tok(kStart, enter(), kThink), tok(kWord, {}, kThink), tok(kEos, complete(1), kGone)});
  EXPECT_EQ(router.tracked(), 0U);
}

TEST(RouterTrace, PromptEndingInsideThinkStartsThinking) {
  PhaseRouter router(id_model(), limits(2, 100));
  const std::vector<TokenId> prompt{kEnd, kWord, kStart, kWord};  // earlier turn closed, new block open
  EXPECT_EQ(router.begin(kReq, prompt), kThink);
  run_trace(router, {tok(kWord, {}, kThink), tok(kEnd, exit_think(1), kOut)});
  EXPECT_EQ(router.counters().enter_think, 1U);
}

TEST(RouterTrace, PromptWithClosedThinkBlockStartsInPrefill) {
  // Qwen3 with enable_thinking=False: the template inserts "<think>\n\n</think>\n\n".
  PhaseRouter router(id_model(), limits());
  const std::vector<TokenId> prompt{kWord, kStart, kWord, kEnd, kWord};
  EXPECT_EQ(router.begin(kReq, prompt), kPre);
  run_trace(router, {tok(kWord, {}, kOut)});
}

TEST(RouterTrace, DeepSeekTemplateOpenedThinkIsAssumed) {
  PhaseRouter router(id_model(ReasoningParser::kDeepSeekR1), limits(2, 100));
  router.begin(kReq);
  // EnterThink reports the count before this token; the token itself is reasoning.
  run_trace(router, {tok(kWord, enter(0), kThink), tok(kWord, {}, kThink), tok(kEnd, exit_think(2), kOut)});
}

TEST(RouterTrace, ThinkEndInPrefillClosesAnEmptyBlock) {
  PhaseRouter router(id_model(), limits());
  router.begin(kReq);
  run_trace(router, {tok(kEnd, exit_think(0), kOut), tok(kWord, {}, kOut)});
}

TEST(RouterTrace, HardCapIsReissuedUntilItLands) {
  PhaseRouter router(id_model(), limits(2, 5, 1));
  router.begin(kReq);
  run_trace(
      router,
      {tok(kStart, enter(), kThink), tok(kWord, {}, kThink), tok(kWord, {}, kThink), tok(kWord, {}, kThink),
       tok(kWord, {}, kThink), tok(kWord, forced(ForceReason::kHardCap, 5), kThink),
       tok(kWord, forced(ForceReason::kHardCap, 6, true), kThink),
       tok(kWord, forced(ForceReason::kHardCap, 7, true), kThink), tok(kEnd, exit_think(7, true), kOut)});
  const auto c = router.counters();
  EXPECT_EQ(c.forces_issued[static_cast<std::size_t>(ForceReason::kHardCap)], 1U);
  EXPECT_EQ(c.forces_reissued, 2U);
  EXPECT_EQ(c.forced_exits, 1U);
}

TEST(RouterTrace, ReissueWaitsForTheGrace) {
  PhaseRouter router(id_model(), limits(1, 100, 3));
  router.begin(kReq);
  run_trace(router,
            {tok(kStart, enter(), kThink), tok(kWord, {}, kThink),
             force(ForceReason::kConverged, ForceResult::kIssued, forced(ForceReason::kConverged, 1), kThink),
             tok(kWord, {}, kThink), tok(kWord, {}, kThink),
             tok(kWord, forced(ForceReason::kConverged, 4, true), kThink), tok(kWord, {}, kThink),
             tok(kEnd, exit_think(5, true), kOut)});
}

TEST(RouterTrace, ForceRequestsRespectMinimumAndPending) {
  PhaseRouter router(id_model(), limits(2, 100));
  router.begin(kReq);
  run_trace(
      router,
      {force(ForceReason::kConverged, ForceResult::kNotThinking, {}, kPre), tok(kStart, enter(), kThink),
       tok(kWord, {}, kThink), force(ForceReason::kConverged, ForceResult::kTooEarly, {}, kThink),
       tok(kWord, {}, kThink),
       force(ForceReason::kOverthinking, ForceResult::kIssued, forced(ForceReason::kOverthinking, 2), kThink),
       force(ForceReason::kConverged, ForceResult::kAlreadyPending, {}, kThink),
       tok(kEnd, exit_think(2, true), kOut),
       force(ForceReason::kConverged, ForceResult::kNotThinking, {}, kOut)});
  EXPECT_FALSE(router.end_think_pending(kReq));
  EXPECT_EQ(router.request_force(999, ForceReason::kConverged), ForceResult::kUnknownRequest);
}

TEST(RouterTrace, NoForceIsAnnouncedInsideAToolCall) {
  PhaseRouter router(id_model(), limits(1, 100));
  router.begin(kReq);
  run_trace(router, {tok(kStart, enter(), kThink), tok(kWord, {}, kThink), tok(kTool, {}, kThink),
                     force(ForceReason::kConverged, ForceResult::kDeferredToolCall, {}, kThink)});
  EXPECT_FALSE(router.end_think_pending(kReq));
  EXPECT_TRUE(router.snapshot(kReq)->force_pending);
  run_trace(router, {tok(kWord, {}, kThink), tok(kToolEnd, forced(ForceReason::kConverged, 4), kThink)});
  EXPECT_TRUE(router.end_think_pending(kReq));
  run_trace(router, {tok(kEnd, exit_think(4, true), kOut)});
}

TEST(RouterTrace, HardCapInsideAToolCallWaitsForTheCallToClose) {
  PhaseRouter router(id_model(), limits(1, 3));
  router.begin(kReq);
  run_trace(
      router,
      {tok(kStart, enter(), kThink), tok(kTool, {}, kThink), tok(kWord, {}, kThink), tok(kWord, {}, kThink),
       tok(kWord, {}, kThink), tok(kToolEnd, forced(ForceReason::kHardCap, 5), kThink),
       tok(kWord, forced(ForceReason::kHardCap, 6, true), kThink), tok(kEnd, exit_think(6, true), kOut)});
}

TEST(RouterTrace, ReissueStopsDuringAToolCallAndResumesAfter) {
  PhaseRouter router(id_model(), limits(1, 100, 1));
  router.begin(kReq);
  run_trace(router, {tok(kStart, enter(), kThink), tok(kWord, {}, kThink),
                     force(ForceReason::kOverthinking, ForceResult::kIssued,
                           forced(ForceReason::kOverthinking, 1), kThink),
                     tok(kTool, {}, kThink), tok(kWord, {}, kThink),
                     tok(kToolEnd, forced(ForceReason::kOverthinking, 4, true), kThink)});
}

TEST(RouterTrace, NoThinkKeepsTheRequestInOutput) {
  PhaseRouter router(id_model(ReasoningParser::kQwen3, /*supports_disable=*/true), limits());
  EXPECT_EQ(router.begin(kReq, {}, RequestOptions{.thinking_disabled = true}), kOut);
  run_trace(router, {tok(kStart, {}, kOut), tok(kWord, {}, kOut), tok(kEnd, {}, kOut),
                     tok(kEos, complete(0), kGone)});
  EXPECT_EQ(router.counters().enter_think, 0U);
}

TEST(RouterTrace, NoThinkIsIgnoredForModelsThatDoNotSupportIt) {
  PhaseRouter router(id_model(ReasoningParser::kQwen3, /*supports_disable=*/false), limits());
  EXPECT_EQ(router.begin(kReq, {}, RequestOptions{.thinking_disabled = true}), kPre);
  run_trace(router, {tok(kStart, enter(), kThink)});
  EXPECT_EQ(router.counters().think_disable_ignored, 1U);
}

TEST(RouterTrace, NestedThinkOpenerIsNotCounted) {
  PhaseRouter router(id_model(), limits(2, 100));
  router.begin(kReq);
  run_trace(router, {tok(kStart, enter(), kThink), tok(kStart, {}, kThink), tok(kWord, {}, kThink),
                     tok(kEnd, exit_think(1), kOut)});
}

TEST(RouterTrace, GraniteProseMarkersSplitAcrossTokens) {
  PhaseRouter router(prose_model(), limits(2, 100));
  router.begin(kReq);
  run_trace(router,
            {text("\n", {}, kPre), text("Here", {}, kPre), text(" is my", {}, kPre),
             text(" thought process:", enter(), kThink), text(" First", {}, kThink),
             text(" compute.", {}, kThink), text(" Here is", {}, kThink), text(" my resp", {}, kThink),
             text("onse: 4", exit_think(4), kOut), text(".", {}, kOut), tok(kEos, complete(4), kGone)});
}

TEST(RouterTrace, GraniteAlternativeSpellingAndTrailingText) {
  PhaseRouter router(prose_model(), limits(2, 100));
  router.begin(kReq);
  // "Here's" (quantized checkpoints) and a marker completed mid-piece: the
  // rest of the piece already belongs to the reasoning.
  run_trace(router, {text("Here's my thought process: Here's my response:", enter(), kThink)});
  // The end marker inside the same piece is picked up on the next token.
  run_trace(router, {text(" ok", exit_think(0), kOut)});
}

TEST(RouterTrace, GraniteWithoutMarkersAnswersDirectly) {
  PhaseRouter router(prose_model(), limits());
  router.begin(kReq);
  run_trace(router, {text("Here", {}, kPre), text(" is the answer", {}, kOut), text(": 4", {}, kOut)});
}

TEST(RouterTrace, UnknownRequestsAreCountedNotCreated) {
  PhaseRouter router(id_model(), limits());
  EXPECT_FALSE(router.on_token(12345, kWord).has_value());
  EXPECT_EQ(router.tracked(), 0U);
  EXPECT_EQ(router.counters().unknown_request_tokens, 1U);
}

TEST(RouterTrace, EndRemovesAtOnceAndSecondBeginResumes) {
  PhaseRouter router(id_model(), limits(2, 100));
  router.begin(kReq);
  router.on_token(kReq, kStart);
  router.on_token(kReq, kWord);
  EXPECT_EQ(router.begin(kReq), kThink) << "a preempted request resumes its state";
  EXPECT_EQ(router.snapshot(kReq)->think_tokens, 1U);
  EXPECT_EQ(router.counters().duplicate_begins, 1U);
  EXPECT_TRUE(router.end(kReq));
  EXPECT_FALSE(router.end(kReq));
  EXPECT_EQ(router.tracked(), 0U);
  EXPECT_FALSE(router.snapshot(kReq).has_value());
}

TEST(RouterTrace, ReapingUsesIdleTimeOnTheRouterClock) {
  PhaseRouter router(id_model(), limits(2, 100));
  const std::int64_t t0 = router.now_ns();
  router.begin(1);
  router.begin(2);
  router.advance_clock(t0 + 30'000'000'000);  // 30 s later request 2 is still active
  router.on_token(2, kWord);
  router.advance_clock(t0 + 70'000'000'000);
  EXPECT_EQ(router.reap_idle(std::chrono::seconds(60)), 1U);
  EXPECT_FALSE(router.snapshot(1).has_value());
  EXPECT_TRUE(router.snapshot(2).has_value());
  router.advance_clock(t0 + 10'000'000'000);  // the clock never goes back
  EXPECT_EQ(router.now_ns(), t0 + 70'000'000'000);
  router.advance_clock(t0 + 95'000'000'000);
  EXPECT_EQ(router.reap_idle(), 1U);  // default: 60 s
  EXPECT_EQ(router.tracked(), 0U);
  EXPECT_EQ(router.counters().reaped, 2U);
}

TEST(RouterTrace, BatchPathMatchesTokenByTokenPath) {
  PhaseRouter batch(id_model(), limits(2, 4));
  PhaseRouter single(id_model(), limits(2, 4));
  std::vector<RequestId> ids;
  for (RequestId r = 1; r <= 200; ++r) {
    batch.begin(r);
    single.begin(r);
    ids.push_back(r);
  }
  const std::vector<TokenId> script{kStart, kWord, kWord, kWord, kWord, kWord, kEnd, kWord, kEos};
  for (std::size_t step = 0; step < script.size(); ++step) {
    std::vector<TokenId> tokens(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) tokens[i] = (i + step) % 3 == 0 ? kWord : script[step];
    std::vector<PhaseEvent> events(ids.size());
    const std::size_t n = batch.on_tokens(ids, tokens, events);
    std::vector<PhaseEvent> expected;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (auto e = single.on_token(ids[i], tokens[i])) expected.push_back(*e);
    }
    events.resize(n);
    const auto by_id = [](const PhaseEvent& a, const PhaseEvent& b) { return a.request_id < b.request_id; };
    std::sort(events.begin(), events.end(), by_id);
    std::sort(expected.begin(), expected.end(), by_id);
    EXPECT_EQ(events, expected) << "step " << step;
  }
  EXPECT_EQ(batch.tracked(), single.tracked());
}

TEST(RouterTrace, BatchRejectsMismatchedSpans) {
  PhaseRouter router(id_model(), limits());
  std::vector<RequestId> ids{1, 2};
  std::vector<TokenId> tokens{kWord};
  std::vector<PhaseEvent> events(2);
  EXPECT_THROW(router.on_tokens(ids, tokens, events), InvalidArgument);
}

TEST(RouterTrace, ExtraEosFromTheEngineCompletes) {
  const std::vector<TokenId> extra{99};
  PhaseRouter router(id_model(), limits(), extra);
  router.begin(kReq);
  run_trace(router, {tok(kWord, {}, kOut), tok(99, complete(0), kGone)});
}

}  // namespace
}  // namespace meridian
