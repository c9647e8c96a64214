// Router token streams: bytes decode into operations (begin with a prompt,
// single tokens, engine-step batches with boundary ids and prose pieces,
// forces, ends, clock moves and reaping) on a PhaseRouter built from a
// built-in preset (qwen3, deepseek_r1 and granite_3_2 for prose markers).
// Two routers run the same stream, one token at a time and in on_tokens()
// batches, and must agree. Checked after every operation: phases only move
// forward within a request's life, tracked() and the counters agree with the
// requests alive, a force is pending at the hard cap, and nothing throws.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fuzz_check.h"
#include "meridian/config.h"
#include "meridian/phase_router.h"
#include <fuzzer/FuzzedDataProvider.h>

namespace meridian::fuzz {
namespace {

constexpr RequestId kMaxId = 6;  // few ids, so operations hit live requests
constexpr std::size_t kMaxOps = 2048;
constexpr std::size_t kMaxBatch = 24;
constexpr TokenId kExtraEos = 7;  // the engine's EOS (granite's preset has none)

struct Stream {
  ModelConfig model;
  std::vector<TokenId> tokens;      // boundary ids and ordinary ids to draw from
  std::vector<std::string> pieces;  // decoded text pieces to draw from
};

Stream make_stream(std::uint8_t preset) {
  static const MeridianConfig kDefaults = MeridianConfig::defaults();
  static const std::array<const char*, 3> kPresets = {"qwen3", "deepseek_r1", "granite_3_2"};
  Stream s;
  s.model = kDefaults.model(kPresets[preset % kPresets.size()]);
  for (const auto* ids :
       {&s.model.think_start_token_ids, &s.model.think_end_token_ids, &s.model.eos_token_ids,
        &s.model.tool_call_start_token_ids, &s.model.tool_call_end_token_ids}) {
    s.tokens.insert(s.tokens.end(), ids->begin(), ids->end());
  }
  s.tokens.insert(s.tokens.end(), {kExtraEos, 100, 101, 102});
  for (const auto* markers : {&s.model.think_start_markers, &s.model.think_end_markers}) {
    for (const std::string& m : *markers) {
      s.pieces.push_back(m);
      s.pieces.push_back(m.substr(0, m.size() / 2));  // a marker split across tokens
      s.pieces.push_back(m.substr(m.size() / 2));
    }
  }
  s.pieces.insert(s.pieces.end(), {"", " ", "\n", "Here", "'s", " is", " my", "word", "<think>", "</think>"});
  return s;
}

class Harness {
 public:
  Harness(FuzzedDataProvider& in, Stream stream, RouterLimits limits)
      : in_(in),
        stream_(std::move(stream)),
        single_(stream_.model, limits, std::span<const TokenId>(&kExtraEos, 1)),
        batched_(stream_.model, limits, std::span<const TokenId>(&kExtraEos, 1)) {
    // Each router's clock starts at steady_clock::now(); put both on one clock.
    now_ = std::max(single_.now_ns(), batched_.now_ns());
    single_.advance_clock(now_);
    batched_.advance_clock(now_);
  }

  void run() {
    for (std::size_t op = 0; op < kMaxOps && in_.remaining_bytes() > 0; ++op) {
      switch (in_.ConsumeIntegralInRange<int>(0, 6)) {
        case 0: begin(); break;
        case 1: token(); break;
        case 2: batch(); break;
        case 3: force(); break;
        case 4: end(); break;
        case 5: clock(); break;
        default: query(); break;
      }
      check_state();
    }
  }

 private:
  RequestId id() { return in_.ConsumeIntegralInRange<RequestId>(1, kMaxId); }
  TokenId token_id() {
    if (in_.ConsumeBool()) return in_.ConsumeIntegral<TokenId>();
    return stream_.tokens[in_.ConsumeIntegralInRange<std::size_t>(0, stream_.tokens.size() - 1)];
  }
  std::string text() {
    if (in_.ConsumeBool()) return in_.ConsumeRandomLengthString(48);
    return stream_.pieces[in_.ConsumeIntegralInRange<std::size_t>(0, stream_.pieces.size() - 1)];
  }

  void begin() {
    const RequestId r = id();
    std::vector<TokenId> prompt(in_.ConsumeIntegralInRange<std::size_t>(0, 8));
    for (TokenId& t : prompt) t = token_id();
    const RequestOptions options{.thinking_disabled = in_.ConsumeBool()};
    const bool was_alive = alive_[r];
    const std::optional<RequestSnapshot> before = single_.snapshot(r);
    const Phase a = single_.begin(r, prompt, options);
    const Phase b = batched_.begin(r, prompt, options);
    check(a == b, "begin() agrees between the routers");
    check(a != Phase::kComplete, "begin() never returns Complete");
    if (was_alive) {
      check(a == before->phase, "a second begin() keeps the existing phase");
    } else {
      alive_[r] = true;
      rank_[r] = static_cast<int>(a);
      think_[r] = 0;
    }
  }

  void on_event(const PhaseEvent& e) {
    check(e.request_id >= 1 && e.request_id <= kMaxId, "an event names a request of the stream");
    check(alive_[e.request_id], "events only for tracked requests");
    if (e.kind == PhaseEventKind::kComplete) alive_[e.request_id] = false;
  }

  void token() {
    const RequestId r = id();
    const TokenId t = token_id();
    const std::string piece = text();
    const auto a = single_.on_token(r, t, piece);
    const auto b = batched_.on_token(r, t, piece);
    check(a == b, "on_token() agrees between the routers");
    if (!alive_[r]) check(!a.has_value(), "no event for an untracked request");
    if (a) on_event(*a);
  }

  void batch() {
    const auto n = in_.ConsumeIntegralInRange<std::size_t>(1, kMaxBatch);
    const bool with_text = in_.ConsumeBool();
    std::vector<RequestId> ids(n);
    std::vector<TokenId> tokens(n);
    std::vector<std::string> pieces(n);
    for (std::size_t i = 0; i < n; ++i) {
      ids[i] = id();
      tokens[i] = token_id();
      if (with_text) pieces[i] = text();
    }
    std::vector<std::string_view> views;
    if (with_text) views.assign(pieces.begin(), pieces.end());
    std::vector<PhaseEvent> expected;
    for (std::size_t i = 0; i < n; ++i) {
      if (auto e = single_.on_token(ids[i], tokens[i], with_text ? views[i] : std::string_view{})) {
        expected.push_back(*e);
      }
    }
    std::vector<PhaseEvent> events(n);
    const std::size_t produced = batched_.on_tokens(ids, tokens, events, views);
    check(produced <= n, "on_tokens() writes at most one event per token");
    events.resize(produced);
    if (events != expected) {
      finding(fmt::format("on_tokens() gave {} events, on_token() one by one gave {}", produced,
                          expected.size()));
    }
    for (const PhaseEvent& e : events) on_event(e);
  }

  void force() {
    const RequestId r = id();
    const auto reason = in_.ConsumeBool() ? ForceReason::kConverged : ForceReason::kOverthinking;
    PhaseEvent ea;
    PhaseEvent eb;
    const ForceResult a = single_.request_force(r, reason, &ea);
    const ForceResult b = batched_.request_force(r, reason, &eb);
    check(a == b, "request_force() agrees between the routers");
    check((a == ForceResult::kUnknownRequest) == !alive_[r],
          "kUnknownRequest exactly for untracked requests");
    if (a == ForceResult::kIssued) {
      check(ea == eb && ea.kind == PhaseEventKind::kForceBudget && ea.request_id == r,
            "an issued force comes with its kForceBudget event");
    }
  }

  void end() {
    const RequestId r = id();
    const bool a = single_.end(r);
    const bool b = batched_.end(r);
    check(a == b && a == alive_[r], "end() reports whether the request was tracked");
    alive_[r] = false;
  }

  void clock() {
    now_ += in_.ConsumeIntegralInRange<std::int64_t>(0, 2 * single_.limits().reap_idle_after.count());
    single_.advance_clock(now_);
    batched_.advance_clock(now_);
    check(single_.now_ns() == now_ && batched_.now_ns() == now_, "the clock follows advance_clock()");
    if (in_.ConsumeBool()) {
      const std::size_t a = single_.reap_idle();
      const std::size_t b = batched_.reap_idle();
      check(a == b, "reap_idle() agrees between the routers");
      std::size_t gone = 0;
      for (RequestId r = 1; r <= kMaxId; ++r) {
        if (alive_[r] && !single_.snapshot(r)) {
          alive_[r] = false;
          ++gone;
        }
      }
      check(gone == a, "reap_idle() counts the requests it forgot");
    }
  }

  void query() {
    const RequestId r = id();
    check(single_.end_think_pending(r) == batched_.end_think_pending(r), "end_think_pending() agrees");
  }

  void check_state() {
    std::size_t alive = 0;
    for (RequestId r = 1; r <= kMaxId; ++r) {
      const auto a = single_.snapshot(r);
      const auto b = batched_.snapshot(r);
      check(a.has_value() == b.has_value(), "the routers track the same requests");
      check(a.has_value() == alive_[r], "tracked exactly while begun and not completed, ended or reaped");
      if (!a) continue;
      ++alive;
      check(a->phase == b->phase && a->think_tokens == b->think_tokens &&
                a->output_tokens == b->output_tokens && a->force_pending == b->force_pending &&
                a->end_think_pending == b->end_think_pending && a->tool_call_open == b->tool_call_open,
            fmt::format("request {}: on_token() and on_tokens() states differ", r));
      check(a->phase != Phase::kComplete, "a completed request is forgotten at once");
      const int rank = static_cast<int>(a->phase);
      check(rank >= rank_[r], fmt::format("request {}: phase went back to {}", r, to_string(a->phase)));
      check(a->think_tokens >= think_[r], "think tokens never decrease");
      rank_[r] = rank;
      think_[r] = a->think_tokens;
      if (a->phase == Phase::kThinkDecode && a->think_tokens >= single_.limits().max_think_tokens) {
        check(a->force_pending,
              fmt::format("request {}: {} think tokens, at the hard cap, with no force pending", r,
                          a->think_tokens));
      }
      check(!a->end_think_pending || a->force_pending, "an announced force is a pending one");
    }
    check(single_.tracked() == alive && batched_.tracked() == alive, "tracked() counts the live requests");
    const RouterCounters c = single_.counters();
    check(c.begun == c.completed + c.ended + c.reaped + alive,
          "begun = completed + ended + reaped + tracked");
  }

  FuzzedDataProvider& in_;
  Stream stream_;
  PhaseRouter single_;
  PhaseRouter batched_;
  std::array<bool, kMaxId + 1> alive_{};
  std::array<int, kMaxId + 1> rank_{};
  std::array<std::uint64_t, kMaxId + 1> think_{};
  std::int64_t now_ = 0;
};

void run(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  Stream stream = make_stream(in.ConsumeIntegral<std::uint8_t>());
  RouterLimits limits;
  limits.min_think_tokens = in.ConsumeIntegralInRange<std::uint64_t>(0, 8);
  limits.max_think_tokens = limits.min_think_tokens + in.ConsumeIntegralInRange<std::uint64_t>(1, 24);
  limits.force_reissue_grace_steps = in.ConsumeIntegralInRange<std::uint32_t>(1, 4);
  limits.reap_idle_after = std::chrono::nanoseconds(in.ConsumeIntegralInRange<std::int64_t>(1, 1000));
  Harness(in, std::move(stream), limits).run();
}

}  // namespace
}  // namespace meridian::fuzz

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry point
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return meridian::fuzz::run_input([&] { meridian::fuzz::run(data, size); });
}
