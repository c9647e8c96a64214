// A test-and-test-and-set spin lock for the router shards (ADR-0002).
// Critical sections are a hash lookup and a few stores (tens of ns), where
// std::mutex costs two atomic read-modify-writes and two library calls per
// token. Unlock is a plain release store. After a short spin the waiter
// yields, so a preempted holder on a small machine is not spun on for a
// whole time slice. Built on std::atomic, so ThreadSanitizer sees it.
// Annotated as a capability for clang's thread-safety analysis; hold it with
// sync::Lock (sync/mutex.h).
//
// Thread-safety: that is its purpose. Not recursive. Satisfies Lockable.
#pragma once

#include <atomic>
#include <thread>

#include <absl/base/thread_annotations.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace meridian::router_detail {

class ABSL_LOCKABLE SpinLock {
 public:
  void lock() noexcept ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    for (;;) {
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      for (int spins = 0; locked_.load(std::memory_order_relaxed); ++spins) {
        if (spins < kSpinsBeforeYield) {
          cpu_relax();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }

  bool try_lock() noexcept ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }

  void unlock() noexcept ABSL_UNLOCK_FUNCTION() { locked_.store(false, std::memory_order_release); }

 private:
  static constexpr int kSpinsBeforeYield = 64;

  static void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
  }

  std::atomic<bool> locked_{false};
};

}  // namespace meridian::router_detail
