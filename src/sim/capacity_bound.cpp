// The physical upper bound on goodput (capacity_bound.h).
#include "meridian/capacity_bound.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace meridian::sim {
namespace {

constexpr double kMsPerS = 1000.0;
constexpr int kBisections = 100;

// The roofline's coefficients, read off its public interface so the bound and
// the simulator cannot drift apart: per-step fixed costs and per-unit slopes, in seconds.
struct Coefficients {
  double overhead_s = 0;     // per step
  double weight_read_s = 0;  // per step, while the linear layers are memory-bound
  double token_s = 0;        // per token, once they are compute-bound
  double kv_token_s = 0;     // per context token read
  double pair_s = 0;         // per query-key pair
  double kv_tokens = 0;      // KV capacity
};

Coefficients coefficients(const CostModelParams& params) {
  const RooflineCostModel cost(params);
  constexpr double kMany = 1e12;  // far past every roofline's knee: the slope alone
  Coefficients c;
  c.overhead_s = params.overhead_ms / kMsPerS;
  c.weight_read_s = cost.linear_ms({}) / kMsPerS;
  c.token_s = cost.linear_ms({static_cast<std::uint64_t>(kMany), 0, 0, 0}) / kMany / kMsPerS;
  c.kv_token_s = cost.attention_ms({0, static_cast<std::uint64_t>(kMany), 0, 0}) / kMany / kMsPerS;
  c.pair_s = cost.attention_ms({0, 0, kMany, 0}) / kMany / kMsPerS;
  c.kv_tokens = cost.kv_capacity_bytes() / static_cast<double>(params.kv_bytes_per_token());
  return c;
}

// GPU seconds per second at `rate` conversations/s and steps of `step_s`.
double gpu_share(const Coefficients& c, const ConversationWork& w, double rate, double step_s) {
  const double linear = std::max(c.weight_read_s / step_s, rate * w.tokens() * c.token_s);
  const double attention =
      std::max(rate * w.kv_tokens_read * c.kv_token_s, rate * w.attended_pairs * c.pair_s);
  return c.overhead_s / step_s + linear + attention;
}

// The longest step the KV capacity allows at `rate` (occupancy = rate * step * kv_token_steps), capped.
double step_at(const Coefficients& c, const ConversationWork& w, double rate, double max_step_s) {
  if (w.kv_token_steps <= 0 || rate <= 0) return max_step_s;
  return std::min(max_step_s, c.kv_tokens / (rate * w.kv_token_steps));
}

}  // namespace

ConversationWork conversation_work(const Workload& workload, const std::vector<std::uint32_t>& think_tokens) {
  ConversationWork w;
  for (const RequestSpec& r : workload.requests) {
    const std::size_t index = r.id - 1;
    const double think =
        !r.reasoning()
            ? 0.0
            : static_cast<double>(index < think_tokens.size() ? think_tokens[index] : r.think_tokens);
    // A reasoning request also emits </think>; the first generated token comes from the prefill.
    const double generated = think + (r.reasoning() ? 1.0 : 0.0) + r.answer_tokens;
    const double prompt = r.prompt_tokens;
    double cached = 0;
    if (r.after == 0) {
      w.conversations += 1;
    } else if (r.after <= workload.requests.size()) {
      const RequestSpec& prev = workload.requests[r.after - 1];
      // The previous turn's prompt and (without reasoning between them) its answer are this turn's prefix.
      const double transcript = prev.prompt_tokens + (prev.reasoning() ? 0.0 : prev.answer_tokens);
      cached = std::min(transcript, prompt - 1);
    }
    const double fresh = prompt - cached;
    w.prefill_tokens += fresh;
    w.kv_tokens_read += cached + fresh;
    w.attended_pairs += fresh * cached + fresh * (fresh + 1) / 2;
    // Decode j (1 .. generated - 1) reads the prompt and the j tokens before it, its own included.
    const double decodes = std::max(0.0, generated - 1);
    const double reads = decodes * prompt + decodes * (decodes + 1) / 2;
    w.decode_tokens += decodes;
    w.kv_tokens_read += reads;
    w.attended_pairs += reads;
    w.kv_token_steps += reads;
  }
  if (w.conversations > 0) {
    for (double* v :
         {&w.prefill_tokens, &w.decode_tokens, &w.kv_tokens_read, &w.attended_pairs, &w.kv_token_steps}) {
      *v /= w.conversations;
    }
  }
  return w;
}

CapacityBound capacity_bound(const CostModelParams& cost, const SloParams& slo,
                             const ConversationWork& work) {
  const Coefficients c = coefficients(cost);
  CapacityBound b;
  b.max_step_ms = std::max(slo.output_tpot_ms, slo.think_tpot_ms);
  const double max_step_s = b.max_step_ms / kMsPerS;
  const double marginal = work.tokens() * c.token_s +
                          std::max(work.kv_tokens_read * c.kv_token_s, work.attended_pairs * c.pair_s);
  if (!(marginal > 0)) return b;
  auto feasible = [&](double rate) {
    return gpu_share(c, work, rate, step_at(c, work, rate, max_step_s)) <= 1.0;
  };
  double lo = 0;
  double hi = 1.0 / marginal;  // the per-unit costs alone fill the GPU here
  for (int i = 0; i < kBisections; ++i) {
    const double mid = 0.5 * (lo + hi);
    (feasible(mid) ? lo : hi) = mid;
  }
  b.rate = lo;
  const double step_s = step_at(c, work, lo, max_step_s);
  b.step_ms = step_s * kMsPerS;
  b.gpu_busy_share = gpu_share(c, work, lo, step_s);
  b.kv_used_share = c.kv_tokens > 0 ? lo * step_s * work.kv_token_steps / c.kv_tokens : 0;
  b.binding = step_s < max_step_s ? "kv" : "gpu";
  return b;
}

}  // namespace meridian::sim
