// Workloads of the replay simulator: which requests arrive when, how long
// their prompts, reasoning and answers are, which prompt prefix they share
// with earlier turns, and the synthetic entropy signals each reasoning
// request emits token by token (a model of what a reasoning model's logits
// show, used to exercise budget forcing; docs/benchmarks.md#signal-model).
//
// Everything here is deterministic: the same parameters and seed give the
// same workload, and a request's signal at think token t depends only on
// (seed, request id, t), never on how a policy scheduled it.
//
// Thread-safety: plain values and const functions; safe to share read-only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "meridian/error.h"

namespace meridian::sim {

/// One request of a workload. Ids are 1..N in arrival order of first turns.
struct RequestSpec {
  std::uint64_t id = 0;
  double arrival_s = 0;  ///< first turns: arrival time; follow-up turns: ignored
  std::uint32_t prompt_tokens = 1;
  std::uint32_t think_tokens = 0;   ///< natural reasoning length; 0 = thinking disabled
  std::uint32_t answer_tokens = 1;  ///< visible tokens, EOS included (>= 1)
  /// Think token at which the answer is reached (signal model); 0 = drawn by
  /// the signal model. Forcing before it is the accuracy-risk proxy.
  std::uint32_t answer_at = 0;
  std::int32_t priority = 0;  ///< vllm-priority: lower value runs first
  /// Turns of one conversation (> 0) share a prompt prefix: a turn's prompt
  /// is the previous turn's prompt and visible answer (its reasoning is not
  /// carried over), then the new user message.
  std::uint64_t conversation = 0;
  std::uint32_t turn = 0;
  std::uint64_t after = 0;  ///< follow-up turn: id of the previous turn (0 = none)
  double delay_s = 0;       ///< follow-up turn: arrives this long after `after` finished

  [[nodiscard]] bool reasoning() const noexcept { return think_tokens > 0; }
};

struct Workload {
  std::string name;
  std::vector<RequestSpec> requests;  ///< index i holds id i + 1
};

/// Lognormal length distribution: median and log-space sigma, clamped.
struct LengthDist {
  double median = 100;
  double sigma = 0.5;
  std::uint32_t min = 1;
  std::uint32_t max = 32768;
};

/// [workload]: the synthetic generators (docs/replay.md cites each default).
/// These are the defaults of `mixed`; workload_preset() gives each kind's.
struct WorkloadParams {
  /// "mixed" (chat + reasoning, multi-turn), "seeds-mix" (the seeds' ranges),
  /// "long-think" (AIME-class reasoning), "long-prompt" (RAG / code contexts).
  std::string kind = "mixed";
  /// "poisson" (exponential gaps) or "uniform" (fixed gaps 1 / arrival_rate:
  /// a load whose capacity is known by construction, for tests).
  std::string arrival_process = "poisson";
  double arrival_rate = 1.3;  ///< conversations per second; ~75% of vllm-fcfs's sustainable goodput
  /// Arrivals of first turns stop after this: the ruler's window, long enough that goodput over
  /// twice it agrees within 5 % (docs/adr/0038).
  double duration_s = 3600;
  double reasoning_ratio = 0.4;
  double mean_turns = 2.0;        ///< mixed: turns per conversation (1 + geometric)
  double turn_delay_mean_s = 20;  ///< mixed: user time between a reply and the next turn (exponential)
  LengthDist chat_prompt{160, 1.0, 8, 4096};
  LengthDist chat_output{98, 0.545, 8, 2048};
  LengthDist reasoning_prompt{120, 0.6, 16, 4096};
  LengthDist think{1897, 0.70, 128, 16384};
  LengthDist answer{300, 0.5, 16, 2048};
  LengthDist follow_up_prompt{60, 0.8, 4, 2048};
};

/// The known workload kinds, in documentation order.
[[nodiscard]] const std::vector<std::string>& workload_kinds();
[[nodiscard]] bool is_workload_kind(std::string_view kind);
/// The defaults of a workload kind (each parameter's source is in
/// docs/replay.md). Throws ConfigError on an unknown kind.
[[nodiscard]] WorkloadParams workload_preset(std::string_view kind);

/// The most requests one workload may hold: a generated workload's expected count
/// (arrival_rate x duration_s x mean_turns), and a trace's lines. Every caller (the CLI, the
/// studies, the Python API) goes through validate() or read_trace(), so none can grow memory
/// past it (~1 KB per request in flight in the simulator).
inline constexpr double kMaxWorkloadRequests = 5e6;

/// Throws ConfigError ("workload.<field> ...") on out-of-range parameters, including an
/// expected request count above kMaxWorkloadRequests.
void validate(const WorkloadParams& params);
/// validate(params), then the requests; throws ConfigError should the draw itself exceed twice
/// kMaxWorkloadRequests (a bound on memory, not a limit a valid workload meets).
[[nodiscard]] Workload generate_workload(const WorkloadParams& params, std::uint64_t seed);

/// Latest first-turn `arrival_s` and longest follow-up `delay_s` a workload
/// may hold, in seconds (~31.7 years). Simulated time is an int64 nanosecond
/// count; this keeps every arrival, plus the longest run, far inside it.
/// Requests that arrive after [engine] max_sim_time_s are reported as never
/// arrived.
inline constexpr double kMaxEventTimeS = 1e9;

/// A trace line is malformed: what() names the file, line and field.
class TraceError : public Error {
 public:
  using Error::Error;
};

/// JSONL trace: one request object per line (docs/benchmarks.md#trace-format).
/// Blank lines and lines starting with '#' are skipped. Throws TraceError, also past
/// kMaxWorkloadRequests requests.
[[nodiscard]] Workload read_trace(std::istream& in, std::string_view source_name);
/// read_trace() of a file read as every input file is (at most 64 MiB; a directory, a failed
/// read or a FIFO nothing writes to is a TraceError naming the path).
[[nodiscard]] Workload load_trace(const std::filesystem::path& path);
void write_trace(const Workload& workload, std::ostream& out);

/// [signal_model]: synthetic per-token entropy and EAT traces.
struct SignalModelParams {
  double answer_at_min_fraction = 0.45;  ///< answer reached at U(min, max) x think_tokens
  double answer_at_max_fraction = 0.90;
  // EAT (entropy after an appended </think>), nats, sampled at probe points.
  double eat_start = 2.2;         ///< at think token 0
  double eat_at_answer = 1.0;     ///< drifting linearly to this at answer_at
  double eat_noise_median = 0.2;  ///< per-request noise sd before the answer: lognormal
  double eat_noise_sigma = 0.6;
  double eat_floor = 0.15;           ///< value it settles to once the answer is reached
  double eat_decay_tokens = 96;      ///< settling time constant
  double eat_settled_noise = 0.004;  ///< sd after the answer
  // Per-token entropy (RPDI transitions are tokens above the threshold).
  double transition_rate = 0.03;           ///< share of transition tokens in ordinary reasoning
  double overthinking_probability = 0.35;  ///< requests that loop after the answer
  double overthinking_rate = 0.25;         ///< transition share inside a loop
  double burst_probability = 0.15;         ///< requests with a legitimate exploration burst before it
  double burst_rate = 0.08;
  std::uint32_t burst_tokens = 192;
  double low_entropy_max = 1.5;         ///< ordinary tokens: U(0.05, this)
  double transition_entropy_min = 2.6;  ///< transition tokens: U(this, this + 1.5)
};

/// Throws ConfigError ("signal_model.<field> ...").
void validate(const SignalModelParams& params);

/// The signal plan of one reasoning request.
struct RequestSignals {
  std::uint64_t request = 0;
  std::uint32_t think_tokens = 0;
  std::uint32_t answer_at = 0;
  double eat_noise = 0;
  std::uint32_t loop_start = 0;   ///< overthinking loop [loop_start, think_tokens); 0 = none
  std::uint32_t burst_start = 0;  ///< exploration burst [burst_start, burst_end); 0 = none
  std::uint32_t burst_end = 0;
};

class SignalModel {
 public:
  SignalModel(const SignalModelParams& params, std::uint64_t seed);
  [[nodiscard]] RequestSignals plan(const RequestSpec& request) const;
  /// Entropy (nats) of the distribution that produced think token `t` (0-based).
  [[nodiscard]] double token_entropy(const RequestSignals& r, std::uint32_t t) const noexcept;
  /// EAT value a probe pass would measure after think token `t`.
  [[nodiscard]] double eat(const RequestSignals& r, std::uint32_t t) const noexcept;
  [[nodiscard]] const SignalModelParams& params() const noexcept { return p_; }

 private:
  SignalModelParams p_;
  std::uint64_t seed_;
};

/// Counter-based random numbers: a pure function of its inputs.
[[nodiscard]] std::uint64_t mix64(std::uint64_t x) noexcept;
/// Uniform in [0, 1) from (seed, stream, index).
[[nodiscard]] double uniform01(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) noexcept;

}  // namespace meridian::sim
