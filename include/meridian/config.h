// meridian.toml: the one configuration schema shared by the C++ core, the CLI
// and the Python package (through the bindings; there is no second parser).
//
// Loading overlays a file on the defaults: every table and every field is
// optional, and a [model.<name>] table for a built-in preset overlays that
// preset field by field. Unknown keys, wrong types, out-of-range values and
// cross-field violations are all reported at once as a ConfigError whose
// issues name the dotted path of each offending field.
//
// Thread-safety: MeridianConfig and its sections are plain values. Concurrent
// reads of one instance are safe; writes need external synchronisation. The
// free functions are reentrant.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meridian/error.h"

namespace meridian {

/// [scheduler]: dual-queue policy, think-token bounds and phase-router timing.
struct SchedulerConfig {
  double think_tpot_budget_ms = 80.0;           ///< > 0; TPOT budget for think-phase tokens.
  double output_tpot_budget_ms = 20.0;          ///< > 0; TPOT budget for output-phase tokens.
  double ttft_slo_ms = 1000.0;                  ///< > 0; time-to-first-token budget (ADR-0027).
  double ttfv_slo_ms = 0.0;                     ///< >= 0; time-to-first-answer budget, 0: none.
  bool ttft_triage = true;                      ///< prompts that cannot meet ttft_slo_ms yield (ADR-0028).
  double think_batch_multiplier = 2.5;          ///< >= 1; think batch as a multiple of the output budget.
  std::uint64_t max_think_tokens = 32768;       ///< > min_think_tokens; hard cap (a guarantee).
  std::uint64_t min_think_tokens = 512;         ///< < max_think_tokens; nothing forces before this.
  std::uint32_t force_reissue_grace_steps = 1;  ///< >= 1; steps a forced </think> may take to land.
  double reap_idle_after_s = 60.0;              ///< > 0; router state idle this long is reaped.
  std::uint32_t min_prefill_tokens_per_step = 256;  ///< prefill always progresses by this much.
  bool preemption_enabled = true;                   ///< phase-aware preemption (ADR-0008 design).
  double preempt_max_fraction = 0.125;              ///< (0, 1]; victims per step / running set.
  std::uint32_t preempt_readmit_guard_steps = 8;    ///< steps a re-admitted request is immune.
  double step_cost_base_ms = 6.0;                   ///< > 0; fixed cost of one engine step.
  double step_cost_per_token_ms = 0.03;             ///< >= 0; per scheduled token.
  double step_cost_per_kv_token_us = 0.044;         ///< >= 0; per context token read.
  bool step_cost_online = true;                     ///< learn the coefficients from step times.
  double step_cost_forgetting_factor = 0.98;        ///< (0, 1]; RLS forgetting factor.

  friend bool operator==(const SchedulerConfig&, const SchedulerConfig&) = default;
};

/// [entropy]: entropy probe and convergence / overthinking thresholds.
struct EntropyConfig {
  bool enabled = true;                           ///< false: hard-cap forcing only.
  double ema_alpha = 0.2;                        ///< (0, 1]; ADR-0016 (the seeds: 0.05)
  double rpdi_threshold = 5.0;                   ///< > 1; ADR-0016 (the seeds: 3.0)
  double eat_ema_variance_threshold = 0.001;     ///< > 0 (nats^2)
  double transition_entropy_threshold = 2.5;     ///< > 0 (nats)
  std::uint32_t eat_probe_interval_tokens = 16;  ///< >= 1; ADR-0016 (the seeds: 32)
  std::uint32_t eat_min_samples = 16;            ///< >= 2; EAT samples before convergence can fire
  std::uint32_t rpdi_window_tokens = 128;        ///< >= 1; sampled think tokens in the local window
  std::uint32_t rpdi_min_samples = 512;          ///< >= rpdi_window_tokens; before overthinking can fire

  friend bool operator==(const EntropyConfig&, const EntropyConfig&) = default;
};

/// [kv_memory]: phase-aware KV block manager policy.
struct KvMemoryConfig {
  bool aggressive_think_eviction = false;
  double think_phase_memory_fraction = 0.40;  ///< (0, 1)
  std::uint64_t block_size_bytes = 16384;     ///< > 0
  std::uint32_t block_tokens = 16;            ///< >= 1; tokens one block holds (vLLM block_size).
  /// Total KV budget in bytes; std::nullopt means "auto" (85% of device memory,
  /// resolved at engine start by resolve_capacity_bytes()).
  std::optional<std::uint64_t> capacity_bytes;

  /// The capacity to use on a device with `device_total_bytes` of memory.
  [[nodiscard]] std::uint64_t resolve_capacity_bytes(std::uint64_t device_total_bytes) const;

  friend bool operator==(const KvMemoryConfig&, const KvMemoryConfig&) = default;
};

/// Disaggregated KV transport selected by [disagg] fabric.
enum class FabricKind : std::uint8_t { kNone, kNixl, kMooncake };

/// [disagg]: disaggregated KV transfer (ADR-0006 of the original design).
struct DisaggConfig {
  bool enabled = false;
  FabricKind fabric = FabricKind::kNone;       ///< must not be kNone when enabled
  std::uint32_t offload_threshold_blocks = 4;  ///< >= 1
  std::uint32_t max_inflight_batches = 4;      ///< >= 1: offload batches not yet committed
  std::uint32_t transfer_timeout_ms = 2000;    ///< >= 1: an uncommitted push older than this failed

  friend bool operator==(const DisaggConfig&, const DisaggConfig&) = default;
};

/// [telemetry]: Prometheus exposition and OpenTelemetry export.
struct TelemetryConfig {
  bool prometheus_enabled = true;
  std::string prometheus_host = "127.0.0.1";
  std::uint32_t prometheus_port = 9464;  ///< [1, 65535]
  bool otlp_enabled = false;
  std::string otlp_endpoint = "http://localhost:4318";  ///< http(s) URL
  std::string service_name = "meridian";                ///< non-empty

  friend bool operator==(const TelemetryConfig&, const TelemetryConfig&) = default;
};

/// [logging]
struct LoggingConfig {
  std::string level = "info";   ///< trace | debug | info | warn | error | off
  std::string format = "text";  ///< text | json (one JSON object per line)

  friend bool operator==(const LoggingConfig&, const LoggingConfig&) = default;
};

/// How a model marks the think/answer boundary.
enum class ReasoningParser : std::uint8_t {
  kDeepSeekR1,  ///< token ids (<think> may be opened by the chat template)
  kQwen3,       ///< token ids
  kGranite,     ///< prose markers, matched on decoded text
};

/// [model.<name>]: per-model boundary configuration.
struct ModelConfig {
  std::string name;  ///< the <name> of the table
  ReasoningParser reasoning_parser = ReasoningParser::kQwen3;
  std::vector<std::uint32_t> think_start_token_ids;
  std::vector<std::uint32_t> think_end_token_ids;
  std::vector<std::uint32_t> eos_token_ids;  ///< the engine may add its own at run time
  std::vector<std::uint32_t> tool_call_start_token_ids;
  std::vector<std::uint32_t> tool_call_end_token_ids;
  std::vector<std::string> think_start_markers;  ///< prose markers (granite)
  std::vector<std::string> think_end_markers;    ///< prose markers (granite)
  bool supports_think_disable = false;           ///< honours /no_think, enable_thinking=False

  friend bool operator==(const ModelConfig&, const ModelConfig&) = default;
};

/// The whole resolved configuration: defaults, overlaid by zero or more files.
struct MeridianConfig {
  SchedulerConfig scheduler;
  EntropyConfig entropy;
  KvMemoryConfig kv_memory;
  DisaggConfig disagg;
  TelemetryConfig telemetry;
  LoggingConfig logging;
  /// Every model known: the built-in presets plus any [model.<name>] tables.
  std::map<std::string, ModelConfig, std::less<>> models;

  /// Defaults with the built-in model presets (models/*.toml, compiled in).
  static MeridianConfig defaults();

  /// The model named `name`; throws ConfigError ("model.<name> is not defined ...").
  [[nodiscard]] const ModelConfig& model(std::string_view name) const;

  friend bool operator==(const MeridianConfig&, const MeridianConfig&) = default;
};

/// Overlay the TOML document `toml_text` on `config` in place. `source_name`
/// appears in issue locations. Throws ConfigError listing every problem; on
/// error `config` is left unchanged.
void overlay_config(MeridianConfig& config, std::string_view toml_text,
                    std::string_view source_name = "<string>");

/// Defaults overlaid by `toml_text`, validated.
[[nodiscard]] MeridianConfig parse_config(std::string_view toml_text,
                                          std::string_view source_name = "<string>");

/// Defaults overlaid by each file in order (later files win), validated.
/// Throws ConfigError if a file cannot be read or is invalid.
[[nodiscard]] MeridianConfig load_config(const std::vector<std::filesystem::path>& files);
[[nodiscard]] MeridianConfig load_config(const std::filesystem::path& file);

/// Range and cross-field checks on a (possibly hand-built) config. Returns
/// every issue found; empty means valid.
[[nodiscard]] std::vector<ConfigIssue> validate(const MeridianConfig& config);

/// Throws ConfigError if validate() finds anything.
void validate_or_throw(const MeridianConfig& config);

/// The same checks for one section on its own, for components that are
/// given just that section (issues keep their dotted paths, "scheduler.…",
/// "model.<name>.…"). Throw ConfigError if anything is found.
void validate_or_throw(const SchedulerConfig& scheduler);
void validate_or_throw(const EntropyConfig& entropy);
void validate_or_throw(const KvMemoryConfig& kv_memory);
void validate_or_throw(const ModelConfig& model);

/// The config as a TOML document (every field, schema order) that
/// parse_config() reads back to an equal config. With `only_model`, the
/// [model] section holds just that model.
[[nodiscard]] std::string to_toml(const MeridianConfig& config,
                                  std::optional<std::string_view> only_model = std::nullopt);

/// The config as a JSON object with the same shape as to_toml().
[[nodiscard]] std::string to_json(const MeridianConfig& config,
                                  std::optional<std::string_view> only_model = std::nullopt);

/// Where a config is looked for when none is given: $MERIDIAN_CONFIG, then
/// ./meridian.toml, then $XDG_CONFIG_HOME (or ~/.config)/meridian/meridian.toml.
[[nodiscard]] std::optional<std::filesystem::path> find_default_config_file();

/// Every dotted field path of the schema ("scheduler.max_think_tokens", ...,
/// "model.<name>.think_end_token_ids"), in schema order.
[[nodiscard]] std::vector<std::string> config_field_paths();

/// Names of the built-in model presets (qwen3, deepseek_r1, ...).
[[nodiscard]] std::vector<std::string> builtin_model_presets();

/// String forms used in TOML ("nixl", "qwen3", ...).
[[nodiscard]] std::string_view to_string(FabricKind fabric) noexcept;
[[nodiscard]] std::string_view to_string(ReasoningParser parser) noexcept;

/// True when the prompt text switches thinking off with Qwen3's soft switch:
/// the last of "/think" and "/no_think" in the text is "/no_think".
[[nodiscard]] bool prompt_disables_thinking(std::string_view prompt_text) noexcept;

}  // namespace meridian
