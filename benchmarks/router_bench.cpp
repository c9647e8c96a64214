// Phase router per-token cost, against two baselines measured in the same
// binary so that ratios come from one run (docs/benchmarks.md):
//   * BareFlatHashMap  - an absl::flat_hash_map lookup + counter update: the
//                        floor any per-request state needs;
//   * MutexUnorderedMap - the naive router: one global std::mutex around a
//                        std::unordered_map, same state machine.
// Each token is a think-phase token of one of 1,024 live requests, visited in
// a random order (what a continuous-batching step looks like).
#include <algorithm>
#include <mutex>
#include <random>
#include <unordered_map>
#include <vector>

#include <absl/container/flat_hash_map.h>
#include <benchmark/benchmark.h>

#include "meridian/phase_router.h"

namespace {

using meridian::PhaseEvent;
using meridian::PhaseRouter;
using meridian::RequestId;
using meridian::TokenId;

constexpr std::size_t kRequests = 1024;
// Every structure holds the ids of all benchmark threads, so the baselines
// and the router search maps of the same size (2 x 1,024 live requests).
constexpr int kMaxThreads = 2;
constexpr TokenId kStart = 151667, kEnd = 151668, kEos = 151645, kWord = 1000;

// Ids as RequestIdMap hands them out (sequential), one disjoint block per thread.
std::vector<RequestId> request_ids(int thread) {
  std::vector<RequestId> ids(kRequests);
  for (std::size_t i = 0; i < kRequests; ++i) ids[i] = static_cast<RequestId>(thread) * 1'000'000 + i + 1;
  std::mt19937_64 rng(42 + static_cast<unsigned>(thread));
  std::shuffle(ids.begin(), ids.end(), rng);
  return ids;
}

// A plausible token stream: mostly ordinary tokens, an occasional boundary
// id so the classification branch is exercised.
std::vector<TokenId> token_stream() {
  std::vector<TokenId> tokens(kRequests, kWord);
  for (std::size_t i = 0; i < kRequests; i += 97) tokens[i] = kStart;  // nested opener: ignored in think
  return tokens;
}

meridian::RouterLimits no_forcing() {
  meridian::RouterLimits limits;
  limits.min_think_tokens = 1ULL << 60U;
  limits.max_think_tokens = (1ULL << 60U) + 1;
  return limits;
}

PhaseRouter& shared_router() {
  static PhaseRouter* router = [] {
    auto* r = new PhaseRouter(meridian::MeridianConfig::defaults().model("qwen3"), no_forcing());
    for (int t = 0; t < kMaxThreads; ++t) {
      for (RequestId id : request_ids(t)) {
        r->begin(id);
        r->on_token(id, kStart);
      }
    }
    return r;
  }();
  return *router;
}

// --- baseline 1: bare flat hash map ------------------------------------------
struct BareState {
  std::uint64_t think_tokens = 0;
  std::int64_t last_active = 0;
};

void BM_BareFlatHashMap(benchmark::State& state) {
  const auto ids = request_ids(0);
  const auto tokens = token_stream();
  absl::flat_hash_map<RequestId, BareState> map;
  for (int t = 0; t < kMaxThreads; ++t) {
    for (RequestId id : request_ids(t)) map[id] = {};
  }
  std::int64_t now = 1;
  for (auto _ : state) {
    for (std::size_t i = 0; i < kRequests; ++i) {
      auto it = map.find(ids[i]);
      it->second.think_tokens += tokens[i] != kEnd ? 1U : 0U;
      it->second.last_active = now;
    }
    ++now;
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kRequests));
}
BENCHMARK(BM_BareFlatHashMap);

// --- baseline 2: naive mutex + unordered_map router --------------------------
class NaiveRouter {
 public:
  struct State {
    int phase = 0;
    std::uint64_t think_tokens = 0;
    std::uint64_t output_tokens = 0;
    std::int64_t last_active = 0;
    bool pending = false;
  };

  void begin(RequestId id) {
    std::lock_guard lock(mu_);
    requests_[id] = State{1, 0, 0, 0, false};
  }

  std::optional<PhaseEvent> on_token(RequestId id, TokenId token, std::int64_t now) {
    std::lock_guard lock(mu_);
    auto it = requests_.find(id);
    if (it == requests_.end()) return std::nullopt;
    State& s = it->second;
    s.last_active = now;
    if (token == kEos) {
      requests_.erase(it);
      return PhaseEvent{id, meridian::PhaseEventKind::kComplete};
    }
    if (s.phase == 1) {
      if (token == kEnd) {
        s.phase = 2;
        return PhaseEvent{id, meridian::PhaseEventKind::kExitThink};
      }
      if (token != kStart && ++s.think_tokens >= max_think_ && !s.pending) {
        s.pending = true;
        return PhaseEvent{id, meridian::PhaseEventKind::kForceBudget};
      }
      return std::nullopt;
    }
    ++s.output_tokens;
    return std::nullopt;
  }

 private:
  std::mutex mu_;
  std::unordered_map<RequestId, State> requests_;
  std::uint64_t max_think_ = 1ULL << 60U;
};

NaiveRouter& shared_naive() {
  static NaiveRouter* naive = [] {
    auto* n = new NaiveRouter();
    for (int t = 0; t < kMaxThreads; ++t) {
      for (RequestId id : request_ids(t)) n->begin(id);
    }
    return n;
  }();
  return *naive;
}

void BM_MutexUnorderedMapRouter(benchmark::State& state) {
  NaiveRouter& router = shared_naive();
  const auto ids = request_ids(state.thread_index());
  const auto tokens = token_stream();
  std::int64_t now = 1;
  for (auto _ : state) {
    for (std::size_t i = 0; i < kRequests; ++i)
      benchmark::DoNotOptimize(router.on_token(ids[i], tokens[i], now));
    ++now;
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kRequests));
}
BENCHMARK(BM_MutexUnorderedMapRouter)->Threads(1)->Threads(2)->UseRealTime();

// --- Meridian ----------------------------------------------------------------
void BM_RouterOnToken(benchmark::State& state) {
  PhaseRouter& router = shared_router();
  const auto ids = request_ids(state.thread_index());
  const auto tokens = token_stream();
  for (auto _ : state) {
    for (std::size_t i = 0; i < kRequests; ++i) benchmark::DoNotOptimize(router.on_token(ids[i], tokens[i]));
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kRequests));
}
BENCHMARK(BM_RouterOnToken)->Threads(1)->Threads(2)->UseRealTime();

// One engine step = one on_tokens() call for all running requests.
void BM_RouterOnTokensBatch(benchmark::State& state) {
  PhaseRouter& router = shared_router();
  const auto ids = request_ids(state.thread_index());
  const auto tokens = token_stream();
  std::vector<PhaseEvent> events(kRequests);
  for (auto _ : state) benchmark::DoNotOptimize(router.on_tokens(ids, tokens, events));
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kRequests));
}
BENCHMARK(BM_RouterOnTokensBatch)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
