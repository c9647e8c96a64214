// The threads of a serving engine around Meridian, run under TSan by `make test`:
// a frontend registers and cancels requests (RequestIdMap, PhaseRouter::begin/end),
// output threads feed each step's tokens to the PhaseRouter, a housekeeping thread
// ticks and inspects it, and one scheduler thread owns the DualQueueScheduler, the
// KvBlockManager and the StepDriver (their headers say they are single-threaded),
// taking the router's phase changes from an inbox. At the end no request may be
// tracked anywhere and every KV block must be obtainable again.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <iostream>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <absl/container/flat_hash_map.h>
#include <gtest/gtest.h>

#include "meridian/kv_block_manager.h"
#include "meridian/phase_router.h"
#include "meridian/request_id_map.h"
#include "meridian/scheduler.h"
#include "meridian/step_driver.h"
#include "sync/mutex.h"

namespace meridian {
namespace {

constexpr TokenId kStart = 10, kEnd = 11, kEos = 2, kWord = 100;
constexpr std::uint32_t kBlockTokens = 16;
constexpr std::uint32_t kKvBlocks = 192;  // small: preemption and aborts happen
constexpr std::size_t kOutputThreads = 3;
constexpr std::uint64_t kRequests = 3000;
constexpr std::uint64_t kMaxInFlight = 96;
constexpr std::size_t kMaxLagSteps = 2;  // steps handed out but not yet streamed

ModelConfig model() {
  ModelConfig m;
  m.name = "stress";
  m.think_start_token_ids = {kStart};
  m.think_end_token_ids = {kEnd};
  m.eos_token_ids = {kEos};
  m.supports_think_disable = true;
  return m;
}

// What a request generates, a pure function of its number so that no
// thread needs another's bookkeeping.
struct Script {
  std::uint32_t prompt = 0;
  std::uint32_t think = 0;  // 0: thinking disabled
  std::uint32_t answer = 0;
};

Script script_of(std::uint64_t n) {
  const std::uint64_t h = (n + 1) * 0x9E3779B97F4A7C15ULL;
  Script s;
  s.prompt = 8 + static_cast<std::uint32_t>(h % 200);
  s.think = n % 3 == 0 ? 0 : 4 + static_cast<std::uint32_t>((h >> 16) % 44);  // cap 32: some hit it
  s.answer = 2 + static_cast<std::uint32_t>((h >> 32) % 24);
  if (n % 500 == 7) {  // grows past the whole pool: the scheduler must abort it
    s.prompt = (kKvBlocks - 4) * kBlockTokens;
    s.answer = 4 * kBlockTokens;
  }
  return s;
}

std::string external_id(std::uint64_t n) { return "cmpl-" + std::to_string(n); }

enum class MessageKind : std::uint8_t { kAdd, kExitThink, kComplete, kCancel };
struct Message {
  MessageKind kind = MessageKind::kAdd;
  RequestId id = 0;
  std::uint64_t n = 0;  // kAdd: the request's number
  Phase phase = Phase::kThinkDecode;
};

// Multi-producer queue; only the scheduler thread drains it.
class Inbox {
 public:
  void push(const Message& m) {
    const sync::Lock lock(mu_);
    messages_.push_back(m);
  }
  void drain(std::vector<Message>& out) {
    out.clear();
    const sync::Lock lock(mu_);
    out.swap(messages_);
  }

 private:
  sync::Mutex mu_;
  std::vector<Message> messages_ ABSL_GUARDED_BY(mu_);
};

// The sampled requests of each step, for one output thread.
class StepQueue {
 public:
  void push(std::vector<RequestId> ids) {
    const sync::Lock lock(mu_);
    steps_.push_back(std::move(ids));
  }
  bool pop(std::vector<RequestId>& out) {
    const sync::Lock lock(mu_);
    if (steps_.empty()) return false;
    out = std::move(steps_.front());
    steps_.pop_front();
    return true;
  }
  std::size_t depth() {
    const sync::Lock lock(mu_);
    return steps_.size();
  }

 private:
  sync::Mutex mu_;
  std::deque<std::vector<RequestId>> steps_ ABSL_GUARDED_BY(mu_);
};

struct Totals {
  std::atomic<std::uint64_t> admitted{0};
  // How the scheduler thread retired each request (exactly once each).
  std::atomic<std::uint64_t> finished{0}, completed{0}, cancelled{0}, aborted{0};
  // What the output threads saw from the router.
  std::atomic<std::uint64_t> complete_events{0}, exit_events{0}, force_requests{0}, tokens{0};
};

class Rig {
 public:
  Rig() : router_(model(), limits()) {}

  void run() {
    std::atomic<bool> done{false};
    std::thread scheduler([&] { scheduler_loop(done); });
    std::vector<std::thread> outputs;
    for (std::size_t t = 0; t < kOutputThreads; ++t) outputs.emplace_back([&, t] { output_loop(t, done); });
    std::thread housekeeping([&] { housekeeping_loop(done); });
    frontend_loop(done);
    scheduler.join();
    for (auto& t : outputs) t.join();
    housekeeping.join();
  }

  PhaseRouter& router() { return router_; }
  RequestIdMap& ids() { return ids_; }
  const Totals& totals() const { return totals_; }
  // Read after run(): the scheduler thread has been joined.
  const DualQueueScheduler& scheduler() const { return *scheduler_; }
  const KvBlockManager& kv() const { return *kv_; }

 private:
  static RouterLimits limits() {
    RouterLimits l;
    l.min_think_tokens = 4;
    l.max_think_tokens = 32;
    return l;
  }

  // Registers every request (in-flight bounded), cancelling some on the way.
  void frontend_loop(const std::atomic<bool>& done) {
    std::mt19937_64 rng(7);
    for (std::uint64_t n = 0; n < kRequests; ++n) {
      while (totals_.admitted.load() - totals_.finished.load() >= kMaxInFlight && !done.load()) {
        std::this_thread::yield();
      }
      const Script s = script_of(n);
      const RequestId id = ids_.intern(external_id(n));
      const TokenId tail[] = {kStart};
      RequestOptions options;
      options.thinking_disabled = s.think == 0;
      const Phase phase = router_.begin(
          id, s.think > 0 ? std::span<const TokenId>(tail) : std::span<const TokenId>{}, options);
      ++totals_.admitted;
      inbox_.push({MessageKind::kAdd, id, n, phase == Phase::kOutputDecode ? phase : Phase::kThinkDecode});
      // A client disconnects: an earlier request, wherever it is by now.
      if (n % 37 == 36) {
        const std::uint64_t victim = n - rng() % 32;
        // Only if the router still tracked it: otherwise its EOS or abort retires it.
        if (const auto vid = ids_.find(external_id(victim)); vid && router_.end(*vid)) {
          inbox_.push({MessageKind::kCancel, *vid, victim, Phase::kComplete});
        }
      }
    }
    while (!done.load()) std::this_thread::yield();
  }

  void scheduler_loop(std::atomic<bool>& done) {
    SchedulerOptions options;
    options.block_tokens = kBlockTokens;
    options.total_kv_blocks = kKvBlocks;
    scheduler_.emplace(options, StepCostModel::from_config(SchedulerConfig{}));
    KvBlockManagerOptions kv_options;
    kv_options.num_blocks = kKvBlocks;
    kv_.emplace(kv_options);
    StepDriver driver(*scheduler_, *kv_);
    absl::flat_hash_map<RequestId, std::uint64_t> number_of;  // scheduler thread only
    std::vector<Message> messages;
    std::vector<std::vector<RequestId>> per_thread(kOutputThreads);
    StepLimits step_limits;
    step_limits.token_budget = 1024;
    step_limits.max_sequences = 64;
    std::int64_t now_ns = 0;

    const auto retire = [&](RequestId id, ReleaseKind kind) {
      kv_->release(id, kind);
      auto it = number_of.find(id);
      ASSERT_NE(it, number_of.end());
      EXPECT_EQ(ids_.release(external_id(it->second)), id);
      number_of.erase(it);
      ++totals_.finished;
    };

    while (totals_.finished.load() < kRequests) {
      inbox_.drain(messages);
      for (const Message& m : messages) {
        switch (m.kind) {
          case MessageKind::kAdd: {
            const Script s = script_of(m.n);
            scheduler_->add({m.id, m.phase, s.prompt, 0, now_ns});
            number_of.emplace(m.id, m.n);
            break;
          }
          case MessageKind::kExitThink:
            if (scheduler_->set_phase(m.id, Phase::kOutputDecode)) (void)kv_->demote_think_blocks(m.id);
            break;
          case MessageKind::kComplete:
            if (scheduler_->finish(m.id)) {
              ++totals_.completed;
              retire(m.id, ReleaseKind::kFinished);
            }
            break;
          case MessageKind::kCancel:
            if (scheduler_->finish(m.id)) {
              ++totals_.cancelled;
              retire(m.id, ReleaseKind::kAbort);
            }
            break;
        }
      }
      const StepPlan& plan = driver.plan(step_limits, now_ns);
      for (RequestId id : plan.aborted) {  // already dropped by the scheduler
        router_.end(id);
        ++totals_.aborted;
        retire(id, ReleaseKind::kAbort);
      }
      for (auto& v : per_thread) v.clear();
      const auto& not_run = driver.not_run();
      for (const ScheduledWork& w : plan.work) {
        if (w.kind == WorkKind::kPrefill && !w.completes_prefill) continue;
        if (std::find(not_run.begin(), not_run.end(), w.id) != not_run.end()) continue;
        per_thread[w.id % kOutputThreads].push_back(w.id);  // a request always streams from one thread
      }
      const double ms = plan.work.empty() ? 1.0 : plan.stats.predicted_step_ms;
      now_ns += static_cast<std::int64_t>(ms * 1e6) + 1;
      driver.complete(ms, now_ns);
      for (std::size_t t = 0; t < kOutputThreads; ++t) {
        if (!per_thread[t].empty()) queues_[t].push(per_thread[t]);
      }
      for (auto& q : queues_) {
        while (q.depth() > kMaxLagSteps) std::this_thread::yield();
      }
      if (plan.work.empty()) std::this_thread::yield();
    }
    done.store(true);
  }

  // Streams the tokens of its share of each step, in order per request.
  void output_loop(std::size_t t, const std::atomic<bool>& done) {
    struct Progress {
      std::uint32_t think = 0;
      std::uint32_t answer = 0;
      bool in_think = false;
      bool finished = false;
    };
    absl::flat_hash_map<RequestId, Progress> progress;  // this thread's requests only
    std::vector<RequestId> step;
    std::vector<RequestId> ids;
    std::vector<TokenId> tokens;
    std::vector<PhaseEvent> events;
    std::mt19937_64 rng(t + 1);
    while (true) {
      if (!queues_[t].pop(step)) {
        if (done.load()) return;
        std::this_thread::yield();
        continue;
      }
      ids.clear();
      tokens.clear();
      for (RequestId id : step) {
        // Ids come from a counter starting at 1, so n = id - 1.
        const Script s = script_of(id - 1);
        auto [it, fresh] = progress.try_emplace(id);
        Progress& p = it->second;
        if (fresh) p.in_think = s.think > 0;
        if (p.finished) continue;  // the scheduler has not heard of the EOS yet
        TokenId token = kWord;
        if (p.in_think) {
          if (p.think >= s.think || router_.end_think_pending(id)) {
            token = kEnd;
            p.in_think = false;
          } else {
            ++p.think;
            if (p.think > 8 && rng() % 16 == 0) {  // what the entropy probe would ask for
              ++totals_.force_requests;
              (void)router_.request_force(id, ForceReason::kConverged);
            }
          }
        } else if (++p.answer >= s.answer) {
          token = kEos;
          p.finished = true;
        }
        ids.push_back(id);
        tokens.push_back(token);
      }
      events.resize(ids.size());
      const std::size_t n = router_.on_tokens(ids, tokens, events);
      totals_.tokens += ids.size();
      for (std::size_t i = 0; i < n; ++i) {
        const PhaseEvent& e = events[i];
        if (e.kind == PhaseEventKind::kExitThink) {
          ++totals_.exit_events;
          inbox_.push({MessageKind::kExitThink, e.request_id, 0, Phase::kOutputDecode});
        } else if (e.kind == PhaseEventKind::kComplete) {
          ++totals_.complete_events;
          inbox_.push({MessageKind::kComplete, e.request_id, 0, Phase::kComplete});
        }
      }
    }
  }

  void housekeeping_loop(const std::atomic<bool>& done) {
    std::mt19937_64 rng(99);
    while (!done.load()) {
      router_.tick();
      (void)router_.reap_idle(std::chrono::hours(1));
      (void)router_.tracked();
      (void)router_.counters();
      const RequestId probe = 1 + rng() % kRequests;
      (void)router_.snapshot(probe);
      (void)router_.end_think_pending(probe);
      (void)ids_.size();
      (void)ids_.find(external_id(probe - 1));
      std::this_thread::yield();
    }
  }

  PhaseRouter router_;
  RequestIdMap ids_;
  Inbox inbox_;
  std::array<StepQueue, kOutputThreads> queues_;
  Totals totals_;
  std::optional<DualQueueScheduler> scheduler_;  // created and used on the scheduler thread
  std::optional<KvBlockManager> kv_;
};

TEST(EngineConcurrency, RouterSchedulerAndBlocksUnderChurnEndClean) {
  Rig rig;
  rig.run();
  const Totals& t = rig.totals();
  EXPECT_EQ(t.admitted.load(), kRequests);
  EXPECT_EQ(t.finished.load(), kRequests);
  EXPECT_EQ(t.completed.load() + t.cancelled.load() + t.aborted.load(), kRequests);

  // Nothing is tracked anywhere.
  EXPECT_EQ(rig.router().tracked(), 0U);
  EXPECT_EQ(rig.scheduler().size(), 0U);
  EXPECT_EQ(rig.ids().size(), 0U);
  // Every block can be allocated again (free, or cached for prefix hits).
  const KvBlockUsage u = rig.kv().usage();
  for (std::uint32_t live : u.live_blocks) EXPECT_EQ(live, 0U);
  EXPECT_EQ(u.allocatable_blocks, u.total_blocks);
  EXPECT_EQ(rig.kv().check_invariants(), "");

  // Each request left the router exactly once: EOS, or end() on cancel/abort.
  const RouterCounters c = rig.router().counters();
  EXPECT_EQ(c.begun, kRequests);
  EXPECT_EQ(c.completed + c.ended, kRequests);
  EXPECT_EQ(c.completed, t.complete_events.load());
  EXPECT_EQ(c.exit_think, t.exit_events.load());
  EXPECT_EQ(c.reaped, 0U);

  // The run exercised what it is meant to.
  const SchedulerCounters& sc = rig.scheduler().counters();
  std::cout << "steps " << sc.steps << ", tokens " << t.tokens.load() << ", completed " << t.completed.load()
            << ", cancelled " << t.cancelled.load() << ", aborted " << t.aborted.load() << ", preemptions "
            << sc.preemptions[0] + sc.preemptions[1] + sc.preemptions[2] << ", forced exits "
            << c.forced_exits << ", force requests " << t.force_requests.load() << "\n";
  EXPECT_GT(sc.preemptions[0] + sc.preemptions[1] + sc.preemptions[2], 0U);
  EXPECT_GT(t.cancelled.load(), 0U);
  EXPECT_GT(t.aborted.load(), 0U);
  EXPECT_GT(c.forces_issued[static_cast<std::size_t>(ForceReason::kHardCap)], 0U);
  EXPECT_GT(c.forced_exits, 0U);
}

}  // namespace
}  // namespace meridian
