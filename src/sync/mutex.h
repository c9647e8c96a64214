// Locks that clang's thread-safety analysis understands (docs/architecture.md#concurrency).
//
// libstdc++'s std::mutex and std::lock_guard carry no capability attributes,
// so clang cannot check ABSL_GUARDED_BY against them. Mutex is std::mutex with
// abseil's annotations; Lock is the scoped guard for it and for the router's
// SpinLock. Not absl::Mutex: Debian's abseil is not built with TSan, which
// would then miss the synchronisation it provides; std::mutex is pthreads,
// which TSan intercepts.
//
// Thread-safety: that is their purpose. Neither is recursive.
#pragma once

#include <mutex>

#include <absl/base/thread_annotations.h>

namespace meridian::sync {

class ABSL_LOCKABLE Mutex {
 public:
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  bool try_lock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

/// Holds `mu` for its lifetime (a std::lock_guard the analysis can see).
template <typename Lockable>
class ABSL_SCOPED_LOCKABLE Lock {
 public:
  explicit Lock(Lockable& mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_.lock(); }
  ~Lock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;
  Lock(Lock&&) = delete;
  Lock& operator=(Lock&&) = delete;

 private:
  Lockable& mu_;
};

}  // namespace meridian::sync
