// Synthetic workload generators and the signal model (sim_workload.h).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/toml_fields.h"
#include "meridian/sim_workload.h"

namespace meridian::sim {
namespace {

// Streams of the counter-based generator: one per independent quantity, so
// adding a draw never shifts another.
enum Stream : std::uint64_t {
  kArrival = 1,
  kKind,
  kTurns,
  kPrompt,
  kThink,
  kAnswer,
  kDelay,
  kAnswerAt = 16,
  kEatNoise,
  kLoop,
  kLoopStart,
  kBurst,
  kBurstStart,
  kTokenTransition = 32,
  kTokenValue,
  kEatValue,
};

double normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  // Box-Muller from two independent uniforms.
  const double u1 = std::max(uniform01(seed, stream, 2 * index), 1e-300);
  const double u2 = uniform01(seed, stream, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

std::uint32_t draw(const LengthDist& d, std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  const double x = d.median * std::exp(d.sigma * normal(seed, stream, index));
  const double clamped = std::clamp(std::round(x), static_cast<double>(d.min), static_cast<double>(d.max));
  return static_cast<std::uint32_t>(clamped);
}

std::uint32_t uniform_int(std::uint32_t lo, std::uint32_t hi, double u) {
  return lo + static_cast<std::uint32_t>(std::floor(u * (hi - lo + 1)));
}

void check(std::vector<ConfigIssue>& issues, bool ok, const std::string& path, std::string_view rule,
           double got) {
  if (!ok) issues.push_back({path, fmt::format("{} must be {}; got {}", path, rule, got), "", 0, 0});
}

void check_dist(std::vector<ConfigIssue>& issues, const LengthDist& d, std::string_view name) {
  const std::string base = fmt::format("workload.{}", name);
  check(issues, d.median >= 1 && std::isfinite(d.median), base + ".median", ">= 1", d.median);
  check(issues, d.sigma >= 0 && d.sigma <= 4, base + ".sigma", "in [0, 4]", d.sigma);
  check(issues, d.min >= 1, base + ".min", ">= 1", d.min);
  check(issues, d.max >= d.min, base + ".max", fmt::format(">= {}.min ({})", base, d.min), d.max);
}

}  // namespace

std::uint64_t mix64(std::uint64_t x) noexcept {
  // splitmix64 finaliser: a bijection with full avalanche.
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27U)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31U);
}

double uniform01(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) noexcept {
  const std::uint64_t h = mix64(mix64(seed ^ (stream * 0xd1b54a32d192ed03ULL)) ^ index);
  return static_cast<double>(h >> 11U) * 0x1.0p-53;
}

const std::vector<std::string>& workload_kinds() {
  static const std::vector<std::string> kinds = {"mixed", "seeds-mix", "long-think", "long-prompt"};
  return kinds;
}

bool is_workload_kind(std::string_view kind) {
  const auto& k = workload_kinds();
  return std::find(k.begin(), k.end(), kind) != k.end();
}

WorkloadParams workload_preset(std::string_view kind) {
  WorkloadParams p;  // mixed
  p.kind = std::string(kind);
  if (kind == "mixed" || kind == "seeds-mix") return p;
  if (kind == "long-think") {
    // AIME-class math: DeepSeek-R1 averages ~12 K tokens per AIME question
    // (R1-0528 model card), Qwen3 recommends a 32,768-token output budget
    // (38,912 for competition math): median 8 K, P95 ~17 K, capped at 32 K.
    p.arrival_rate = 0.11;  // ~80% of vllm-fcfs's sustainable goodput (docs/replay.md)
    // Hour-long requests: over two hours a slow backlog still passed for noise (goodput fell
    // 7-9 % from 7,200 to 14,400 s of arrivals), so four (docs/adr/0038).
    p.duration_s = 14400;
    p.reasoning_ratio = 0.8;
    p.mean_turns = 1.5;
    p.think = {8000, 0.45, 512, 32768};
    p.answer = {400, 0.5, 16, 4096};
    p.reasoning_prompt = {150, 0.6, 16, 4096};
    return p;
  }
  if (kind == "long-prompt") {
    // RAG and code contexts of 4-16 K tokens (P5-P95: median 8 K, sigma 0.42);
    // the Mooncake trace averages 7,590 input and 182 output tokens.
    p.arrival_rate = 0.2;  // ~75% of vllm-fcfs's sustainable goodput (docs/replay.md)
    // Over two hours `meridian` still met a rate it could not hold over four (-9 %) (docs/adr/0038).
    p.duration_s = 14400;
    p.chat_prompt = {8000, 0.42, 1024, 32768};
    p.reasoning_prompt = {8000, 0.42, 1024, 32768};
    p.chat_output = {180, 0.6, 8, 2048};
    p.follow_up_prompt = {200, 0.8, 4, 4096};
    return p;
  }
  throw ConfigError(
      {{"workload.kind",
        fmt::format("workload.kind must be one of mixed, seeds-mix, long-think, long-prompt; got \"{}\"",
                    kind),
        "", 0, 0}});
}

void validate(const WorkloadParams& p) {
  std::vector<ConfigIssue> issues;
  if (!is_workload_kind(p.kind)) {
    issues.push_back(
        {"workload.kind",
         fmt::format("workload.kind must be one of mixed, seeds-mix, long-think, long-prompt; got \"{}\"",
                     p.kind),
         "", 0, 0});
  }
  if (p.arrival_process != "poisson" && p.arrival_process != "uniform") {
    issues.push_back({"workload.arrival_process",
                      fmt::format("workload.arrival_process must be \"poisson\" or \"uniform\"; got \"{}\"",
                                  p.arrival_process),
                      "", 0, 0});
  }
  check(issues, p.arrival_rate > 0 && std::isfinite(p.arrival_rate), "workload.arrival_rate", "> 0",
        p.arrival_rate);
  check(issues, p.duration_s > 0 && std::isfinite(p.duration_s), "workload.duration_s", "> 0", p.duration_s);
  check(issues, p.reasoning_ratio >= 0 && p.reasoning_ratio <= 1, "workload.reasoning_ratio", "in [0, 1]",
        p.reasoning_ratio);
  check(issues, p.mean_turns >= 1 && p.mean_turns <= 100, "workload.mean_turns", "in [1, 100]", p.mean_turns);
  check(issues, p.turn_delay_mean_s >= 0 && std::isfinite(p.turn_delay_mean_s), "workload.turn_delay_mean_s",
        ">= 0", p.turn_delay_mean_s);
  check_dist(issues, p.chat_prompt, "chat_prompt");
  check_dist(issues, p.chat_output, "chat_output");
  check_dist(issues, p.reasoning_prompt, "reasoning_prompt");
  check_dist(issues, p.think, "think");
  check_dist(issues, p.answer, "answer");
  check_dist(issues, p.follow_up_prompt, "follow_up_prompt");
  if (issues.empty()) {
    const double turns = p.kind == "seeds-mix" ? 1.0 : p.mean_turns;  // seeds-mix has single-turn requests
    const double expected = p.arrival_rate * p.duration_s * turns;
    if (expected > kMaxWorkloadRequests) {
      issues.push_back(
          {"workload.arrival_rate",
           fmt::format("workload.arrival_rate x workload.duration_s x workload.mean_turns (the expected "
                       "request count) must be <= {:.0f}; got {:.4g} (arrival_rate = {}, duration_s = {}, "
                       "mean_turns = {})",
                       kMaxWorkloadRequests, expected, toml_fields::format_double(p.arrival_rate),
                       toml_fields::format_double(p.duration_s), toml_fields::format_double(turns)),
           "", 0, 0});
    }
  }
  if (!issues.empty()) throw ConfigError(std::move(issues));
}

Workload generate_workload(const WorkloadParams& p, std::uint64_t seed) {
  validate(p);
  Workload w;
  w.name = p.kind;
  const bool seeds_mix = p.kind == "seeds-mix";
  double t = 0;
  std::uint64_t conversation = 0;
  std::uint64_t draw_index = 0;  // one per request: every length draw of a request shares it
  for (;;) {
    const double gap =
        p.arrival_process == "uniform" ? 1.0 : -std::log(1.0 - uniform01(seed, kArrival, conversation));
    t += gap / p.arrival_rate;
    if (t >= p.duration_s) break;
    if (static_cast<double>(w.requests.size()) > 2 * kMaxWorkloadRequests) {
      throw ConfigError(
          {{"workload.arrival_rate",
            fmt::format("workload.arrival_rate: the draw exceeded {:.0f} requests", 2 * kMaxWorkloadRequests),
            "", 0, 0}});
    }
    ++conversation;
    const bool reasoning = uniform01(seed, kKind, conversation) < p.reasoning_ratio;
    std::uint32_t turns = 1;
    if (!seeds_mix && p.mean_turns > 1) {
      // 1 + geometric with mean (mean_turns - 1): P(another turn) = 1 - 1 / mean_turns.
      const double more = 1.0 - 1.0 / p.mean_turns;
      const double u = uniform01(seed, kTurns, conversation);
      turns += static_cast<std::uint32_t>(std::floor(std::log(1.0 - u) / std::log(more)));
      turns = std::min<std::uint32_t>(turns, 32);
    }
    std::uint32_t transcript = 0;  // prompt + visible answers so far (reasoning is not carried over)
    std::uint64_t previous = 0;
    for (std::uint32_t turn = 0; turn < turns; ++turn) {
      const std::uint64_t i = ++draw_index;
      RequestSpec r;
      r.id = w.requests.size() + 1;
      r.priority = reasoning ? 1 : 0;
      if (seeds_mix) {
        // The seeds' ADR-0005 ranges, uniform: chat 40-240 output tokens, reasoning 600-6000 think tokens.
        r.prompt_tokens = draw(reasoning ? p.reasoning_prompt : p.chat_prompt, seed, kPrompt, i);
        if (reasoning) {
          r.think_tokens = uniform_int(600, 6000, uniform01(seed, kThink, i));
          r.answer_tokens = draw(p.answer, seed, kAnswer, i);
        } else {
          r.answer_tokens = uniform_int(40, 240, uniform01(seed, kAnswer, i));
        }
      } else {
        const std::uint32_t user =
            draw(turn == 0 ? (reasoning ? p.reasoning_prompt : p.chat_prompt) : p.follow_up_prompt, seed,
                 kPrompt, i);
        r.prompt_tokens = transcript + user;
        if (reasoning) {
          r.think_tokens = draw(p.think, seed, kThink, i);
          r.answer_tokens = draw(p.answer, seed, kAnswer, i);
        } else {
          r.answer_tokens = draw(p.chat_output, seed, kAnswer, i);
        }
      }
      if (turns > 1) {
        r.conversation = conversation;
        r.turn = turn;
      }
      if (turn == 0) {
        r.arrival_s = t;
      } else {
        r.after = previous;
        r.delay_s = -std::log(1.0 - uniform01(seed, kDelay, i)) * p.turn_delay_mean_s;
      }
      transcript = r.prompt_tokens + r.answer_tokens;
      previous = r.id;
      w.requests.push_back(r);
    }
  }
  return w;
}

void validate(const SignalModelParams& p) {
  std::vector<ConfigIssue> issues;
  auto prob = [&](std::string_view f, double v) {
    check(issues, v >= 0 && v <= 1, fmt::format("signal_model.{}", f), "in [0, 1]", v);
  };
  auto nonneg = [&](std::string_view f, double v) {
    check(issues, v >= 0 && std::isfinite(v), fmt::format("signal_model.{}", f), ">= 0", v);
  };
  prob("answer_at_min_fraction", p.answer_at_min_fraction);
  prob("answer_at_max_fraction", p.answer_at_max_fraction);
  check(issues, p.answer_at_max_fraction >= p.answer_at_min_fraction, "signal_model.answer_at_max_fraction",
        ">= signal_model.answer_at_min_fraction", p.answer_at_max_fraction);
  nonneg("eat_start", p.eat_start);
  nonneg("eat_at_answer", p.eat_at_answer);
  nonneg("eat_noise_median", p.eat_noise_median);
  nonneg("eat_noise_sigma", p.eat_noise_sigma);
  nonneg("eat_floor", p.eat_floor);
  check(issues, p.eat_decay_tokens > 0, "signal_model.eat_decay_tokens", "> 0", p.eat_decay_tokens);
  nonneg("eat_settled_noise", p.eat_settled_noise);
  prob("transition_rate", p.transition_rate);
  prob("overthinking_probability", p.overthinking_probability);
  prob("overthinking_rate", p.overthinking_rate);
  prob("burst_probability", p.burst_probability);
  prob("burst_rate", p.burst_rate);
  nonneg("low_entropy_max", p.low_entropy_max);
  check(issues, p.transition_entropy_min > p.low_entropy_max, "signal_model.transition_entropy_min",
        "> signal_model.low_entropy_max", p.transition_entropy_min);
  if (!issues.empty()) throw ConfigError(std::move(issues));
}

SignalModel::SignalModel(const SignalModelParams& params, std::uint64_t seed) : p_(params), seed_(seed) {
  validate(p_);
}

RequestSignals SignalModel::plan(const RequestSpec& request) const {
  RequestSignals s;
  s.request = request.id;
  s.think_tokens = request.think_tokens;
  if (request.think_tokens == 0) return s;
  const std::uint64_t id = request.id;
  const double n = request.think_tokens;
  if (request.answer_at > 0) {
    s.answer_at = std::min(request.answer_at, request.think_tokens);
  } else {
    const double f = p_.answer_at_min_fraction + (p_.answer_at_max_fraction - p_.answer_at_min_fraction) *
                                                     uniform01(seed_, kAnswerAt, id);
    s.answer_at = std::max<std::uint32_t>(1, static_cast<std::uint32_t>(std::round(f * n)));
  }
  s.eat_noise = p_.eat_noise_median * std::exp(p_.eat_noise_sigma * normal(seed_, kEatNoise, id));
  const std::uint32_t after_answer = request.think_tokens - s.answer_at;
  if (after_answer > 0 && uniform01(seed_, kLoop, id) < p_.overthinking_probability) {
    // The loop starts somewhere in the first half of the post-answer stretch.
    s.loop_start =
        s.answer_at + static_cast<std::uint32_t>(uniform01(seed_, kLoopStart, id) * after_answer / 2);
  }
  if (s.answer_at > p_.burst_tokens && uniform01(seed_, kBurst, id) < p_.burst_probability) {
    const double u = 0.2 + 0.6 * uniform01(seed_, kBurstStart, id);
    s.burst_start =
        std::max<std::uint32_t>(1, static_cast<std::uint32_t>(u * (s.answer_at - p_.burst_tokens)));
    s.burst_end = s.burst_start + p_.burst_tokens;
  }
  return s;
}

double SignalModel::token_entropy(const RequestSignals& r, std::uint32_t t) const noexcept {
  double rate = p_.transition_rate;
  if (r.loop_start > 0 && t >= r.loop_start) {
    rate = p_.overthinking_rate;
  } else if (t >= r.burst_start && t < r.burst_end) {
    rate = p_.burst_rate;
  }
  const std::uint64_t stream = r.request << 20U;
  const double v = uniform01(seed_, kTokenValue + stream, t);
  if (uniform01(seed_, kTokenTransition + stream, t) < rate) return p_.transition_entropy_min + 1.5 * v;
  return 0.05 + (p_.low_entropy_max - 0.05) * v;
}

double SignalModel::eat(const RequestSignals& r, std::uint32_t t) const noexcept {
  const double z = normal(seed_, kEatValue + (r.request << 20U), t);
  if (t < r.answer_at) {
    // Still searching: a drifting mean with per-request noise.
    const double progress = static_cast<double>(t) / r.answer_at;
    const double mean = p_.eat_start + (p_.eat_at_answer - p_.eat_start) * progress;
    return std::max(0.0, mean + r.eat_noise * z);
  }
  // Answer found: the distribution after </think> sharpens and settles.
  const auto since = static_cast<double>(t - r.answer_at);
  const double mean =
      p_.eat_floor + (p_.eat_at_answer - p_.eat_floor) * std::exp(-since / p_.eat_decay_tokens);
  return std::max(0.0, mean + p_.eat_settled_noise * z);
}

}  // namespace meridian::sim
