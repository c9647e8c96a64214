#include "config/schema.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace meridian::config_schema {
namespace {

constexpr double kU32Max = static_cast<double>(std::numeric_limits<std::uint32_t>::max());

constexpr NumericRange positive() noexcept { return {Bound{0, true}, std::nullopt}; }
constexpr NumericRange at_least(double v) noexcept { return {Bound{v, false}, std::nullopt}; }
constexpr NumericRange greater_than(double v) noexcept { return {Bound{v, true}, std::nullopt}; }
constexpr NumericRange none() noexcept { return {}; }

// Enum fields: the values in the order error messages list them; their TOML
// spellings come from to_string(), the one enum-to-string mapping.
constexpr std::array kFabricKinds{FabricKind::kNone, FabricKind::kNixl, FabricKind::kMooncake};
constexpr std::array kParsers{ReasoningParser::kQwen3, ReasoningParser::kDeepSeekR1,
                              ReasoningParser::kGranite};

template <class E, std::size_t N>
std::array<std::string_view, N> spellings(const std::array<E, N>& values) noexcept {
  std::array<std::string_view, N> names{};
  for (std::size_t i = 0; i < N; ++i) names[i] = to_string(values[i]);
  return names;
}

const std::array<std::string_view, 3> kFabricChoices = spellings(kFabricKinds);
const std::array<std::string_view, 3> kParserChoices = spellings(kParsers);
constexpr std::array<std::string_view, 6> kLevelChoices{"trace", "debug", "info", "warn", "error", "off"};

using SC = SchedulerConfig;
constexpr std::array<Field<SC>, 16> kScheduler{{
    {"think_tpot_budget_ms",
     &SC::think_tpot_budget_ms,
     positive(),
     {},
     "TPOT budget for think-phase tokens (ms)"},
    {"output_tpot_budget_ms",
     &SC::output_tpot_budget_ms,
     positive(),
     {},
     "TPOT budget for output-phase tokens (ms)"},
    {"think_batch_multiplier",
     &SC::think_batch_multiplier,
     at_least(1.0),
     {},
     "think batch as a multiple of the output batch token budget"},
    {"max_think_tokens",
     &SC::max_think_tokens,
     none(),
     {},
     "hard cap on think tokens per request (must be > min_think_tokens)"},
    {"min_think_tokens",
     &SC::min_think_tokens,
     none(),
     {},
     "no budget forcing before this many think tokens (must be < max_think_tokens)"},
    {"force_reissue_grace_steps",
     &SC::force_reissue_grace_steps,
     {Bound{1, false}, Bound{kU32Max, false}},
     {},
     "steps a forced </think> may take to land before it is re-issued"},
    {"reap_idle_after_s",
     &SC::reap_idle_after_s,
     positive(),
     {},
     "router state of a request idle this long (s) is reaped"},
    {"min_prefill_tokens_per_step",
     &SC::min_prefill_tokens_per_step,
     {Bound{0, false}, Bound{kU32Max, false}},
     {},
     "prefill tokens granted every step even while the output SLO binds"},
    {"preemption_enabled", &SC::preemption_enabled, none(), {}, "phase-aware preemption on"},
    {"preempt_max_fraction",
     &SC::preempt_max_fraction,
     {Bound{0, true}, Bound{1, false}},
     {},
     "at most this fraction of the running set is preempted per step"},
    {"preempt_readmit_guard_steps",
     &SC::preempt_readmit_guard_steps,
     {Bound{0, false}, Bound{kU32Max, false}},
     {},
     "steps a re-admitted request cannot be preempted (times its preemption count)"},
    {"step_cost_base_ms", &SC::step_cost_base_ms, positive(), {}, "fixed cost of one engine step (ms)"},
    {"step_cost_per_token_ms",
     &SC::step_cost_per_token_ms,
     at_least(0.0),
     {},
     "cost of each scheduled token (ms)"},
    {"step_cost_per_kv_token_us",
     &SC::step_cost_per_kv_token_us,
     at_least(0.0),
     {},
     "cost of each context token read by attention (us)"},
    {"step_cost_online", &SC::step_cost_online, none(), {}, "learn step-cost coefficients online"},
    {"step_cost_forgetting_factor",
     &SC::step_cost_forgetting_factor,
     {Bound{0, true}, Bound{1, false}},
     {},
     "recursive-least-squares forgetting factor"},
}};

using EC = EntropyConfig;
constexpr std::array<Field<EC>, 9> kEntropy{{
    {"enabled", &EC::enabled, none(), {}, "entropy-driven forcing on (false: hard cap only)"},
    {"ema_alpha", &EC::ema_alpha, {Bound{0, true}, Bound{1, false}}, {}, "EMA decay of EAT samples"},
    {"rpdi_threshold",
     &EC::rpdi_threshold,
     greater_than(1.0),
     {},
     "overthinking when RPDI local/global exceeds this"},
    {"eat_ema_variance_threshold",
     &EC::eat_ema_variance_threshold,
     positive(),
     {},
     "converged when the EAT EMA variance drops below this (nats^2)"},
    {"transition_entropy_threshold",
     &EC::transition_entropy_threshold,
     positive(),
     {},
     "a think token above this entropy (nats) is an RPDI transition"},
    {"eat_probe_interval_tokens",
     &EC::eat_probe_interval_tokens,
     {Bound{1, false}, Bound{kU32Max, false}},
     {},
     "EAT is sampled every N think tokens"},
    {"eat_min_samples",
     &EC::eat_min_samples,
     {Bound{2, false}, Bound{kU32Max, false}},
     {},
     "EAT samples needed before convergence can be declared"},
    {"rpdi_window_tokens",
     &EC::rpdi_window_tokens,
     {Bound{1, false}, Bound{kU32Max, false}},
     {},
     "sampled think tokens in the RPDI local window"},
    {"rpdi_min_samples",
     &EC::rpdi_min_samples,
     {Bound{1, false}, Bound{kU32Max, false}},
     {},
     "sampled think tokens needed before overthinking can be declared"},
}};

using KC = KvMemoryConfig;
constexpr std::array<Field<KC>, 5> kKvMemory{{
    {"aggressive_think_eviction",
     &KC::aggressive_think_eviction,
     none(),
     {},
     "free ThinkComplete blocks at </think> (accuracy risk)"},
    {"think_phase_memory_fraction",
     &KC::think_phase_memory_fraction,
     {Bound{0, true}, Bound{1, true}},
     {},
     "fraction of KV capacity think-phase blocks may hold"},
    {"block_size_bytes", &KC::block_size_bytes, positive(), {}, "bytes per KV block"},
    {"block_tokens",
     &KC::block_tokens,
     {Bound{1, false}, Bound{kU32Max, false}},
     {},
     "tokens per KV block (vLLM block_size)"},
    {"capacity_bytes",
     &KC::capacity_bytes,
     positive(),
     {},
     "total KV budget in bytes, or \"auto\" (85% of device memory)"},
}};

using DC = DisaggConfig;
constexpr std::array<Field<DC>, 3> kDisagg{{
    {"enabled", &DC::enabled, none(), {}, "disaggregated KV transfer on"},
    {"fabric", &DC::fabric, none(), {}, "\"nixl\", \"mooncake\" or \"none\""},
    {"offload_threshold_blocks",
     &DC::offload_threshold_blocks,
     {Bound{1, false}, Bound{kU32Max, false}},
     {},
     "ThinkComplete blocks batched per offload"},
}};

using TC = TelemetryConfig;
constexpr std::array<Field<TC>, 6> kTelemetry{{
    {"prometheus_enabled", &TC::prometheus_enabled, none(), {}, "serve /metrics over HTTP"},
    {"prometheus_host", &TC::prometheus_host, none(), {}, "address the metrics endpoint binds"},
    {"prometheus_port",
     &TC::prometheus_port,
     {Bound{1, false}, Bound{65535, false}},
     {},
     "port the metrics endpoint binds"},
    {"otlp_enabled", &TC::otlp_enabled, none(), {}, "export spans/metrics over OTLP/HTTP"},
    {"otlp_endpoint", &TC::otlp_endpoint, none(), {}, "OTLP/HTTP collector URL"},
    {"service_name", &TC::service_name, none(), {}, "OpenTelemetry service.name"},
}};

using LC = LoggingConfig;
constexpr std::array<Field<LC>, 1> kLogging{{
    {"level", &LC::level, none(), kLevelChoices, "log level"},
}};

using MC = ModelConfig;
constexpr std::array<Field<MC>, 9> kModel{{
    {"reasoning_parser",
     &MC::reasoning_parser,
     none(),
     {},
     "\"qwen3\", \"deepseek_r1\" (token ids) or \"granite\" (prose markers)"},
    {"think_start_token_ids", &MC::think_start_token_ids, none(), {}, "ids that open a think block"},
    {"think_end_token_ids", &MC::think_end_token_ids, none(), {}, "ids that close a think block"},
    {"eos_token_ids", &MC::eos_token_ids, none(), {}, "end-of-sequence ids (engine may add more)"},
    {"tool_call_start_token_ids",
     &MC::tool_call_start_token_ids,
     none(),
     {},
     "ids that open a tool call (no forcing inside)"},
    {"tool_call_end_token_ids", &MC::tool_call_end_token_ids, none(), {}, "ids that close a tool call"},
    {"think_start_markers", &MC::think_start_markers, none(), {}, "prose that opens the reasoning (granite)"},
    {"think_end_markers", &MC::think_end_markers, none(), {}, "prose that opens the answer (granite)"},
    {"supports_think_disable",
     &MC::supports_think_disable,
     none(),
     {},
     "model honours /no_think and enable_thinking=False"},
}};

}  // namespace

std::span<const Field<SchedulerConfig>> scheduler_fields() { return kScheduler; }
std::span<const Field<EntropyConfig>> entropy_fields() { return kEntropy; }
std::span<const Field<KvMemoryConfig>> kv_memory_fields() { return kKvMemory; }
std::span<const Field<DisaggConfig>> disagg_fields() { return kDisagg; }
std::span<const Field<TelemetryConfig>> telemetry_fields() { return kTelemetry; }
std::span<const Field<LoggingConfig>> logging_fields() { return kLogging; }
std::span<const Field<ModelConfig>> model_fields() { return kModel; }

std::vector<std::string_view> section_names() {
  return {"scheduler", "entropy", "kv_memory", "disagg", "telemetry", "logging", "model"};
}

Choices fabric_choices() { return kFabricChoices; }
Choices reasoning_parser_choices() { return kParserChoices; }
std::span<const FabricKind> fabric_values() { return kFabricKinds; }
std::span<const ReasoningParser> reasoning_parser_values() { return kParsers; }
Choices log_level_choices() { return kLevelChoices; }

std::string format_double(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  std::array<char, 64> buf{};
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), value);
  std::string out(buf.data(), end);
  if (out.find_first_of(".eE") == std::string::npos) out += ".0";
  return out;
}

std::string describe_range(const NumericRange& range) {
  const auto num = [](double v) {
    // Integral bounds print without a fraction ("> 0", not "> 0.0").
    if (std::floor(v) == v && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<long long>(v));
    return format_double(v);
  };
  if (range.lo && range.hi) {
    return fmt::format("must be in {}{}, {}{}", range.lo->open ? "(" : "[", num(range.lo->value),
                       num(range.hi->value), range.hi->open ? ")" : "]");
  }
  if (range.lo) return fmt::format("must be {} {}", range.lo->open ? ">" : ">=", num(range.lo->value));
  if (range.hi) return fmt::format("must be {} {}", range.hi->open ? "<" : "<=", num(range.hi->value));
  return {};
}

bool in_range(const NumericRange& range, double value) {
  // Written so that NaN fails every bounded check.
  if (range.lo) {
    const bool ok = range.lo->open ? value > range.lo->value : value >= range.lo->value;
    if (!ok) return false;
  }
  if (range.hi) {
    const bool ok = range.hi->open ? value < range.hi->value : value <= range.hi->value;
    if (!ok) return false;
  }
  return true;
}

std::optional<std::string_view> closest_key(std::string_view key, std::span<const std::string_view> known) {
  const auto distance = [](std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      std::size_t diag = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= b.size(); ++j) {
        const std::size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0U : 1U)});
        diag = up;
      }
    }
    return row[b.size()];
  };
  std::optional<std::string_view> best;
  std::size_t best_distance = std::max<std::size_t>(3, key.size() / 3) + 1;
  for (std::string_view candidate : known) {
    const std::size_t d = distance(key, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  if (best || key.size() < 4) return best;
  // Abbreviations ("capacity" for "capacity_bytes"): the key's characters
  // appear in order in the candidate.
  const auto is_subsequence = [](std::string_view small, std::string_view large) {
    std::size_t i = 0;
    for (char c : large) {
      if (i < small.size() && small[i] == c) ++i;
    }
    return i == small.size();
  };
  best_distance = std::numeric_limits<std::size_t>::max();
  for (std::string_view candidate : known) {
    if (!is_subsequence(key, candidate)) continue;
    const std::size_t d = distance(key, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

}  // namespace meridian::config_schema
