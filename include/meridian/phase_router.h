// PhaseRouter: follows every request's token stream through
// Prefill -> ThinkDecode -> OutputDecode -> Complete and says when the end of
// thinking must be forced.
//
// Rules (docs/architecture.md#phase-router has the full table):
//  * EOS completes a request in any phase; a completed request is forgotten
//    at once (end() does the same for aborts, stop strings, max_tokens).
//  * A prompt that ends inside an open think block starts in ThinkDecode.
//    With reasoning_parser "deepseek_r1" an ordinary first token also means
//    the template opened the block (as vLLM's deepseek_r1 parser assumes).
//  * RequestOptions::thinking_disabled (from /no_think or
//    enable_thinking=False) keeps a request in OutputDecode when the model
//    supports it; otherwise it is ignored and counted.
//  * A forced end of thinking stays pending until </think> is observed and is
//    re-issued every `force_reissue_grace_steps` tokens until it lands. The
//    hard cap (max_think_tokens) is enforced the same way: a guarantee, not a
//    one-shot hint. No force is announced while a tool call is open; it is
//    deferred until the call closes.
//  * Nothing forces before min_think_tokens (except the hard cap).
//  * Requests idle longer than reap_idle_after (router clock) are reaped.
//
// Thread-safety: every member function may be called concurrently from any
// number of threads. State lives in a fixed number of shards, each a flat
// hash map guarded by a spin lock (ADR-0002); calls for different requests rarely
// contend. Tokens of one request must be fed in order (from one thread at a
// time), as an engine naturally does.
//
// Allocation: begin() may allocate (the map grows); on_token(),
// request_force() and the queries never allocate; on_tokens() allocates only
// when a contended step is larger than any before on that thread (it keeps a
// per-thread scratch buffer for that case).
//
// Ownership: the router owns its state and copies what it needs from the
// ModelConfig at construction; it is neither copyable nor movable.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "meridian/config.h"
#include "meridian/phase.h"

namespace meridian {

/// Per-router limits, normally taken from [scheduler].
struct RouterLimits {
  std::uint64_t min_think_tokens = 512;
  std::uint64_t max_think_tokens = 32768;
  std::uint32_t force_reissue_grace_steps = 1;
  std::chrono::nanoseconds reap_idle_after = std::chrono::seconds(60);

  /// Throws ConfigError (dotted paths) if `scheduler` is invalid.
  static RouterLimits from(const SchedulerConfig& scheduler);
};

/// Per-request options given at begin().
struct RequestOptions {
  bool thinking_disabled = false;  ///< /no_think or enable_thinking=False
};

/// Outcome of request_force().
enum class ForceResult : std::uint8_t {
  kIssued,            ///< the caller must now force </think>
  kAlreadyPending,    ///< a force is already pending; nothing new
  kTooEarly,          ///< fewer than min_think_tokens think tokens so far
  kDeferredToolCall,  ///< pending, announced when the open tool call closes
  kNotThinking,       ///< request is not in ThinkDecode
  kUnknownRequest,    ///< not tracked (never begun, completed, ended or reaped)
};

/// A copy of one request's router state.
struct RequestSnapshot {
  Phase phase = Phase::kPrefill;
  std::uint64_t think_tokens = 0;
  std::uint64_t output_tokens = 0;
  bool end_think_pending = false;  ///< the caller should force </think> now
  bool force_pending = false;      ///< a force is wanted (maybe deferred by a tool call)
  ForceReason pending_reason = ForceReason::kHardCap;
  bool tool_call_open = false;
  bool thinking_disabled = false;
  std::int64_t last_active_ns = 0;  ///< router clock at the last begin()/token
};

/// Monotonic totals since construction.
struct RouterCounters {
  std::uint64_t begun = 0;
  std::uint64_t duplicate_begins = 0;
  std::uint64_t think_disable_ignored = 0;  ///< thinking_disabled on a model without support
  std::uint64_t enter_think = 0;
  std::uint64_t exit_think = 0;
  std::uint64_t forced_exits = 0;                ///< exits that arrived while a force was pending
  std::array<std::uint64_t, 3> forces_issued{};  ///< by ForceReason
  std::uint64_t forces_reissued = 0;
  std::uint64_t completed = 0;  ///< EOS seen
  std::uint64_t ended = 0;      ///< removed by end()
  std::uint64_t reaped = 0;
  std::uint64_t unknown_request_tokens = 0;  ///< tokens for requests not tracked
};

class PhaseRouter {
 public:
  /// `extra_eos` adds end-of-sequence ids the engine knows (e.g. from its
  /// tokenizer / generation config) to the model's eos_token_ids. Throws
  /// ConfigError if `model` is invalid, InvalidArgument if `limits` has
  /// force_reissue_grace_steps == 0 or reap_idle_after <= 0.
  PhaseRouter(const ModelConfig& model, RouterLimits limits, std::span<const TokenId> extra_eos = {});
  /// Router for model `model_name` of `config` (throws ConfigError if unknown,
  /// or if [scheduler] or the model is invalid).
  PhaseRouter(const MeridianConfig& config, std::string_view model_name,
              std::span<const TokenId> extra_eos = {});
  ~PhaseRouter();
  PhaseRouter(const PhaseRouter&) = delete;
  PhaseRouter& operator=(const PhaseRouter&) = delete;
  PhaseRouter(PhaseRouter&&) = delete;
  PhaseRouter& operator=(PhaseRouter&&) = delete;

  /// Start tracking `id`. `prompt_token_ids` (the whole prompt, or at least
  /// its tail after the last think boundary) is scanned for an open think
  /// block. Returns the initial phase. A second begin() for a tracked id
  /// keeps the existing state (preempted requests resume) and returns it.
  Phase begin(RequestId id, std::span<const TokenId> prompt_token_ids = {}, RequestOptions options = {});

  /// Feed one generated token (and, for prose-marker models, its decoded
  /// text). Returns the event it caused, if any. O(1); never allocates.
  std::optional<PhaseEvent> on_token(RequestId id, TokenId token, std::string_view text = {});

  /// Feed one engine step's tokens: ids[i] generated tokens[i] (and texts[i],
  /// if texts is non-empty). Writes at most one event per token to `events`
  /// (which must be at least as long as `ids`) and returns how many. Takes
  /// each shard's lock once per step (the hot path an engine should use).
  /// Events come in input order when no other thread holds a shard the step
  /// needs, otherwise grouped by shard; each request's events keep their order.
  /// Throws InvalidArgument if the lengths do not fit (a caller bug, checked
  /// before any state changes).
  std::size_t on_tokens(std::span<const RequestId> ids, std::span<const TokenId> tokens,
                        std::span<PhaseEvent> events, std::span<const std::string_view> texts = {});

  /// Ask for the end of thinking (EAT/RPDI decided so). On kIssued, `event`
  /// (if given) receives the kForceBudget event to act on.
  ForceResult request_force(RequestId id, ForceReason reason, PhaseEvent* event = nullptr);

  /// Whether the caller should force </think> for `id` on its next token.
  [[nodiscard]] bool end_think_pending(RequestId id) const;

  [[nodiscard]] std::optional<RequestSnapshot> snapshot(RequestId id) const;

  /// Stop tracking `id` now (abort, stop string, length limit). Returns
  /// whether it was tracked.
  bool end(RequestId id);

  /// Set the router clock (ns, any monotonic epoch: wall-clock in serving,
  /// simulated time in replay). Never moves backwards.
  void advance_clock(std::int64_t now_ns) noexcept;

  /// Once per engine step: advance the clock to steady_clock::now() and, at
  /// most every reap_idle_after / 4, reap idle requests. Returns how many
  /// were reaped.
  std::size_t tick();

  /// Forget requests idle for longer than `max_idle` (router clock).
  std::size_t reap_idle(std::chrono::nanoseconds max_idle);
  std::size_t reap_idle();  ///< with limits().reap_idle_after

  [[nodiscard]] std::size_t tracked() const noexcept;
  [[nodiscard]] RouterCounters counters() const noexcept;
  [[nodiscard]] std::int64_t now_ns() const noexcept;
  [[nodiscard]] const RouterLimits& limits() const noexcept;

  static constexpr std::size_t kShardCount = 64;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

[[nodiscard]] std::string_view to_string(ForceResult result) noexcept;

}  // namespace meridian
