#include "meridian/request_id_map.h"

#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace meridian {
namespace {

TEST(RequestIdMap, InternIsStableAndDistinct) {
  RequestIdMap map;
  const RequestId a = map.intern("cmpl-abc-0");
  const RequestId b = map.intern("cmpl-abc-1");
  EXPECT_NE(a, b);
  EXPECT_NE(a, 0U);
  EXPECT_EQ(map.intern("cmpl-abc-0"), a);
  EXPECT_EQ(map.find("cmpl-abc-1"), b);
  EXPECT_FALSE(map.find("missing").has_value());
  EXPECT_EQ(map.size(), 2U);
}

TEST(RequestIdMap, ReleasedIdsAreNeverReused) {
  RequestIdMap map;
  const RequestId first = map.intern("req");
  EXPECT_EQ(map.release("req"), first);
  EXPECT_FALSE(map.release("req").has_value());
  EXPECT_EQ(map.size(), 0U);
  EXPECT_NE(map.intern("req"), first);
}

TEST(RequestIdMap, ConcurrentInterningNeverCollides) {
  RequestIdMap map;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 5000;
  std::vector<std::vector<RequestId>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        // Half the strings are shared between threads: they must agree.
        const std::string key =
            (i % 2 == 0) ? "shared-" + std::to_string(i) : "t" + std::to_string(t) + "-" + std::to_string(i);
        got[static_cast<std::size_t>(t)].push_back(map.intern(key));
      }
    });
  }
  for (auto& th : threads) th.join();
  std::set<RequestId> distinct;
  for (const auto& ids : got) distinct.insert(ids.begin(), ids.end());
  EXPECT_EQ(distinct.size(), map.size());
  EXPECT_EQ(map.size(), static_cast<std::size_t>(kPerThread / 2 + kThreads * kPerThread / 2));
  for (int i = 0; i < kPerThread; i += 2) {
    for (int t = 1; t < kThreads; ++t) {
      EXPECT_EQ(got[0][static_cast<std::size_t>(i)],
                got[static_cast<std::size_t>(t)][static_cast<std::size_t>(i)]);
    }
  }
}

}  // namespace
}  // namespace meridian
