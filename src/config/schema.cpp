#include "config/schema.h"

#include <algorithm>
#include <array>
#include <limits>

namespace meridian::config_schema {
namespace {

constexpr double kU32Max = static_cast<double>(std::numeric_limits<std::uint32_t>::max());

constexpr NumericRange positive() noexcept { return {Bound{0, true}, std::nullopt}; }
constexpr NumericRange greater_than(double v) noexcept { return {Bound{v, true}, std::nullopt}; }
constexpr NumericRange none() noexcept { return {}; }
// Upper bounds keep the float -> integer conversions downstream defined
// (milliseconds -> nanoseconds, multiplier x batch -> token count) and the
// engine responsive; they sit far above any sensible setting.
constexpr NumericRange up_to(double lo, bool lo_open, double hi) noexcept {
  return {Bound{lo, lo_open}, Bound{hi, false}};
}
constexpr double kMaxTpotBudgetMs = 60000;           // a minute per token
constexpr double kMaxFirstTokenBudgetMs = 86400000;  // a day
constexpr double kMaxReapIdleS = 1e6;                // ~11.6 days
constexpr double kMaxBatchMultiplier = 100;          // multiplier x output batch stays a 32-bit token count
constexpr double kMaxStepBaseMs = 10000;             // ten seconds for an empty step
constexpr double kMaxStepPerTokenMs = 1000;          // one second per scheduled token
constexpr double kMaxStepPerKvTokenUs = 1000;        // one millisecond per context token

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
constexpr std::array<std::string_view, 2> kLogFormatChoices{"text", "json"};

using SC = SchedulerConfig;
constexpr std::array<Field<SC>, 19> kScheduler{{
    {"think_tpot_budget_ms",
     &SC::think_tpot_budget_ms,
     up_to(0, true, kMaxTpotBudgetMs),
     {},
     "TPOT budget for think-phase tokens (ms)"},
    {"output_tpot_budget_ms",
     &SC::output_tpot_budget_ms,
     up_to(0, true, kMaxTpotBudgetMs),
     {},
     "TPOT budget for output-phase tokens (ms)"},
    {"ttft_slo_ms",
     &SC::ttft_slo_ms,
     up_to(0, true, kMaxFirstTokenBudgetMs),
     {},
     "time-to-first-token budget (ms): a prompt waiting half of it may pause thinking"},
    {"ttfv_slo_ms",
     &SC::ttfv_slo_ms,
     up_to(0, false, kMaxFirstTokenBudgetMs),
     {},
     "time-to-first-answer-token budget of reasoning requests (ms); 0: none"},
    {"ttft_triage",
     &SC::ttft_triage,
     none(),
     {},
     "new prompts that can no longer meet ttft_slo_ms are prefilled after those that still can"},
    {"think_batch_multiplier",
     &SC::think_batch_multiplier,
     up_to(1, false, kMaxBatchMultiplier),
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
     up_to(0, true, kMaxReapIdleS),
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
    {"step_cost_base_ms",
     &SC::step_cost_base_ms,
     up_to(0, true, kMaxStepBaseMs),
     {},
     "fixed cost of one engine step (ms)"},
    {"step_cost_per_token_ms",
     &SC::step_cost_per_token_ms,
     up_to(0, false, kMaxStepPerTokenMs),
     {},
     "cost of each scheduled token (ms)"},
    {"step_cost_per_kv_token_us",
     &SC::step_cost_per_kv_token_us,
     up_to(0, false, kMaxStepPerKvTokenUs),
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
constexpr std::array<Field<DC>, 5> kDisagg{{
    {"enabled", &DC::enabled, none(), {}, "disaggregated KV transfer on"},
    {"fabric", &DC::fabric, none(), {}, "\"nixl\", \"mooncake\" or \"none\""},
    {"offload_threshold_blocks",
     &DC::offload_threshold_blocks,
     {Bound{1, false}, Bound{kU32Max, false}},
     {},
     "ThinkComplete blocks batched per offload"},
    {"max_inflight_batches",
     &DC::max_inflight_batches,
     {Bound{1, false}, Bound{kU32Max, false}},
     {},
     "offload batches in flight before falling back to local eviction"},
    {"transfer_timeout_ms",
     &DC::transfer_timeout_ms,
     {Bound{1, false}, Bound{kU32Max, false}},
     {},
     "an offload not committed within this many ms has failed"},
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
constexpr std::array<Field<LC>, 2> kLogging{{
    {"level", &LC::level, none(), kLevelChoices, "log level"},
    {"format", &LC::format, none(), kLogFormatChoices, "log line format: text or one JSON object per line"},
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
Choices log_format_choices() { return kLogFormatChoices; }

std::optional<std::string> model_name_problem(std::string_view name) {
  if (name.empty() || name.size() > kMaxModelNameBytes) {
    return "a model name must be 1 to " + std::to_string(kMaxModelNameBytes) + " bytes long; got " +
           std::to_string(name.size());
  }
  const bool plain = std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
  if (!plain) return std::string("a model name may contain only letters, digits, '_' and '-'");
  return std::nullopt;
}

}  // namespace meridian::config_schema
