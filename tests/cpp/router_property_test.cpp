// RapidCheck properties of the phase router over random token streams.
#include <algorithm>
#include <map>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "meridian/phase_router.h"
#include "router_test_model.h"

namespace meridian {
namespace {

using testing::kEnd;
using testing::kEos;
using testing::kStart;
using testing::kTool;
using testing::kToolEnd;
using testing::kWord;

ModelConfig model(ReasoningParser parser) { return testing::id_model(parser); }

// One step of a random trace: a token, or a force request.
struct Input {
  bool is_force = false;
  TokenId token = kWord;
  ForceReason reason = ForceReason::kConverged;
};

rc::Gen<Input> gen_input(bool with_eos) {
  std::vector<TokenId> alphabet{kStart, kEnd, kTool, kToolEnd, kWord, kWord, kWord, kWord};
  if (with_eos) alphabet.push_back(kEos);
  return rc::gen::oneOf(
      rc::gen::map(rc::gen::elementOf(alphabet),
                   [](TokenId t) {
                     return Input{false, t, ForceReason::kConverged};
                   }),
      rc::gen::map(rc::gen::element(ForceReason::kConverged, ForceReason::kOverthinking), [](ForceReason r) {
        return Input{true, kWord, r};
      }));
}

RouterLimits random_limits() {
  RouterLimits l;
  l.min_think_tokens = *rc::gen::inRange<std::uint64_t>(0, 6);
  l.max_think_tokens = l.min_think_tokens + *rc::gen::inRange<std::uint64_t>(1, 12);
  l.force_reissue_grace_steps = *rc::gen::inRange<std::uint32_t>(1, 4);
  return l;
}

int rank(const std::optional<RequestSnapshot>& s) { return s ? static_cast<int>(s->phase) : 4; }

RC_GTEST_PROP(RouterProperties, PhaseNeverGoesBackwards, ()) {
  const auto parser = *rc::gen::element(ReasoningParser::kQwen3, ReasoningParser::kDeepSeekR1);
  PhaseRouter router(model(parser), random_limits());
  const auto prompt = *rc::gen::container<std::vector<TokenId>>(rc::gen::element(kStart, kEnd, kWord));
  router.begin(1, prompt, RequestOptions{.thinking_disabled = *rc::gen::arbitrary<bool>()});
  int previous = rank(router.snapshot(1));
  const auto inputs = *rc::gen::container<std::vector<Input>>(gen_input(true));
  for (const Input& in : inputs) {
    if (in.is_force) {
      router.request_force(1, in.reason);
    } else {
      router.on_token(1, in.token);
    }
    const int now = rank(router.snapshot(1));
    RC_ASSERT(now >= previous);
    previous = now;
  }
}

RC_GTEST_PROP(RouterProperties, EveryRequestThatSeesEosCompletes, ()) {
  const auto parser = *rc::gen::element(ReasoningParser::kQwen3, ReasoningParser::kDeepSeekR1);
  PhaseRouter router(model(parser), random_limits());
  const auto n = *rc::gen::inRange<RequestId>(1, 20);
  for (RequestId r = 1; r <= n; ++r) router.begin(r);
  std::map<RequestId, bool> completed;
  const auto steps = *rc::gen::container<std::vector<std::pair<RequestId, Input>>>(
      rc::gen::pair(rc::gen::inRange<RequestId>(1, n + 1), gen_input(true)));
  for (const auto& [r, in] : steps) {
    if (completed[r] || in.is_force) continue;
    const auto event = router.on_token(r, in.token);
    if (in.token == kEos) {
      RC_ASSERT(event.has_value());
      RC_ASSERT(event->kind == PhaseEventKind::kComplete);
      RC_ASSERT(!router.snapshot(r).has_value());
      completed[r] = true;
    } else {
      RC_ASSERT(!event || event->kind != PhaseEventKind::kComplete);
    }
  }
  for (RequestId r = 1; r <= n; ++r) {
    if (!completed[r]) router.on_token(r, kEos);
  }
  RC_ASSERT(router.tracked() == 0U);
}

RC_GTEST_PROP(RouterProperties, TrackedCountReturnsToZeroAfterCompletionEndOrReap, ()) {
  PhaseRouter router(model(ReasoningParser::kQwen3), random_limits());
  const auto n = *rc::gen::inRange<RequestId>(1, 50);
  for (RequestId r = 1; r <= n; ++r) router.begin(r * 7919);  // sparse ids
  RC_ASSERT(router.tracked() == static_cast<std::size_t>(n));
  const auto endings =
      *rc::gen::container<std::vector<int>>(static_cast<std::size_t>(n), rc::gen::inRange(0, 3));
  const std::int64_t t0 = router.now_ns();
  for (RequestId r = 1; r <= n; ++r) {
    const RequestId id = r * 7919;
    switch (endings[static_cast<std::size_t>(r - 1)]) {
      case 0: router.on_token(id, kEos); break;
      case 1: router.end(id); break;
      default: break;  // left for the reaper
    }
  }
  router.advance_clock(t0 + 61'000'000'000);
  router.reap_idle();
  RC_ASSERT(router.tracked() == 0U);
}

// An obedient caller forces </think> whenever asked: the hard cap then bounds
// the think tokens exactly. A caller that ignores forces still gets a
// reminder at least every `grace` think tokens (outside tool calls).
RC_GTEST_PROP(RouterProperties, HardCapIsAGuarantee, ()) {
  const RouterLimits limits = random_limits();
  PhaseRouter router(model(ReasoningParser::kQwen3), limits);
  router.begin(1);
  router.on_token(1, kStart);
  const auto ignored = *rc::gen::inRange<int>(0, 5);  // forces the caller ignores first
  int ignored_so_far = 0;
  std::uint64_t tokens_since_force = 0;
  bool pending_seen = false;
  for (int i = 0; i < 200; ++i) {
    const bool asked = router.end_think_pending(1);
    if (asked && ignored_so_far >= ignored) {
      const auto e = router.on_token(1, kEnd);
      RC_ASSERT(e.has_value());
      RC_ASSERT(e->kind == PhaseEventKind::kExitThink);
      RC_ASSERT(e->forced);
      RC_ASSERT(e->think_tokens <= limits.max_think_tokens + static_cast<std::uint64_t>(ignored) *
                                                                 limits.force_reissue_grace_steps);
      return;
    }
    const auto e = router.on_token(1, kWord);
    if (pending_seen) ++tokens_since_force;
    if (e && e->kind == PhaseEventKind::kForceBudget) {
      RC_ASSERT(e->reason == ForceReason::kHardCap);
      RC_ASSERT(e->think_tokens >= limits.max_think_tokens);
      if (pending_seen) {
        RC_ASSERT(e->reissue);
        RC_ASSERT(tokens_since_force == limits.force_reissue_grace_steps);
      }
      pending_seen = true;
      tokens_since_force = 0;
      ++ignored_so_far;
    } else if (pending_seen) {
      RC_ASSERT(tokens_since_force < limits.force_reissue_grace_steps);
    }
  }
  RC_FAIL("the hard cap never took effect");
}

RC_GTEST_PROP(RouterProperties, NothingButTheHardCapForcesBeforeTheMinimum, ()) {
  const RouterLimits limits = random_limits();
  PhaseRouter router(model(ReasoningParser::kQwen3), limits);
  router.begin(1);
  const auto inputs = *rc::gen::container<std::vector<Input>>(gen_input(false));
  for (const Input& in : inputs) {
    std::optional<PhaseEvent> e;
    if (in.is_force) {
      PhaseEvent out;
      if (router.request_force(1, in.reason, &out) == ForceResult::kIssued) e = out;
    } else {
      e = router.on_token(1, in.token);
    }
    if (e && e->kind == PhaseEventKind::kForceBudget && e->reason != ForceReason::kHardCap) {
      RC_ASSERT(e->think_tokens >= limits.min_think_tokens);
    }
    // Never asked to force inside a tool call.
    const auto snap = router.snapshot(1);
    if (snap && snap->tool_call_open) RC_ASSERT(!snap->end_think_pending);
  }
}

RC_GTEST_PROP(RouterProperties, BatchAndSingleTokenPathsAgree, ()) {
  const RouterLimits limits = random_limits();
  PhaseRouter batch(model(ReasoningParser::kDeepSeekR1), limits);
  PhaseRouter single(model(ReasoningParser::kDeepSeekR1), limits);
  const auto n = *rc::gen::inRange<std::size_t>(1, 40);
  std::vector<RequestId> ids(n);
  for (std::size_t i = 0; i < n; ++i) {
    ids[i] = static_cast<RequestId>(i * 31 + 5);
    batch.begin(ids[i]);
    single.begin(ids[i]);
  }
  const auto steps = *rc::gen::inRange(1, 15);
  for (int s = 0; s < steps; ++s) {
    const auto tokens = *rc::gen::container<std::vector<TokenId>>(
        n, rc::gen::element(kStart, kEnd, kTool, kToolEnd, kWord, kWord, kEos));
    std::vector<PhaseEvent> events(n);
    events.resize(batch.on_tokens(ids, tokens, events));
    std::vector<PhaseEvent> expected;
    for (std::size_t i = 0; i < n; ++i) {
      if (auto e = single.on_token(ids[i], tokens[i])) expected.push_back(*e);
    }
    const auto by_id = [](const PhaseEvent& a, const PhaseEvent& b) { return a.request_id < b.request_id; };
    std::sort(events.begin(), events.end(), by_id);
    std::sort(expected.begin(), expected.end(), by_id);
    RC_ASSERT(events == expected);
  }
  RC_ASSERT(batch.tracked() == single.tracked());
}

}  // namespace
}  // namespace meridian
