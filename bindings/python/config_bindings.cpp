// Python view of meridian.toml: the C++ structs, parsed and validated by the
// C++ schema (there is no Python-side parser).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "meridian/config.h"
#include "meridian/error.h"
#include "meridian/net_address.h"
#include "meridian/tokenizer_vocab.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace meridian::python {
namespace {

/// `MeridianConfig.model`: the config's models as a read-only mapping that is
/// also callable, so both `cfg.model("qwen3")` (ValueError when undefined) and
/// the seeds' `cfg.model["qwen3"]` (KeyError) work. A live view: it borrows
/// the config, which the property keeps alive; values are copies. Like the
/// config, not for use while another thread mutates it.
struct ModelMap {
  const MeridianConfig* config;

  [[nodiscard]] std::string key(nb::handle name) const {
    if (!nb::isinstance<nb::str>(name)) {
      throw nb::type_error(
          fmt::format("MeridianConfig.model: model names are str; got {}", nb::inst_name(name).c_str())
              .c_str());
    }
    return nb::cast<std::string>(name);
  }
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, model] : config->models) out.push_back(name);
    return out;
  }
};

}  // namespace

void bind_config(nb::module_& m) {
  nb::enum_<FabricKind>(m, "FabricKind")
      .value("NONE", FabricKind::kNone)
      .value("NIXL", FabricKind::kNixl)
      .value("MOONCAKE", FabricKind::kMooncake);
  nb::enum_<ReasoningParser>(m, "ReasoningParser")
      .value("QWEN3", ReasoningParser::kQwen3)
      .value("DEEPSEEK_R1", ReasoningParser::kDeepSeekR1)
      .value("GRANITE", ReasoningParser::kGranite);

  nb::class_<SchedulerConfig>(m, "SchedulerConfig")
      .def(nb::init<>())
      .def_rw("think_tpot_budget_ms", &SchedulerConfig::think_tpot_budget_ms)
      .def_rw("output_tpot_budget_ms", &SchedulerConfig::output_tpot_budget_ms)
      .def_rw("ttft_slo_ms", &SchedulerConfig::ttft_slo_ms)
      .def_rw("ttfv_slo_ms", &SchedulerConfig::ttfv_slo_ms)
      .def_rw("ttft_triage", &SchedulerConfig::ttft_triage)
      .def_rw("think_batch_multiplier", &SchedulerConfig::think_batch_multiplier)
      .def_rw("max_think_tokens", &SchedulerConfig::max_think_tokens)
      .def_rw("min_think_tokens", &SchedulerConfig::min_think_tokens)
      .def_rw("force_reissue_grace_steps", &SchedulerConfig::force_reissue_grace_steps)
      .def_rw("reap_idle_after_s", &SchedulerConfig::reap_idle_after_s)
      .def_rw("min_prefill_tokens_per_step", &SchedulerConfig::min_prefill_tokens_per_step)
      .def_rw("preemption_enabled", &SchedulerConfig::preemption_enabled)
      .def_rw("preempt_max_fraction", &SchedulerConfig::preempt_max_fraction)
      .def_rw("preempt_readmit_guard_steps", &SchedulerConfig::preempt_readmit_guard_steps)
      .def_rw("step_cost_base_ms", &SchedulerConfig::step_cost_base_ms)
      .def_rw("step_cost_per_token_ms", &SchedulerConfig::step_cost_per_token_ms)
      .def_rw("step_cost_per_kv_token_us", &SchedulerConfig::step_cost_per_kv_token_us)
      .def_rw("step_cost_online", &SchedulerConfig::step_cost_online)
      .def_rw("step_cost_forgetting_factor", &SchedulerConfig::step_cost_forgetting_factor);
  nb::class_<EntropyConfig>(m, "EntropyConfig")
      .def(nb::init<>())
      .def_rw("enabled", &EntropyConfig::enabled)
      .def_rw("ema_alpha", &EntropyConfig::ema_alpha)
      .def_rw("rpdi_threshold", &EntropyConfig::rpdi_threshold)
      .def_rw("eat_ema_variance_threshold", &EntropyConfig::eat_ema_variance_threshold)
      .def_rw("transition_entropy_threshold", &EntropyConfig::transition_entropy_threshold)
      .def_rw("eat_probe_interval_tokens", &EntropyConfig::eat_probe_interval_tokens)
      .def_rw("eat_min_samples", &EntropyConfig::eat_min_samples)
      .def_rw("rpdi_window_tokens", &EntropyConfig::rpdi_window_tokens)
      .def_rw("rpdi_min_samples", &EntropyConfig::rpdi_min_samples);
  nb::class_<KvMemoryConfig>(m, "KvMemoryConfig")
      .def(nb::init<>())
      .def_rw("aggressive_think_eviction", &KvMemoryConfig::aggressive_think_eviction)
      .def_rw("think_phase_memory_fraction", &KvMemoryConfig::think_phase_memory_fraction)
      .def_rw("block_size_bytes", &KvMemoryConfig::block_size_bytes)
      .def_rw("block_tokens", &KvMemoryConfig::block_tokens)
      .def_rw("capacity_bytes", &KvMemoryConfig::capacity_bytes, "None means \"auto\"")
      .def("resolve_capacity_bytes", &KvMemoryConfig::resolve_capacity_bytes, "device_total_bytes"_a);
  nb::class_<DisaggConfig>(m, "DisaggConfig")
      .def(nb::init<>())
      .def_rw("enabled", &DisaggConfig::enabled)
      .def_rw("fabric", &DisaggConfig::fabric)
      .def_rw("offload_threshold_blocks", &DisaggConfig::offload_threshold_blocks)
      .def_rw("max_inflight_batches", &DisaggConfig::max_inflight_batches)
      .def_rw("transfer_timeout_ms", &DisaggConfig::transfer_timeout_ms);
  nb::class_<TelemetryConfig>(m, "TelemetryConfig")
      .def(nb::init<>())
      .def_rw("prometheus_enabled", &TelemetryConfig::prometheus_enabled)
      .def_rw("prometheus_host", &TelemetryConfig::prometheus_host)
      .def_rw("prometheus_port", &TelemetryConfig::prometheus_port)
      .def_rw("otlp_enabled", &TelemetryConfig::otlp_enabled)
      .def_rw("otlp_endpoint", &TelemetryConfig::otlp_endpoint)
      .def_rw("service_name", &TelemetryConfig::service_name);
  nb::class_<LoggingConfig>(m, "LoggingConfig")
      .def(nb::init<>())
      .def_rw("level", &LoggingConfig::level)
      .def_rw("format", &LoggingConfig::format);
  nb::class_<ModelConfig>(m, "ModelConfig")
      .def(nb::init<>())
      .def_rw("name", &ModelConfig::name)
      .def_rw("reasoning_parser", &ModelConfig::reasoning_parser)
      .def_rw("think_start_token_ids", &ModelConfig::think_start_token_ids)
      .def_rw("think_end_token_ids", &ModelConfig::think_end_token_ids)
      .def_rw("eos_token_ids", &ModelConfig::eos_token_ids)
      .def_rw("tool_call_start_token_ids", &ModelConfig::tool_call_start_token_ids)
      .def_rw("tool_call_end_token_ids", &ModelConfig::tool_call_end_token_ids)
      .def_rw("think_start_markers", &ModelConfig::think_start_markers)
      .def_rw("think_end_markers", &ModelConfig::think_end_markers)
      .def_rw("supports_think_disable", &ModelConfig::supports_think_disable)
      .def("__eq__", [](const ModelConfig& a, const ModelConfig& b) { return a == b; });

  nb::class_<ModelMap>(m, "ModelMap",
                       "MeridianConfig.model: name -> ModelConfig (a copy), read-only, callable; a live view")
      .def(
          "__call__", [](const ModelMap& v, std::string_view name) { return v.config->model(name); },
          "name"_a, "The model `name`; ValueError naming the known models if it is not defined")
      .def(
          "__getitem__",
          [](const ModelMap& v, nb::handle name) {
            try {
              return v.config->model(v.key(name));
            } catch (const ConfigError& e) {
              throw NotFound(e.what());  // KeyError
            }
          },
          "name"_a)
      .def(
          "get",
          [](const ModelMap& v, nb::handle name, nb::object fallback) -> nb::object {
            const std::string key = v.key(name);
            auto it = v.config->models.find(key);
            return it == v.config->models.end() ? fallback : nb::cast(it->second);
          },
          "name"_a, "default"_a = nb::none())
      .def("__contains__",
           [](const ModelMap& v, nb::handle name) {
             return nb::isinstance<nb::str>(name) && v.config->models.contains(nb::cast<std::string>(name));
           })
      .def("__len__", [](const ModelMap& v) { return v.config->models.size(); })
      .def("__iter__", [](const ModelMap& v) { return nb::iter(nb::cast(v.names())); })
      .def("keys", &ModelMap::names)
      .def("values",
           [](const ModelMap& v) {
             std::vector<ModelConfig> out;
             for (const auto& [name, model] : v.config->models) out.push_back(model);
             return out;
           })
      .def("items",
           [](const ModelMap& v) {
             std::vector<std::pair<std::string, ModelConfig>> out(v.config->models.begin(),
                                                                  v.config->models.end());
             return out;
           })
      .def("__repr__",
           [](const ModelMap& v) { return fmt::format("ModelMap({})", fmt::join(v.names(), ", ")); });

  nb::class_<MeridianConfig>(m, "MeridianConfig")
      .def(nb::init<>())
      .def_static("defaults", &MeridianConfig::defaults, "Defaults with the built-in model presets")
      .def_rw("scheduler", &MeridianConfig::scheduler)
      .def_rw("entropy", &MeridianConfig::entropy)
      .def_rw("kv_memory", &MeridianConfig::kv_memory)
      .def_rw("disagg", &MeridianConfig::disagg)
      .def_rw("telemetry", &MeridianConfig::telemetry)
      .def_rw("logging", &MeridianConfig::logging)
      .def_prop_ro("model_names",
                   [](const MeridianConfig& c) {
                     std::vector<std::string> names;
                     for (const auto& [name, model] : c.models) names.push_back(name);
                     return names;
                   })
      .def_prop_ro(
          "model", [](const MeridianConfig& c) { return ModelMap{&c}; }, nb::keep_alive<0, 1>(),
          "The [model.<name>] settings: cfg.model(name) (ValueError if not defined) or cfg.model[name] "
          "(KeyError); a read-only mapping view")
      .def(
          "set_model", [](MeridianConfig& c, const ModelConfig& model) { c.models[model.name] = model; },
          "model"_a, "Add or replace a model (validate() afterwards)")
      .def(
          "overlay",
          [](MeridianConfig& c, std::string_view text, std::string_view source) {
            overlay_config(c, text, source);
          },
          "toml_text"_a, "source_name"_a = "<string>", "Overlay a TOML document in place (validated)")
      .def(
          "validate", [](const MeridianConfig& c) { validate_or_throw(c); },
          "Raise ValueError listing every problem")
      .def("issues",
           [](const MeridianConfig& c) {
             std::vector<std::string> out;
             for (const auto& issue : validate(c)) out.push_back(issue.describe());
             return out;
           })
      .def(
          "to_toml",
          [](const MeridianConfig& c, std::optional<std::string> model) {
            return to_toml(c, model ? std::optional<std::string_view>(*model) : std::nullopt);
          },
          "model"_a = nb::none())
      .def(
          "to_json",
          [](const MeridianConfig& c, std::optional<std::string> model) {
            return to_json(c, model ? std::optional<std::string_view>(*model) : std::nullopt);
          },
          "model"_a = nb::none())
      .def("__eq__", [](const MeridianConfig& a, const MeridianConfig& b) { return a == b; });

  m.def("parse_config", &parse_config, "toml_text"_a, "source_name"_a = "<string>",
        "Defaults overlaid by a TOML document; ValueError on any problem");
  m.def(
      "load_config_files", [](const std::vector<std::filesystem::path>& files) { return load_config(files); },
      "files"_a, "Defaults overlaid by each file in order; ValueError on any problem");
  m.def("find_default_config_file", &find_default_config_file,
        "$MERIDIAN_CONFIG, ./meridian.toml, then ~/.config/meridian/meridian.toml");
  m.def("canonical_listen_host", &canonical_listen_host, "host"_a,
        "The numeric form of a host to listen on (IPv4, IPv6 or localhost), or '' when it is none");
  m.def("listen_host_problem", &listen_host_problem, "host"_a,
        "What is wrong with a listen host ('' when valid)");
  m.def("otlp_endpoint_problem", &otlp_endpoint_problem, "endpoint"_a,
        "What is wrong with an OTLP/HTTP base endpoint ('' when valid)");
  m.def("builtin_model_presets", &builtin_model_presets);
  m.def("config_field_paths", &config_field_paths);
  m.def("prompt_disables_thinking", &prompt_disables_thinking, "prompt_text"_a);

  nb::class_<TokenizerVocab>(m, "TokenizerVocab")
      .def_static("from_file", &TokenizerVocab::from_file, "tokenizer_json"_a)
      .def_static("from_json", &TokenizerVocab::from_json, "json_text"_a, "source_name"_a = "<string>")
      .def(
          "find_id",
          [](const TokenizerVocab& v, std::string_view content) -> std::optional<std::uint32_t> {
            if (auto t = v.find(content)) return t->id;
            return std::nullopt;
          },
          "content"_a)
      .def(
          "check_model",
          [](const TokenizerVocab& v, const ModelConfig& model) {
            std::vector<std::string> out;
            for (const auto& issue : check_model_against_tokenizer(model, v)) out.push_back(issue.describe());
            return out;
          },
          "model"_a)
      .def(
          "derive_boundary_ids",
          [](const TokenizerVocab& v, const ModelConfig& model) { return derive_boundary_ids(model, v); },
          "model"_a);
}

}  // namespace meridian::python
