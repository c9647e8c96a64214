// The router's per-token path must not allocate. This binary replaces the
// global operator new to count allocations made while tokens are processed.
#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include <gtest/gtest.h>

#include "meridian/phase_router.h"

namespace {
std::atomic<std::uint64_t> g_allocations{0};
}  // namespace

// NOLINTBEGIN(cppcoreguidelines-no-malloc, misc-new-delete-overloads)
void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t /*size*/) noexcept { std::free(p); }
// NOLINTEND(cppcoreguidelines-no-malloc, misc-new-delete-overloads)

namespace meridian {
namespace {

constexpr TokenId kStart = 151667, kEnd = 151668, kEos = 151645, kWord = 1000;

TEST(RouterAllocations, TokenPathNeverAllocates) {
  const MeridianConfig config = MeridianConfig::defaults();
  RouterLimits limits = RouterLimits::from(config.scheduler);
  limits.min_think_tokens = 10;
  limits.max_think_tokens = 200;
  PhaseRouter router(config.model("qwen3"), limits);
  constexpr std::size_t kRequests = 1024;
  std::vector<RequestId> ids(kRequests);
  std::vector<TokenId> tokens(kRequests, kStart);
  std::vector<PhaseEvent> events(kRequests);
  for (std::size_t i = 0; i < kRequests; ++i) {
    ids[i] = i + 1;
    router.begin(ids[i]);
  }
  router.on_tokens(ids, tokens, events);  // warms the per-thread batch buffer

  const std::uint64_t before = g_allocations.load();
  std::fill(tokens.begin(), tokens.end(), kWord);
  for (int step = 0; step < 300; ++step) {  // crosses the hard cap: forces and re-issues
    router.on_tokens(ids, tokens, events);
    for (std::size_t i = 0; i < kRequests; i += 7) {
      (void)router.on_token(ids[i], kWord);
      (void)router.end_think_pending(ids[i]);
      (void)router.snapshot(ids[i]);
      (void)router.request_force(ids[i], ForceReason::kConverged);
    }
  }
  std::fill(tokens.begin(), tokens.end(), kEnd);
  router.on_tokens(ids, tokens, events);
  std::fill(tokens.begin(), tokens.end(), kEos);
  router.on_tokens(ids, tokens, events);
  EXPECT_EQ(g_allocations.load() - before, 0U);
  EXPECT_EQ(router.tracked(), 0U);
  EXPECT_GT(router.counters().forces_reissued, 0U);
}

}  // namespace
}  // namespace meridian
