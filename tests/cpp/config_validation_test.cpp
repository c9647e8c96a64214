// Every way a meridian.toml can be wrong: range violations (both sides of
// every bound), cross-field rules, unknown keys at every level, wrong types.
// Each case states the exact message an operator sees.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meridian/config.h"

namespace meridian {
namespace {

using ::testing::HasSubstr;

std::vector<ConfigIssue> issues_of(const std::string& toml) {
  try {
    (void)parse_config(toml, "test.toml");
  } catch (const ConfigError& e) {
    return e.issues();
  }
  return {};
}

struct BadCase {
  const char* toml;
  const char* path;
  const char* message;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.toml; }

class RejectsBadValue : public ::testing::TestWithParam<BadCase> {};

TEST_P(RejectsBadValue, WithDottedPathAndExactMessage) {
  const BadCase& c = GetParam();
  const auto issues = issues_of(c.toml);
  ASSERT_EQ(issues.size(), 1U) << (issues.empty() ? "accepted" : issues[0].describe());
  EXPECT_EQ(issues[0].path, c.path);
  EXPECT_EQ(issues[0].message, c.message);
  EXPECT_EQ(issues[0].source, "test.toml");
  EXPECT_GT(issues[0].line, 0U) << "issue carries the value's location";
}

INSTANTIATE_TEST_SUITE_P(
    Ranges, RejectsBadValue,
    ::testing::Values(
        BadCase{"[scheduler]\nthink_tpot_budget_ms = 0", "scheduler.think_tpot_budget_ms",
                "scheduler.think_tpot_budget_ms must be in (0, 60000]; got 0.0"},
        BadCase{"[scheduler]\nthink_tpot_budget_ms = -3.5", "scheduler.think_tpot_budget_ms",
                "scheduler.think_tpot_budget_ms must be in (0, 60000]; got -3.5"},
        BadCase{"[scheduler]\noutput_tpot_budget_ms = 0.0", "scheduler.output_tpot_budget_ms",
                "scheduler.output_tpot_budget_ms must be in (0, 60000]; got 0.0"},
        BadCase{"[scheduler]\noutput_tpot_budget_ms = nan", "scheduler.output_tpot_budget_ms",
                "scheduler.output_tpot_budget_ms must be a finite number in (0, 60000]; got nan"},
        BadCase{"[scheduler]\nthink_batch_multiplier = 0.99", "scheduler.think_batch_multiplier",
                "scheduler.think_batch_multiplier must be in [1, 100]; got 0.99"},
        BadCase{"[scheduler]\nforce_reissue_grace_steps = 0", "scheduler.force_reissue_grace_steps",
                "scheduler.force_reissue_grace_steps must be in [1, 4294967295]; got 0"},
        BadCase{"[scheduler]\nreap_idle_after_s = 0", "scheduler.reap_idle_after_s",
                "scheduler.reap_idle_after_s must be in (0, 1000000]; got 0.0"},
        BadCase{"[entropy]\nema_alpha = 1.5", "entropy.ema_alpha",
                "entropy.ema_alpha must be in (0, 1]; got 1.5"},
        BadCase{"[entropy]\nema_alpha = 0.0", "entropy.ema_alpha",
                "entropy.ema_alpha must be in (0, 1]; got 0.0"},
        BadCase{"[entropy]\nrpdi_threshold = 1.0", "entropy.rpdi_threshold",
                "entropy.rpdi_threshold must be > 1; got 1.0"},
        BadCase{"[entropy]\neat_ema_variance_threshold = 0", "entropy.eat_ema_variance_threshold",
                "entropy.eat_ema_variance_threshold must be > 0; got 0.0"},
        BadCase{"[entropy]\ntransition_entropy_threshold = -1", "entropy.transition_entropy_threshold",
                "entropy.transition_entropy_threshold must be > 0; got -1.0"},
        BadCase{"[entropy]\neat_min_samples = 1", "entropy.eat_min_samples",
                "entropy.eat_min_samples must be in [2, 4294967295]; got 1"},
        BadCase{"[entropy]\nrpdi_window_tokens = 256\nrpdi_min_samples = 100", "entropy.rpdi_min_samples",
                "entropy.rpdi_min_samples must be >= entropy.rpdi_window_tokens; got rpdi_min_samples = 100, "
                "rpdi_window_tokens = 256"},
        BadCase{"[entropy]\neat_probe_interval_tokens = 0", "entropy.eat_probe_interval_tokens",
                "entropy.eat_probe_interval_tokens must be in [1, 4294967295]; got 0"},
        BadCase{"[kv_memory]\nthink_phase_memory_fraction = 1.0", "kv_memory.think_phase_memory_fraction",
                "kv_memory.think_phase_memory_fraction must be in (0, 1); got 1.0"},
        BadCase{"[kv_memory]\nthink_phase_memory_fraction = 0", "kv_memory.think_phase_memory_fraction",
                "kv_memory.think_phase_memory_fraction must be in (0, 1); got 0.0"},
        BadCase{"[kv_memory]\nblock_size_bytes = 0", "kv_memory.block_size_bytes",
                "kv_memory.block_size_bytes must be > 0; got 0"},
        BadCase{"[kv_memory]\ncapacity_bytes = 0", "kv_memory.capacity_bytes",
                "kv_memory.capacity_bytes must be > 0; got 0"},
        BadCase{"[kv_memory]\ncapacity_bytes = \"lots\"", "kv_memory.capacity_bytes",
                "kv_memory.capacity_bytes must be a positive integer or \"auto\"; got string 'lots'"},
        BadCase{"[disagg]\noffload_threshold_blocks = 0", "disagg.offload_threshold_blocks",
                "disagg.offload_threshold_blocks must be in [1, 4294967295]; got 0"},
        BadCase{"[disagg]\nmax_inflight_batches = 0", "disagg.max_inflight_batches",
                "disagg.max_inflight_batches must be in [1, 4294967295]; got 0"},
        BadCase{"[disagg]\ntransfer_timeout_ms = -5", "disagg.transfer_timeout_ms",
                "disagg.transfer_timeout_ms must be >= 0; got -5"},
        BadCase{"[disagg]\nfabric = \"rdma\"", "disagg.fabric",
                "disagg.fabric must be one of \"none\", \"nixl\", \"mooncake\"; got 'rdma'"},
        BadCase{"[telemetry]\nprometheus_port = 0", "telemetry.prometheus_port",
                "telemetry.prometheus_port must be in [1, 65535]; got 0"},
        BadCase{"[telemetry]\nprometheus_port = 65536", "telemetry.prometheus_port",
                "telemetry.prometheus_port must be in [1, 65535]; got 65536"},
        BadCase{
            "[logging]\nlevel = \"verbose\"", "logging.level",
            "logging.level must be one of \"trace\", \"debug\", \"info\", \"warn\", \"error\", \"off\"; got "
            "'verbose'"},
        BadCase{"[logging]\nformat = \"xml\"", "logging.format",
                "logging.format must be one of \"text\", \"json\"; got 'xml'"},
        BadCase{"[logging]\nformat = \"JSON\"", "logging.format",
                "logging.format must be one of \"text\", \"json\"; got 'JSON'"},
        BadCase{"[scheduler]\nmax_think_tokens = -1", "scheduler.max_think_tokens",
                "scheduler.max_think_tokens must be >= 0; got -1"},
        BadCase{"[entropy]\neat_probe_interval_tokens = 4294967296", "entropy.eat_probe_interval_tokens",
                "entropy.eat_probe_interval_tokens must be <= 4294967295; got 4294967296"},
        BadCase{"[model.qwen3]\nreasoning_parser = \"anthropic\"", "model.qwen3.reasoning_parser",
                "model.qwen3.reasoning_parser must be one of \"qwen3\", \"deepseek_r1\", \"granite\"; got "
                "'anthropic'"},
        BadCase{"[model.qwen3]\nthink_end_token_ids = [151668, -2]", "model.qwen3.think_end_token_ids[1]",
                "model.qwen3.think_end_token_ids[1] must be >= 0; got -2"}));

INSTANTIATE_TEST_SUITE_P(
    CrossField, RejectsBadValue,
    ::testing::Values(
        BadCase{
            "[scheduler]\nmin_think_tokens = 600\nmax_think_tokens = 500", "scheduler.min_think_tokens",
            "scheduler.min_think_tokens must be < scheduler.max_think_tokens; got min_think_tokens = 600, "
            "max_think_tokens = 500"},
        BadCase{
            "[scheduler]\nmin_think_tokens = 512\nmax_think_tokens = 512", "scheduler.min_think_tokens",
            "scheduler.min_think_tokens must be < scheduler.max_think_tokens; got min_think_tokens = 512, "
            "max_think_tokens = 512"},
        BadCase{"[disagg]\nenabled = true", "disagg.fabric",
                "disagg.fabric must be \"nixl\" or \"mooncake\" when disagg.enabled = true; got \"none\""},
        BadCase{
            "[kv_memory]\ncapacity_bytes = 1000\nblock_size_bytes = 4096", "kv_memory.capacity_bytes",
            "kv_memory.capacity_bytes must hold at least one block (>= kv_memory.block_size_bytes = 4096); "
            "got 1000"},
        BadCase{
            "[telemetry]\notlp_endpoint = \"localhost:4318\"", "telemetry.otlp_endpoint",
            "telemetry.otlp_endpoint must be an http:// or https:// URL such as http://localhost:4318; got "
            "\"localhost:4318\""},
        BadCase{"[telemetry]\nservice_name = \"\"", "telemetry.service_name",
                "telemetry.service_name must not be empty"},
        BadCase{
            "[telemetry]\nprometheus_host = \"\"", "telemetry.prometheus_host",
            "telemetry.prometheus_host must be an IPv4 address (four parts, each 0-255), an IPv6 address or "
            "localhost; got \"\""},
        // Issue 27: civetweb bound "256.0.0.0" as 0.0.0.0; start-up rejected an empty host.
        BadCase{
            "[telemetry]\nprometheus_host = \"256.0.0.0\"", "telemetry.prometheus_host",
            "telemetry.prometheus_host must be an IPv4 address (four parts, each 0-255), an IPv6 address or "
            "localhost; got \"256.0.0.0\""},
        BadCase{
            "[telemetry]\nprometheus_host = \"127.1\"", "telemetry.prometheus_host",
            "telemetry.prometheus_host must be an IPv4 address (four parts, each 0-255), an IPv6 address or "
            "localhost; got \"127.1\""},
        BadCase{"[telemetry]\notlp_endpoint = \"http://\"", "telemetry.otlp_endpoint",
                "telemetry.otlp_endpoint has no host; got \"http://\""},
        BadCase{"[telemetry]\notlp_endpoint = \"http://collector:70000\"", "telemetry.otlp_endpoint",
                "telemetry.otlp_endpoint has port \"70000\": it must be a number in 1..65535; got "
                "\"http://collector:70000\""},
        BadCase{"[model.qwen3]\nthink_end_token_ids = []", "model.qwen3.think_end_token_ids",
                "model.qwen3.think_end_token_ids must not be empty when reasoning_parser = \"qwen3\""},
        BadCase{"[model.deepseek_r1]\nthink_end_token_ids = []", "model.deepseek_r1.think_end_token_ids",
                "model.deepseek_r1.think_end_token_ids must not be empty when reasoning_parser = "
                "\"deepseek_r1\""},
        BadCase{"[model.granite_3_2]\nthink_end_markers = []", "model.granite_3_2.think_end_markers",
                "model.granite_3_2.think_end_markers must not be empty when reasoning_parser = \"granite\""},
        BadCase{"[model.qwen3]\nthink_end_token_ids = [151667]", "model.qwen3.think_end_token_ids[0]",
                "model.qwen3.think_end_token_ids[0] = 151667 is also listed in "
                "model.qwen3.think_start_token_ids; "
                "a token can have only one role"},
        BadCase{
            "[model.qwen3]\ntool_call_end_token_ids = []", "model.qwen3.tool_call_end_token_ids",
            "model.qwen3.tool_call_start_token_ids and model.qwen3.tool_call_end_token_ids must both be set "
            "or both be empty"},
        BadCase{"[model.qwen3]\neos_token_ids = [1,2,3,4,5,6,7,8,9]", "model.qwen3.eos_token_ids",
                "model.qwen3.eos_token_ids must have at most 8 entries; got 9"},
        BadCase{"[model.granite_3_2]\nthink_start_markers = [\"\"]",
                "model.granite_3_2.think_start_markers[0]",
                "model.granite_3_2.think_start_markers[0] must be 1 to 256 bytes long; got 0 bytes"},
        BadCase{
            "[model.granite_3_2]\nthink_end_markers = [\"Here is my thought process:\"]",
            "model.granite_3_2.think_end_markers[0]",
            "model.granite_3_2.think_end_markers[0] = \"Here is my thought process:\" appears more than once "
            "among the markers"},
        BadCase{
            "[model.mymodel]\nthink_end_token_ids = [5]", "model.mymodel.reasoning_parser",
            "model.mymodel.reasoning_parser is required for a model that is not a built-in preset (built-in: "
            "deepseek_r1, deepseek_r1_distill_qwen, granite_3_2, qwen3)"}));

INSTANTIATE_TEST_SUITE_P(
    UnknownKeys, RejectsBadValue,
    ::testing::Values(
        BadCase{"[schedular]\nmax_think_tokens = 4", "schedular",
                "schedular is not a known section; did you mean 'scheduler'?"},
        BadCase{"verbose = true", "verbose",
                "verbose is not a known section (known: scheduler, entropy, kv_memory, disagg, telemetry, "
                "logging, "
                "model)"},
        BadCase{"[scheduler]\nthink_budget_ms = 4.0", "scheduler.think_budget_ms",
                "scheduler.think_budget_ms is not a known key of [scheduler]; did you mean "
                "'think_tpot_budget_ms'?"},
        BadCase{"[entropy]\nalpha = 0.1", "entropy.alpha",
                "entropy.alpha is not a known key of [entropy]; did you mean 'ema_alpha'?"},
        BadCase{"[entropy]\nfoo = 0.1", "entropy.foo",
                "entropy.foo is not a known key of [entropy] (known: enabled, ema_alpha, rpdi_threshold, "
                "eat_ema_variance_threshold, transition_entropy_threshold, eat_probe_interval_tokens, "
                "eat_min_samples, rpdi_window_tokens, rpdi_min_samples)"},
        BadCase{"[kv_memory]\ncapacity = 5", "kv_memory.capacity",
                "kv_memory.capacity is not a known key of [kv_memory]; did you mean 'capacity_bytes'?"},
        BadCase{"[disagg]\nfabrik = \"nixl\"", "disagg.fabrik",
                "disagg.fabrik is not a known key of [disagg]; did you mean 'fabric'?"},
        BadCase{"[telemetry]\notlp = true", "telemetry.otlp",
                "telemetry.otlp is not a known key of [telemetry]; did you mean 'otlp_enabled'?"},
        BadCase{"[logging]\nlvl = \"debug\"", "logging.lvl",
                "logging.lvl is not a known key of [logging]; did you mean 'level'?"},
        BadCase{"[model.qwen3]\nthink_end_ids = [1]", "model.qwen3.think_end_ids",
                "model.qwen3.think_end_ids is not a known key of [model.qwen3]; did you mean "
                "'think_end_token_ids'?"},
        BadCase{"[scheduler.extra]\nx = 1", "scheduler.extra",
                "scheduler.extra is not a known key of [scheduler] (known: think_tpot_budget_ms, "
                "output_tpot_budget_ms, ttft_slo_ms, ttfv_slo_ms, ttft_triage, "
                "think_batch_multiplier, max_think_tokens, "
                "min_think_tokens, "
                "force_reissue_grace_steps, reap_idle_after_s, min_prefill_tokens_per_step, "
                "preemption_enabled, preempt_max_fraction, preempt_readmit_guard_steps, step_cost_base_ms, "
                "step_cost_per_token_ms, step_cost_per_kv_token_us, step_cost_online, "
                "step_cost_forgetting_factor)"}));

INSTANTIATE_TEST_SUITE_P(
    WrongTypes, RejectsBadValue,
    ::testing::Values(
        BadCase{"scheduler = 5", "scheduler", "scheduler must be a table; got integer 5"},
        BadCase{"[scheduler]\nmax_think_tokens = 3.5", "scheduler.max_think_tokens",
                "scheduler.max_think_tokens must be an integer; got float 3.5"},
        BadCase{"[scheduler]\nmin_think_tokens = \"512\"", "scheduler.min_think_tokens",
                "scheduler.min_think_tokens must be an integer; got string '512'"},
        BadCase{"[scheduler]\nthink_tpot_budget_ms = \"80ms\"", "scheduler.think_tpot_budget_ms",
                "scheduler.think_tpot_budget_ms must be a number; got string '80ms'"},
        BadCase{"[entropy]\nenabled = \"yes\"", "entropy.enabled",
                "entropy.enabled must be a boolean (true or false); got string 'yes'"},
        BadCase{"[entropy]\nenabled = 1", "entropy.enabled",
                "entropy.enabled must be a boolean (true or false); got integer 1"},
        BadCase{"[kv_memory]\ncapacity_bytes = 1.5e9", "kv_memory.capacity_bytes",
                "kv_memory.capacity_bytes must be a positive integer or \"auto\"; got float 1500000000.0"},
        BadCase{"[disagg]\nfabric = 1", "disagg.fabric",
                "disagg.fabric must be one of \"none\", \"nixl\", \"mooncake\"; got integer 1"},
        BadCase{"[telemetry]\notlp_endpoint = 4318", "telemetry.otlp_endpoint",
                "telemetry.otlp_endpoint must be a string; got integer 4318"},
        BadCase{"[logging]\nlevel = 1979-05-27", "logging.level",
                "logging.level must be a string; got date 1979-05-27"},
        BadCase{"model = [1, 2]", "model", "model must be a table; got array [ 1, 2 ]"},
        BadCase{"[model]\nqwen3 = 7", "model.qwen3",
                "model.qwen3 must be a table of model settings; got integer 7"},
        BadCase{"[model.qwen3]\nthink_start_token_ids = 151667", "model.qwen3.think_start_token_ids",
                "model.qwen3.think_start_token_ids must be an array of token ids; got integer 151667"},
        BadCase{"[model.qwen3]\nthink_start_token_ids = [\"<think>\"]",
                "model.qwen3.think_start_token_ids[0]",
                "model.qwen3.think_start_token_ids[0] must be an integer; got string '<think>'"},
        BadCase{"[model.granite_3_2]\nthink_start_markers = \"Here is\"",
                "model.granite_3_2.think_start_markers",
                "model.granite_3_2.think_start_markers must be an array of strings; got string 'Here is'"},
        BadCase{"[model.granite_3_2]\nthink_start_markers = [\"a\", 2]",
                "model.granite_3_2.think_start_markers[1]",
                "model.granite_3_2.think_start_markers[1] must be a string; got integer 2"},
        BadCase{"[model.qwen3]\nsupports_think_disable = \"true\"", "model.qwen3.supports_think_disable",
                "model.qwen3.supports_think_disable must be a boolean (true or false); got string 'true'"},
        BadCase{"[model.\"bad name\"]\nreasoning_parser = \"qwen3\"", "model.bad name",
                "model.bad name: a model name may contain only letters, digits, '_' and '-'"}));

TEST(ConfigValidation, ReportsEveryProblemInOneFile) {
  const auto issues = issues_of(
      "[scheduler]\nthink_tpot_budget_ms = 0\nbogus = 1\n[entropy]\nema_alpha = \"x\"\n[nonsense]\n");
  // Type and unknown-key problems and range problems together, in file order.
  ASSERT_EQ(issues.size(), 4U);
  EXPECT_EQ(issues[0].path, "scheduler.think_tpot_budget_ms");
  EXPECT_EQ(issues[0].line, 2U);
  EXPECT_EQ(issues[1].path, "scheduler.bogus");
  EXPECT_EQ(issues[2].path, "entropy.ema_alpha");
  EXPECT_EQ(issues[3].path, "nonsense");
}

TEST(ConfigValidation, RangeProblemsAreAllReportedTogether) {
  const auto issues = issues_of("[scheduler]\nthink_tpot_budget_ms = 0\n[entropy]\nema_alpha = 2.0\n");
  ASSERT_EQ(issues.size(), 2U);
  EXPECT_EQ(issues[0].line, 2U);
  EXPECT_EQ(issues[1].line, 4U);
}

TEST(ConfigValidation, SyntaxErrorsCarryTheLocation) {
  const auto issues = issues_of("[scheduler]\nmax_think_tokens = = 3\n");
  ASSERT_EQ(issues.size(), 1U);
  EXPECT_EQ(issues[0].path, "");
  EXPECT_THAT(issues[0].message, HasSubstr("TOML syntax error"));
  EXPECT_EQ(issues[0].line, 2U);
}

TEST(ConfigValidation, DuplicateKeysAreSyntaxErrors) {
  const auto issues = issues_of("[entropy]\nema_alpha = 0.1\nema_alpha = 0.2\n");
  ASSERT_EQ(issues.size(), 1U);
  EXPECT_THAT(issues[0].message, HasSubstr("TOML syntax error"));
}

TEST(ConfigValidation, ErrorTextStartsWithThePathAndNamesTheLocation) {
  try {
    (void)parse_config("[entropy]\nema_alpha = 1.5\n", "meridian.toml");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "entropy.ema_alpha must be in (0, 1]; got 1.5 (at meridian.toml:2:13)");
  }
}

TEST(ConfigValidation, HandBuiltConfigsAreValidatedToo) {
  MeridianConfig config = MeridianConfig::defaults();
  EXPECT_TRUE(validate(config).empty());
  config.entropy.ema_alpha = 1.5;
  config.scheduler.min_think_tokens = config.scheduler.max_think_tokens;
  const auto issues = validate(config);
  ASSERT_EQ(issues.size(), 2U);
  EXPECT_EQ(issues[0].message, "entropy.ema_alpha must be in (0, 1]; got 1.5");
  EXPECT_EQ(issues[1].path, "scheduler.min_think_tokens");
  EXPECT_THROW(validate_or_throw(config), ConfigError);
}

TEST(ConfigValidation, FailedOverlayLeavesTheConfigUnchanged) {
  MeridianConfig config = MeridianConfig::defaults();
  const MeridianConfig before = config;
  EXPECT_THROW(overlay_config(config, "[entropy]\nema_alpha = 0.5\nrpdi_threshold = 0.5\n"), ConfigError);
  EXPECT_EQ(config, before);
}

TEST(ConfigValidation, UnknownModelIsAClearError) {
  const MeridianConfig config = MeridianConfig::defaults();
  try {
    (void)config.model("llama");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.issues().at(0).message,
              "model.llama is not defined; known models: deepseek_r1, deepseek_r1_distill_qwen, granite_3_2, "
              "qwen3");
  }
}

TEST(ConfigValidation, MissingFileIsAClearError) {
  try {
    (void)load_config(std::filesystem::path("/nonexistent/meridian.toml"));
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot read config file '/nonexistent/meridian.toml'"));
  }
}

}  // namespace
}  // namespace meridian
