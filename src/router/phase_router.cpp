#include "meridian/phase_router.h"

#include <atomic>
#include <bit>
#include <ranges>
#include <thread>
#include <vector>

#include <absl/container/flat_hash_map.h>
#include <fmt/format.h>

#include "router/boundaries.h"
#include "router/spin_lock.h"
#include "sync/mutex.h"

namespace meridian {
namespace {

using router_detail::MarkerPrefix;
using router_detail::MarkerSearch;
using router_detail::TokenRole;
using router_detail::TokenRoles;

enum StateFlag : std::uint8_t {
  kForcePending = 1U << 0U,      // a forced </think> is wanted
  kForceAnnounced = 1U << 1U,    // ... and the caller has been told
  kToolCallOpen = 1U << 2U,      // inside <tool_call> ... </tool_call>
  kThinkingDisabled = 1U << 3U,  // /no_think honoured
};

// 40 bytes; lives in the shard's flat map, so updates touch one cache line.
struct RequestState {
  std::uint64_t think_tokens = 0;
  std::uint64_t output_tokens = 0;
  std::int64_t last_active_ns = 0;
  std::uint32_t pending_steps = 0;
  Phase phase = Phase::kPrefill;
  ForceReason pending_reason = ForceReason::kHardCap;
  std::uint8_t flags = 0;
  std::uint16_t end_marker_state = MarkerSearch::start_state();
  MarkerPrefix::State start_marker;

  [[nodiscard]] bool has(StateFlag f) const noexcept { return (flags & f) != 0; }
  void set(StateFlag f) noexcept { flags = static_cast<std::uint8_t>(flags | f); }
  void clear(StateFlag f) noexcept { flags = static_cast<std::uint8_t>(flags & ~f); }
};

// Fibonacci hashing spreads sequential ids (RequestIdMap hands those out)
// evenly over the shards.
std::size_t shard_index(RequestId id) noexcept {
  constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
  return static_cast<std::size_t>((id * kGolden) >> 58U);
}
static_assert(PhaseRouter::kShardCount == 64, "shard_index() assumes 64 shards");

std::int64_t steady_now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct alignas(64) Shard {
  mutable router_detail::SpinLock mu;
  absl::flat_hash_map<RequestId, RequestState> requests ABSL_GUARDED_BY(mu);
};

struct AtomicCounters {
  std::atomic<std::uint64_t> begun{0}, duplicate_begins{0}, think_disable_ignored{0}, enter_think{0},
      exit_think{0}, forced_exits{0}, forces_reissued{0}, completed{0}, ended{0}, reaped{0},
      unknown_request_tokens{0};
  std::array<std::atomic<std::uint64_t>, 3> forces_issued{};

  static void bump(std::atomic<std::uint64_t>& c) noexcept { c.fetch_add(1, std::memory_order_relaxed); }
};

// Seconds as nanoseconds, saturating: validation bounds the value, but a
// float -> integer conversion out of range would be undefined behaviour.
std::chrono::nanoseconds seconds_to_ns(double seconds) noexcept {
  constexpr auto kMax = std::chrono::nanoseconds::max();
  const double ns = seconds * 1e9;
  if (!(ns < static_cast<double>(kMax.count()))) return kMax;  // also NaN, which validation rejects first
  if (ns <= 0) return std::chrono::nanoseconds::zero();
  return std::chrono::nanoseconds(static_cast<std::int64_t>(ns));
}

void check_limits(const RouterLimits& limits) {
  if (limits.force_reissue_grace_steps == 0) {
    throw InvalidArgument("RouterLimits.force_reissue_grace_steps must be >= 1; got 0");
  }
  if (limits.reap_idle_after.count() <= 0) {
    throw InvalidArgument(
        fmt::format("RouterLimits.reap_idle_after must be > 0; got {} ns", limits.reap_idle_after.count()));
  }
}

}  // namespace

RouterLimits RouterLimits::from(const SchedulerConfig& scheduler) {
  validate_or_throw(scheduler);
  RouterLimits limits;
  limits.min_think_tokens = scheduler.min_think_tokens;
  limits.max_think_tokens = scheduler.max_think_tokens;
  limits.force_reissue_grace_steps = scheduler.force_reissue_grace_steps;
  limits.reap_idle_after = seconds_to_ns(scheduler.reap_idle_after_s);
  return limits;
}

struct PhaseRouter::Impl {
  Impl(const ModelConfig& model, RouterLimits router_limits, std::span<const TokenId> extra_eos)
      : roles(model, extra_eos),
        start_markers(model.think_start_markers),
        end_markers(model.think_end_markers),
        limits(router_limits),
        now_ns(steady_now_ns()),
        last_reap_ns(now_ns.load()),
        parser(model.reasoning_parser),
        supports_think_disable(model.supports_think_disable) {}

  Shard& shard_for(RequestId id) noexcept { return shards[shard_index(id)]; }
  const Shard& shard_for(RequestId id) const noexcept { return shards[shard_index(id)]; }

  [[nodiscard]] bool prose() const noexcept { return parser == ReasoningParser::kGranite; }

  PhaseEvent event(RequestId id, PhaseEventKind kind, const RequestState& s) const noexcept {
    PhaseEvent e;
    e.request_id = id;
    e.kind = kind;
    e.think_tokens = s.think_tokens;
    e.reason = s.pending_reason;
    return e;
  }

  PhaseEvent announce_force(RequestId id, RequestState& s) noexcept {
    PhaseEvent e = event(id, PhaseEventKind::kForceBudget, s);
    e.reissue = s.has(kForceAnnounced);
    if (e.reissue) {
      AtomicCounters::bump(counters.forces_reissued);
    } else {
      AtomicCounters::bump(counters.forces_issued.at(static_cast<std::size_t>(s.pending_reason)));
    }
    s.set(kForceAnnounced);
    s.pending_steps = 0;
    return e;
  }

  std::optional<PhaseEvent> enter_think(RequestId id, RequestState& s) noexcept {
    s.phase = Phase::kThinkDecode;
    s.end_marker_state = MarkerSearch::start_state();
    AtomicCounters::bump(counters.enter_think);
    return event(id, PhaseEventKind::kEnterThink, s);
  }

  std::optional<PhaseEvent> exit_think(RequestId id, RequestState& s) noexcept {
    PhaseEvent e = event(id, PhaseEventKind::kExitThink, s);
    e.forced = s.has(kForcePending);
    if (e.forced) AtomicCounters::bump(counters.forced_exits);
    AtomicCounters::bump(counters.exit_think);
    s.phase = Phase::kOutputDecode;
    s.clear(kForcePending);
    s.clear(kForceAnnounced);
    s.clear(kToolCallOpen);
    return e;
  }

  // One think token has been counted: enforce the hard cap, announce a
  // deferred force once no tool call is open, and re-issue a force that has
  // not landed within the grace. `may_announce` is false when the caller
  // already returns another event for this token; the force is then
  // announced on the next token (end_think_pending() is true meanwhile).
  std::optional<PhaseEvent> after_think_token(RequestId id, RequestState& s, bool may_announce) noexcept {
    if (!s.has(kForcePending) && s.think_tokens >= limits.max_think_tokens) {
      s.set(kForcePending);
      s.clear(kForceAnnounced);
      s.pending_reason = ForceReason::kHardCap;
      s.pending_steps = 0;
      if (may_announce && !s.has(kToolCallOpen)) return announce_force(id, s);
      return std::nullopt;
    }
    if (!s.has(kForcePending) || s.has(kToolCallOpen) || !may_announce) return std::nullopt;
    if (!s.has(kForceAnnounced)) return announce_force(id, s);
    if (++s.pending_steps < limits.force_reissue_grace_steps) return std::nullopt;
    return announce_force(id, s);
  }

  std::optional<PhaseEvent> prefill_token(RequestId id, RequestState& s, TokenRole role,
                                          std::string_view text) {
    if (prose()) {
      for (std::size_t i = 0; i < text.size(); ++i) {
        switch (start_markers.step(s.start_marker, static_cast<unsigned char>(text[i]))) {
          case MarkerPrefix::Verdict::kUndecided: continue;
          case MarkerPrefix::Verdict::kDiverged:
            s.phase = Phase::kOutputDecode;
            ++s.output_tokens;
            return std::nullopt;
          case MarkerPrefix::Verdict::kMatched: {
            auto entered = enter_think(id, s);
            // Text after the marker in the same piece is already reasoning.
            scan_end_markers(s, text.substr(i + 1));
            return entered;
          }
        }
      }
      return std::nullopt;  // still a prefix of a marker (or no text yet)
    }
    switch (role) {
      case TokenRole::kThinkStart: return enter_think(id, s);
      case TokenRole::kThinkEnd: return exit_think(id, s);
      default: break;
    }
    if (parser == ReasoningParser::kDeepSeekR1) {
      // The template opened <think> (vLLM's deepseek_r1 parser assumes the same).
      auto entered = enter_think(id, s);
      think_token(id, s, role, text, /*may_announce=*/false);
      return entered;
    }
    s.phase = Phase::kOutputDecode;
    ++s.output_tokens;
    return std::nullopt;
  }

  // An end marker already completed (in the piece that opened the reasoning)
  // or completed by this piece.
  bool end_marker_seen(RequestState& s, std::string_view text) const noexcept {
    if (end_markers.empty()) return false;
    return end_markers.accepts(s.end_marker_state) || scan_end_markers(s, text);
  }

  // Advances the end-marker automaton; stops (staying in the accepting
  // state) as soon as a marker completes.
  bool scan_end_markers(RequestState& s, std::string_view text) const noexcept {
    if (end_markers.empty()) return false;
    for (char c : text) {
      s.end_marker_state = end_markers.step(s.end_marker_state, static_cast<unsigned char>(c));
      if (end_markers.accepts(s.end_marker_state)) return true;
    }
    return false;
  }

  std::optional<PhaseEvent> think_token(RequestId id, RequestState& s, TokenRole role, std::string_view text,
                                        bool may_announce = true) {
    if (role == TokenRole::kThinkEnd || (prose() && end_marker_seen(s, text))) return exit_think(id, s);
    if (role == TokenRole::kThinkStart) return std::nullopt;  // nested opener: not reasoning content
    ++s.think_tokens;
    if (role == TokenRole::kToolStart) s.set(kToolCallOpen);
    if (role == TokenRole::kToolEnd) s.clear(kToolCallOpen);
    return after_think_token(id, s, may_announce);
  }

  // The state machine for one token; `completed` tells the caller to erase.
  std::optional<PhaseEvent> advance(RequestId id, RequestState& s, TokenId token, std::string_view text,
                                    std::int64_t now, bool& completed) {
    s.last_active_ns = now;
    const TokenRole role = roles.role(token);
    if (role == TokenRole::kEos) {
      completed = true;
      AtomicCounters::bump(counters.completed);
      PhaseEvent e = event(id, PhaseEventKind::kComplete, s);
      s.phase = Phase::kComplete;
      return e;
    }
    switch (s.phase) {
      case Phase::kPrefill: return prefill_token(id, s, role, text);
      case Phase::kThinkDecode: return think_token(id, s, role, text);
      case Phase::kOutputDecode:
      case Phase::kComplete: break;
    }
    ++s.output_tokens;
    return std::nullopt;
  }

  // The common token: ordinary, no force in play, no prose to scan. Returns
  // false when the full state machine must run.
  [[gnu::always_inline]] bool fast_path(RequestState& s, TokenId token, std::int64_t now) const noexcept {
    if (s.flags != 0 || prose() || roles.role(token) != TokenRole::kOrdinary) return false;
    if (s.phase == Phase::kOutputDecode) {
      ++s.output_tokens;
    } else if (s.phase == Phase::kThinkDecode && s.think_tokens + 1 < limits.max_think_tokens) {
      ++s.think_tokens;
    } else {
      return false;
    }
    s.last_active_ns = now;
    return true;
  }

  // The lookup and the fast path are inlined into the batch loop; anything
  // unusual leaves through slow_token().
  [[gnu::always_inline]] std::optional<PhaseEvent> on_token_locked(Shard& shard, RequestId id, TokenId token,
                                                                   std::string_view text, std::int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    auto it = shard.requests.find(id);
    if (it == shard.requests.end()) [[unlikely]] {
      AtomicCounters::bump(counters.unknown_request_tokens);
      return std::nullopt;
    }
    if (fast_path(it->second, token, now)) [[likely]] {
      return std::nullopt;
    }
    return slow_token(shard, it, id, token, text, now);
  }

  [[gnu::noinline]] std::optional<PhaseEvent> slow_token(
      Shard& shard, absl::flat_hash_map<RequestId, RequestState>::iterator it, RequestId id, TokenId token,
      std::string_view text, std::int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    bool completed = false;
    auto result = advance(id, it->second, token, text, now, completed);
    if (completed) {
      shard.requests.erase(it);
      tracked.fetch_sub(1, std::memory_order_relaxed);
    }
    return result;
  }

  // Uncontended (the usual case: one scheduler thread per engine): take
  // every shard the step touches with try_lock, then process the tokens in
  // input order - one lock per shard per step and sequential input access.
  // Returns nullopt, having changed nothing, if another thread holds one of
  // them. The analysis cannot follow a data-dependent set of locks: the
  // bitmask `held` is what guarantees each shard is held while it is used.
  std::optional<std::size_t> on_tokens_uncontended(std::span<const RequestId> ids,
                                                   std::span<const TokenId> tokens,
                                                   std::span<PhaseEvent> events,
                                                   std::span<const std::string_view> texts,
                                                   std::int64_t now) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    std::uint64_t touched = 0;
    for (RequestId id : ids) touched |= 1ULL << shard_index(id);
    std::uint64_t held = 0;
    for (std::uint64_t rest = touched; rest != 0; rest &= rest - 1) {
      const auto s = static_cast<std::size_t>(std::countr_zero(rest));
      if (!shards[s].mu.try_lock()) break;
      held |= 1ULL << s;
    }
    std::size_t produced = 0;
    if (held == touched) {
      for (std::size_t i = 0; i < ids.size(); ++i) {
        const std::string_view text = texts.empty() ? std::string_view{} : texts[i];
        if (auto e = on_token_locked(shard_for(ids[i]), ids[i], tokens[i], text, now)) {
          events[produced++] = *e;
        }
      }
    }
    for (std::uint64_t rest = held; rest != 0; rest &= rest - 1) {
      shards[static_cast<std::size_t>(std::countr_zero(rest))].mu.unlock();
    }
    if (held != touched) return std::nullopt;
    return produced;
  }

  // Ordered largest-alignment first to keep padding small.
  std::array<Shard, kShardCount> shards;
  TokenRoles roles;
  MarkerPrefix start_markers;
  MarkerSearch end_markers;
  RouterLimits limits;
  AtomicCounters counters;
  std::atomic<std::int64_t> now_ns;
  std::atomic<std::int64_t> last_reap_ns;
  std::atomic<std::int64_t> tracked{0};
  ReasoningParser parser;
  bool supports_think_disable;
};

PhaseRouter::PhaseRouter(const ModelConfig& model, RouterLimits limits, std::span<const TokenId> extra_eos) {
  // Checked here, not only when loading: the bindings and hand-built configs
  // reach this constructor directly.
  validate_or_throw(model);
  check_limits(limits);
  impl_ = std::make_unique<Impl>(model, limits, extra_eos);
}

PhaseRouter::PhaseRouter(const MeridianConfig& config, std::string_view model_name,
                         std::span<const TokenId> extra_eos)
    : PhaseRouter(config.model(model_name), RouterLimits::from(config.scheduler), extra_eos) {}

PhaseRouter::~PhaseRouter() = default;

Phase PhaseRouter::begin(RequestId id, std::span<const TokenId> prompt_token_ids, RequestOptions options) {
  Impl& impl = *impl_;
  Shard& shard = impl.shard_for(id);
  const std::int64_t now = impl.now_ns.load(std::memory_order_relaxed);
  const sync::Lock lock(shard.mu);
  auto [it, inserted] = shard.requests.try_emplace(id);
  RequestState& s = it->second;
  s.last_active_ns = now;
  if (!inserted) {
    AtomicCounters::bump(impl.counters.duplicate_begins);
    return s.phase;
  }
  impl.tracked.fetch_add(1, std::memory_order_relaxed);
  AtomicCounters::bump(impl.counters.begun);
  if (options.thinking_disabled) {
    if (impl.supports_think_disable) {
      s.set(kThinkingDisabled);
      s.phase = Phase::kOutputDecode;
      return s.phase;
    }
    AtomicCounters::bump(impl.counters.think_disable_ignored);
  }
  // The last think boundary in the prompt decides whether the block is open.
  for (std::size_t i = prompt_token_ids.size(); i-- > 0;) {
    const TokenRole role = impl.roles.role(prompt_token_ids[i]);
    if (role == TokenRole::kThinkEnd) break;
    if (role == TokenRole::kThinkStart) {
      impl.enter_think(id, s);
      break;
    }
  }
  return s.phase;
}

std::optional<PhaseEvent> PhaseRouter::on_token(RequestId id, TokenId token, std::string_view text) {
  Impl& impl = *impl_;
  Shard& shard = impl.shard_for(id);
  const std::int64_t now = impl.now_ns.load(std::memory_order_relaxed);
  const sync::Lock lock(shard.mu);
  return impl.on_token_locked(shard, id, token, text, now);
}

std::size_t PhaseRouter::on_tokens(std::span<const RequestId> ids, std::span<const TokenId> tokens,
                                   std::span<PhaseEvent> events, std::span<const std::string_view> texts) {
  if (tokens.size() != ids.size() || events.size() < ids.size() ||
      (!texts.empty() && texts.size() != ids.size())) {
    throw InvalidArgument(
        fmt::format("PhaseRouter::on_tokens: got {} ids, {} tokens, {} texts and room for {} events; "
                    "tokens (and texts, if any) must match ids and events must be at least as long",
                    ids.size(), tokens.size(), texts.size(), events.size()));
  }
  Impl& impl = *impl_;
  const std::int64_t now = impl.now_ns.load(std::memory_order_relaxed);
  if (const auto produced = impl.on_tokens_uncontended(ids, tokens, events, texts, now)) return *produced;
  const auto text_at = [&](std::size_t i) { return texts.empty() ? std::string_view{} : texts[i]; };
  std::size_t produced = 0;

  // Contended: another thread holds some shard. Bucket the tokens by shard
  // (stable counting sort into per-thread buffers that only grow) and visit
  // one shard at a time, each lock held just for that shard's tokens, so
  // threads working on different shards proceed in parallel. Start at a
  // per-thread offset so that two such threads rarely meet on one shard.
  thread_local std::vector<std::uint32_t> order;
  thread_local std::vector<std::uint8_t> shard_of;
  order.resize(ids.size());
  shard_of.resize(ids.size());
  std::array<std::uint32_t, kShardCount + 1> offsets{};
  for (std::size_t i = 0; i < ids.size(); ++i) {
    shard_of[i] = static_cast<std::uint8_t>(shard_index(ids[i]));
    ++offsets[shard_of[i] + 1U];
  }
  for (std::size_t s = 0; s < kShardCount; ++s) offsets[s + 1] += offsets[s];
  std::array<std::uint32_t, kShardCount> cursor{};
  std::copy_n(offsets.begin(), kShardCount, cursor.begin());
  for (std::size_t i = 0; i < ids.size(); ++i) order[cursor[shard_of[i]]++] = static_cast<std::uint32_t>(i);
  const std::size_t start = std::hash<std::thread::id>{}(std::this_thread::get_id()) % kShardCount;
  for (std::size_t k = 0; k < kShardCount; ++k) {
    const std::size_t s = (start + k) % kShardCount;
    if (offsets[s] == offsets[s + 1]) continue;
    Shard& shard = impl.shards[s];
    const sync::Lock lock(shard.mu);
    for (std::uint32_t j = offsets[s]; j < offsets[s + 1]; ++j) {
      const std::uint32_t i = order[j];
      if (auto e = impl.on_token_locked(shard, ids[i], tokens[i], text_at(i), now)) events[produced++] = *e;
    }
  }
  return produced;
}

ForceResult PhaseRouter::request_force(RequestId id, ForceReason reason, PhaseEvent* event) {
  Impl& impl = *impl_;
  Shard& shard = impl.shard_for(id);
  const sync::Lock lock(shard.mu);
  auto it = shard.requests.find(id);
  if (it == shard.requests.end()) return ForceResult::kUnknownRequest;
  RequestState& s = it->second;
  if (s.phase != Phase::kThinkDecode) return ForceResult::kNotThinking;
  if (s.has(kForcePending)) return ForceResult::kAlreadyPending;
  if (s.think_tokens < impl.limits.min_think_tokens) return ForceResult::kTooEarly;
  s.set(kForcePending);
  s.clear(kForceAnnounced);
  s.pending_reason = reason;
  if (s.has(kToolCallOpen)) return ForceResult::kDeferredToolCall;
  const PhaseEvent e = impl.announce_force(id, s);
  if (event != nullptr) *event = e;
  return ForceResult::kIssued;
}

bool PhaseRouter::end_think_pending(RequestId id) const {
  const Shard& shard = impl_->shard_for(id);
  const sync::Lock lock(shard.mu);
  auto it = shard.requests.find(id);
  if (it == shard.requests.end()) return false;
  const RequestState& s = it->second;
  return s.phase == Phase::kThinkDecode && s.has(kForcePending) && !s.has(kToolCallOpen);
}

std::optional<RequestSnapshot> PhaseRouter::snapshot(RequestId id) const {
  const Shard& shard = impl_->shard_for(id);
  const sync::Lock lock(shard.mu);
  auto it = shard.requests.find(id);
  if (it == shard.requests.end()) return std::nullopt;
  const RequestState& s = it->second;
  RequestSnapshot snap;
  snap.phase = s.phase;
  snap.think_tokens = s.think_tokens;
  snap.output_tokens = s.output_tokens;
  snap.force_pending = s.has(kForcePending);
  snap.tool_call_open = s.has(kToolCallOpen);
  snap.end_think_pending = s.phase == Phase::kThinkDecode && snap.force_pending && !snap.tool_call_open;
  snap.pending_reason = s.pending_reason;
  snap.thinking_disabled = s.has(kThinkingDisabled);
  snap.last_active_ns = s.last_active_ns;
  return snap;
}

bool PhaseRouter::end(RequestId id) {
  Shard& shard = impl_->shard_for(id);
  const sync::Lock lock(shard.mu);
  if (shard.requests.erase(id) == 0) return false;
  impl_->tracked.fetch_sub(1, std::memory_order_relaxed);
  AtomicCounters::bump(impl_->counters.ended);
  return true;
}

void PhaseRouter::advance_clock(std::int64_t now_ns) noexcept {
  std::int64_t current = impl_->now_ns.load(std::memory_order_relaxed);
  while (now_ns > current &&
         !impl_->now_ns.compare_exchange_weak(current, now_ns, std::memory_order_relaxed)) {
  }
}

std::size_t PhaseRouter::tick() {
  const std::int64_t now = steady_now_ns();
  advance_clock(now);
  const std::int64_t interval = std::max<std::int64_t>(impl_->limits.reap_idle_after.count() / 4, 1);
  std::int64_t last = impl_->last_reap_ns.load(std::memory_order_relaxed);
  if (now - last < interval) return 0;
  // One caller wins the right to reap for this interval.
  if (!impl_->last_reap_ns.compare_exchange_strong(last, now, std::memory_order_relaxed)) return 0;
  return reap_idle();
}

std::size_t PhaseRouter::reap_idle(std::chrono::nanoseconds max_idle) {
  const std::int64_t cutoff = impl_->now_ns.load(std::memory_order_relaxed) - max_idle.count();
  std::size_t reaped = 0;
  for (Shard& shard : impl_->shards) {
    const sync::Lock lock(shard.mu);
    for (auto it = shard.requests.begin(); it != shard.requests.end();) {
      if (it->second.last_active_ns < cutoff) {
        shard.requests.erase(it++);
        ++reaped;
      } else {
        ++it;
      }
    }
  }
  impl_->tracked.fetch_sub(static_cast<std::int64_t>(reaped), std::memory_order_relaxed);
  impl_->counters.reaped.fetch_add(reaped, std::memory_order_relaxed);
  return reaped;
}

std::size_t PhaseRouter::reap_idle() { return reap_idle(impl_->limits.reap_idle_after); }

std::size_t PhaseRouter::tracked() const noexcept {
  return static_cast<std::size_t>(std::max<std::int64_t>(impl_->tracked.load(std::memory_order_relaxed), 0));
}

RouterCounters PhaseRouter::counters() const noexcept {
  const AtomicCounters& c = impl_->counters;
  const auto get = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  RouterCounters out;
  out.begun = get(c.begun);
  out.duplicate_begins = get(c.duplicate_begins);
  out.think_disable_ignored = get(c.think_disable_ignored);
  out.enter_think = get(c.enter_think);
  out.exit_think = get(c.exit_think);
  out.forced_exits = get(c.forced_exits);
  for (std::size_t i = 0; i < out.forces_issued.size(); ++i) out.forces_issued[i] = get(c.forces_issued[i]);
  out.forces_reissued = get(c.forces_reissued);
  out.completed = get(c.completed);
  out.ended = get(c.ended);
  out.reaped = get(c.reaped);
  out.unknown_request_tokens = get(c.unknown_request_tokens);
  return out;
}

std::int64_t PhaseRouter::now_ns() const noexcept { return impl_->now_ns.load(std::memory_order_relaxed); }

const RouterLimits& PhaseRouter::limits() const noexcept { return impl_->limits; }

}  // namespace meridian
