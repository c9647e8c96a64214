// Internal: what the studies of replay_study.h share: worker threads, progress
// reporting and the options of one run.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "meridian/replay_study.h"
#include "sync/mutex.h"

namespace meridian::sim::detail {

// The first exception any worker threw.
class FirstError {
 public:
  void record(std::exception_ptr error) {
    const sync::Lock lock(mu_);
    if (!error_) error_ = std::move(error);
  }
  void rethrow() {
    const sync::Lock lock(mu_);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  sync::Mutex mu_;
  std::exception_ptr error_ ABSL_GUARDED_BY(mu_);
};

// Runs fn(i) for i in [0, count) on `threads` workers; rethrows the first exception.
template <typename Fn>
void parallel_for(std::size_t count, unsigned threads, Fn&& fn) {
  if (threads == 0) threads = std::max(1U, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, std::max<std::size_t>(count, 1)));
  std::atomic<std::size_t> next{0};
  FirstError error;
  auto worker = [&] {
    for (std::size_t i = next++; i < count; i = next++) {
      try {
        fn(i);
      } catch (...) {
        error.record(std::current_exception());
        next = count;  // stop handing out work
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  error.rethrow();
}

// Serialised progress reporting from worker threads.
class Progress {
 public:
  Progress(const std::function<void(double)>& fn, std::size_t total) : fn_(fn), total_(total) {}
  void tick() {
    if (!fn_) return;
    const sync::Lock lock(mutex_);
    ++done_;
    fn_(total_ == 0 ? 1.0 : std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_)));
  }

 private:
  const std::function<void(double)>& fn_;
  std::size_t total_;
  sync::Mutex mutex_;
  std::size_t done_ ABSL_GUARDED_BY(mutex_) = 0;
};

// The run behind `policy`: vllm-best is its chosen setting's vLLM policy with that setting's [engine] values.
inline ReplayOptions replay_options(const StudyOptions& o, PolicyKind policy, const ReplayParams& params,
                                    std::uint64_t seed) {
  ReplayOptions ro;
  ro.policy = policy;
  ro.config = o.config;
  ro.model = o.model;
  ro.params = params;
  ro.seed = seed;
  if (policy == PolicyKind::kVllmBest) {
    if (!o.vllm_best) {
      throw InvalidArgument(
          "vllm-best has no setting yet: the goodput search picks it (find_goodput() with vllm-best, "
          "`meridian replay --goodput`)");
    }
    ro.policy = o.vllm_best->policy();
    ro.params = o.vllm_best->apply(params);
  }
  return ro;
}

inline double elapsed_s(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace meridian::sim::detail
