// Concurrent use of one router from several threads (run under TSan by
// `make test`): per-request streams stay exact, counters add up, and reaping
// and snapshots running alongside do not race with token processing.
#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "meridian/phase_router.h"

namespace meridian {
namespace {

constexpr TokenId kStart = 10, kEnd = 11, kEos = 2, kWord = 100;

ModelConfig model() {
  ModelConfig m;
  m.name = "conc";
  m.think_start_token_ids = {kStart};
  m.think_end_token_ids = {kEnd};
  m.eos_token_ids = {kEos};
  return m;
}

TEST(RouterConcurrency, ThreadsDrivingDisjointRequests) {
  RouterLimits limits;
  limits.min_think_tokens = 1;
  limits.max_think_tokens = 1'000'000;
  PhaseRouter router(model(), limits);
  constexpr int kThreads = 4;
  constexpr int kRequestsPerThread = 200;
  constexpr int kThinkTokens = 50;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> exits_seen{0};

  // A housekeeping thread snapshots, ticks and reaps (nothing is idle long
  // enough to be reaped) while the workers run.
  std::thread housekeeping([&] {
    while (!stop.load()) {
      (void)router.snapshot(1);
      (void)router.tracked();
      router.tick();
      router.reap_idle(std::chrono::hours(1));
    }
  });

  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      for (int r = 0; r < kRequestsPerThread; ++r) {
        const RequestId id = static_cast<RequestId>(t) * 100000 + static_cast<RequestId>(r);
        router.begin(id);
        router.on_token(id, kStart);
        for (int k = 0; k < kThinkTokens; ++k) router.on_token(id, kWord);
        const auto exit = router.on_token(id, kEnd);
        if (exit && exit->kind == PhaseEventKind::kExitThink && exit->think_tokens == kThinkTokens)
          ++exits_seen;
        router.on_token(id, kWord);
        router.on_token(id, kEos);
      }
    });
  }
  for (auto& w : workers) w.join();
  stop = true;
  housekeeping.join();

  EXPECT_EQ(exits_seen.load(), static_cast<std::uint64_t>(kThreads * kRequestsPerThread));
  EXPECT_EQ(router.tracked(), 0U);
  const auto c = router.counters();
  EXPECT_EQ(c.begun, static_cast<std::uint64_t>(kThreads * kRequestsPerThread));
  EXPECT_EQ(c.completed, c.begun);
}

TEST(RouterConcurrency, BatchedStepsFromSeveralThreads) {
  RouterLimits limits;
  limits.min_think_tokens = 1;
  limits.max_think_tokens = 8;
  PhaseRouter router(model(), limits);
  constexpr int kThreads = 3;
  constexpr std::size_t kBatch = 256;
  std::vector<std::thread> workers;
  std::atomic<std::uint64_t> forces{0};
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      std::vector<RequestId> ids(kBatch);
      for (std::size_t i = 0; i < kBatch; ++i) {
        ids[i] = static_cast<RequestId>(t) * 1'000'000 + i;
        router.begin(ids[i]);
      }
      std::vector<TokenId> tokens(kBatch);
      std::vector<PhaseEvent> events(kBatch);
      const std::vector<TokenId> script{kStart, kWord, kWord, kWord, kWord, kWord,
                                        kWord,  kWord, kWord, kEnd,  kEos};
      for (TokenId step_token : script) {
        std::fill(tokens.begin(), tokens.end(), step_token);
        const std::size_t n = router.on_tokens(ids, tokens, events);
        for (std::size_t i = 0; i < n; ++i) {
          if (events[i].kind == PhaseEventKind::kForceBudget) ++forces;
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(router.tracked(), 0U);
  EXPECT_EQ(forces.load(), static_cast<std::uint64_t>(kThreads) * kBatch);  // hard cap at 8, once each
  EXPECT_EQ(router.counters().forced_exits, static_cast<std::uint64_t>(kThreads) * kBatch);
}

}  // namespace
}  // namespace meridian
