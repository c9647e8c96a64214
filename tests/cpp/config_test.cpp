// meridian.toml: defaults, overlay semantics, round trips, the annotated
// example and the reference docs staying in step with the schema.
#include "meridian/config.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "source_path.h"

namespace meridian {
namespace {

using ::testing::HasSubstr;

std::string read_source_file(const std::string& relative) {
  std::ifstream in(meridian::test::source_path(relative));
  EXPECT_TRUE(in.good()) << relative;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

TEST(Config, DefaultsMatchTheReference) {
  const MeridianConfig c = MeridianConfig::defaults();
  EXPECT_EQ(c.scheduler.think_tpot_budget_ms, 80.0);
  EXPECT_EQ(c.scheduler.output_tpot_budget_ms, 20.0);
  EXPECT_EQ(c.scheduler.think_batch_multiplier, 2.5);
  EXPECT_EQ(c.scheduler.max_think_tokens, 32768U);
  EXPECT_EQ(c.scheduler.min_think_tokens, 512U);
  EXPECT_EQ(c.scheduler.force_reissue_grace_steps, 1U);
  EXPECT_EQ(c.scheduler.reap_idle_after_s, 60.0);
  EXPECT_TRUE(c.entropy.enabled);
  EXPECT_EQ(c.entropy.ema_alpha, 0.2);
  EXPECT_EQ(c.entropy.rpdi_threshold, 5.0);
  EXPECT_EQ(c.entropy.eat_ema_variance_threshold, 0.001);
  EXPECT_EQ(c.entropy.transition_entropy_threshold, 2.5);
  EXPECT_EQ(c.entropy.eat_probe_interval_tokens, 16U);
  EXPECT_FALSE(c.kv_memory.aggressive_think_eviction);
  EXPECT_EQ(c.kv_memory.think_phase_memory_fraction, 0.40);
  EXPECT_EQ(c.kv_memory.block_size_bytes, 16384U);
  EXPECT_FALSE(c.kv_memory.capacity_bytes.has_value());
  EXPECT_FALSE(c.disagg.enabled);
  EXPECT_EQ(c.disagg.fabric, FabricKind::kNone);
  EXPECT_EQ(c.disagg.offload_threshold_blocks, 4U);
  EXPECT_EQ(c.disagg.max_inflight_batches, 4U);
  EXPECT_EQ(c.disagg.transfer_timeout_ms, 2000U);
  EXPECT_FALSE(c.telemetry.otlp_enabled);
  EXPECT_EQ(c.telemetry.otlp_endpoint, "http://localhost:4318");
  EXPECT_EQ(c.logging.level, "info");
  EXPECT_EQ(c.logging.format, "text");
  EXPECT_EQ(c.models.size(), 4U);
}

TEST(Config, EmptyFileYieldsTheDefaults) {
  EXPECT_EQ(parse_config(""), MeridianConfig::defaults());
  EXPECT_EQ(parse_config("# only a comment\n\n"), MeridianConfig::defaults());
  EXPECT_EQ(parse_config("[scheduler]\n[entropy]\n[model]\n"), MeridianConfig::defaults());
}

TEST(Config, PartialTableOverlaysOnlyTheGivenFields) {
  const MeridianConfig c =
      parse_config("[entropy]\nema_alpha = 0.2\n[kv_memory]\ncapacity_bytes = 1073741824\n");
  MeridianConfig expected = MeridianConfig::defaults();
  expected.entropy.ema_alpha = 0.2;
  expected.kv_memory.capacity_bytes = 1073741824ULL;
  EXPECT_EQ(c, expected);
}

TEST(Config, LaterOverlaysWinFieldByField) {
  MeridianConfig c = parse_config("[scheduler]\nmax_think_tokens = 8000\nmin_think_tokens = 100\n");
  overlay_config(c, "[scheduler]\nmin_think_tokens = 200\n", "second.toml");
  EXPECT_EQ(c.scheduler.max_think_tokens, 8000U);
  EXPECT_EQ(c.scheduler.min_think_tokens, 200U);
  overlay_config(c, "[kv_memory]\ncapacity_bytes = \"auto\"\n");
  EXPECT_FALSE(c.kv_memory.capacity_bytes.has_value());
}

TEST(Config, IntegersAreAcceptedForFloatFields) {
  const MeridianConfig c = parse_config("[scheduler]\nthink_tpot_budget_ms = 100\n");
  EXPECT_EQ(c.scheduler.think_tpot_budget_ms, 100.0);
}

TEST(Config, ModelTableOverlaysThePresetFieldByField) {
  const MeridianConfig c = parse_config("[model.qwen3]\nsupports_think_disable = false\n");
  const ModelConfig& qwen = c.model("qwen3");
  EXPECT_FALSE(qwen.supports_think_disable);
  EXPECT_EQ(qwen.think_start_token_ids, std::vector<std::uint32_t>{151667});
  EXPECT_EQ(qwen.think_end_token_ids, std::vector<std::uint32_t>{151668});
}

TEST(Config, NewModelNeedsAParserAndIsThenComplete) {
  const MeridianConfig c = parse_config(
      "[model.my-r1]\nreasoning_parser = \"deepseek_r1\"\nthink_start_token_ids = [10]\n"
      "think_end_token_ids = [11]\neos_token_ids = [2]\n");
  const ModelConfig& m = c.model("my-r1");
  EXPECT_EQ(m.name, "my-r1");
  EXPECT_EQ(m.reasoning_parser, ReasoningParser::kDeepSeekR1);
  EXPECT_EQ(m.eos_token_ids, std::vector<std::uint32_t>{2});
  EXPECT_TRUE(m.tool_call_start_token_ids.empty());
  EXPECT_EQ(c.models.size(), 5U);
}

// Every field set to a non-default value survives to_toml -> parse_config.
TEST(Config, EveryFieldRoundTripsThroughToml) {
  const std::string custom = R"(
[scheduler]
think_tpot_budget_ms = 120.5
output_tpot_budget_ms = 15.25
think_batch_multiplier = 3.0
max_think_tokens = 16000
min_think_tokens = 256
force_reissue_grace_steps = 3
reap_idle_after_s = 30.0
[entropy]
enabled = false
ema_alpha = 0.1
rpdi_threshold = 2.0
eat_ema_variance_threshold = 0.005
transition_entropy_threshold = 3.25
eat_probe_interval_tokens = 16
[kv_memory]
aggressive_think_eviction = true
think_phase_memory_fraction = 0.3
block_size_bytes = 8192
capacity_bytes = 68719476736
[disagg]
enabled = true
fabric = "mooncake"
offload_threshold_blocks = 8
max_inflight_batches = 2
transfer_timeout_ms = 750
[telemetry]
prometheus_enabled = false
prometheus_host = "0.0.0.0"
prometheus_port = 9100
otlp_enabled = true
otlp_endpoint = "https://collector.example:4318"
service_name = "meridian-prod"
[logging]
level = "debug"
format = "json"
[model.custom]
reasoning_parser = "granite"
think_start_token_ids = [7]
think_end_token_ids = [8]
eos_token_ids = [0, 9]
tool_call_start_token_ids = [20]
tool_call_end_token_ids = [21]
think_start_markers = ["Thinking:", "I think: \"quoted\""]
think_end_markers = ["Answer:"]
supports_think_disable = true
)";
  const MeridianConfig first = parse_config(custom);
  EXPECT_NE(first.scheduler, MeridianConfig::defaults().scheduler);
  const std::string printed = to_toml(first);
  const MeridianConfig second = parse_config(printed, "printed.toml");
  EXPECT_EQ(first, second) << printed;
  EXPECT_EQ(to_toml(second), printed);
  // And the custom values are really what was written.
  EXPECT_EQ(second.telemetry.otlp_endpoint, "https://collector.example:4318");
  EXPECT_EQ(second.model("custom").think_start_markers.at(1), "I think: \"quoted\"");
  EXPECT_EQ(second.disagg.fabric, FabricKind::kMooncake);
  EXPECT_EQ(second.disagg.max_inflight_batches, 2U);
  EXPECT_EQ(second.disagg.transfer_timeout_ms, 750U);
  EXPECT_EQ(second.kv_memory.capacity_bytes, 68719476736ULL);
  EXPECT_EQ(second.logging.format, "json");
}

TEST(Config, DefaultsRoundTripAndPrintEveryField) {
  const MeridianConfig defaults = MeridianConfig::defaults();
  const std::string printed = to_toml(defaults);
  EXPECT_EQ(parse_config(printed), defaults);
  const toml::table table = toml::parse(printed);
  for (const std::string& path : config_field_paths()) {
    std::string concrete = path;
    if (auto pos = concrete.find("<name>"); pos != std::string::npos) concrete.replace(pos, 6, "qwen3");
    EXPECT_TRUE(table.at_path(concrete).node() != nullptr) << path << " missing from to_toml()";
  }
  EXPECT_THAT(printed, HasSubstr("capacity_bytes = \"auto\""));
}

TEST(Config, OnlyModelPrintsOneModel) {
  const std::string printed = to_toml(MeridianConfig::defaults(), "deepseek_r1");
  EXPECT_THAT(printed, HasSubstr("[model.deepseek_r1]"));
  EXPECT_THAT(printed, ::testing::Not(HasSubstr("[model.qwen3]")));
  EXPECT_THROW((void)to_toml(MeridianConfig::defaults(), "nope"), ConfigError);
}

TEST(Config, JsonHasTheSameShape) {
  const auto json = nlohmann::json::parse(to_json(MeridianConfig::defaults()));
  EXPECT_EQ(json["entropy"]["ema_alpha"], 0.2);
  EXPECT_EQ(json["kv_memory"]["capacity_bytes"], "auto");
  EXPECT_EQ(json["disagg"]["fabric"], "none");
  EXPECT_EQ(json["model"]["qwen3"]["think_end_token_ids"], nlohmann::json::array({151668}));
  EXPECT_EQ(json["model"]["granite_3_2"]["reasoning_parser"], "granite");
}

TEST(Config, AnnotatedExampleIsCompleteAndEqualsTheDefaults) {
  const std::string example = read_source_file("meridian.toml.example");
  EXPECT_EQ(parse_config(example, "meridian.toml.example"), MeridianConfig::defaults());
  const toml::table table = toml::parse(example);
  for (const std::string& path : config_field_paths()) {
    if (path.starts_with("model.")) continue;  // presets live in models/*.toml
    EXPECT_TRUE(table.at_path(path).node() != nullptr) << path << " is not in meridian.toml.example";
  }
}

TEST(Config, ReferenceDocsDescribeEveryField) {
  const std::string docs = read_source_file("docs/configuration.md");
  for (const std::string& path : config_field_paths()) {
    const std::string key = path.substr(path.rfind('.') + 1);
    EXPECT_THAT(docs, HasSubstr("### `" + key + "`"))
        << path << " is not documented in docs/configuration.md";
  }
}

TEST(Config, CapacityAutoResolvesTo85PercentInWholeBlocks) {
  KvMemoryConfig kv;
  const std::uint64_t device = 80ULL << 30U;
  const std::uint64_t resolved = kv.resolve_capacity_bytes(device);
  EXPECT_EQ(resolved % kv.block_size_bytes, 0U);
  EXPECT_LE(resolved, device * 85 / 100);
  EXPECT_GT(resolved, device * 85 / 100 - kv.block_size_bytes);
  kv.capacity_bytes = 123456789;
  EXPECT_EQ(kv.resolve_capacity_bytes(device), 123456789U);
}

TEST(Config, DefaultFileSearchHonoursTheEnvironment) {
  ASSERT_EQ(setenv("MERIDIAN_CONFIG", "/etc/meridian/custom.toml", 1), 0);
  EXPECT_EQ(find_default_config_file(), std::filesystem::path("/etc/meridian/custom.toml"));
  ASSERT_EQ(unsetenv("MERIDIAN_CONFIG"), 0);
  const auto dir = std::filesystem::temp_directory_path() / "meridian-config-search";
  std::filesystem::create_directories(dir / "meridian");
  std::ofstream(dir / "meridian" / "meridian.toml") << "[entropy]\n";
  ASSERT_EQ(setenv("XDG_CONFIG_HOME", dir.c_str(), 1), 0);
  const auto old_cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);  // no ./meridian.toml here
  EXPECT_EQ(find_default_config_file(), dir / "meridian" / "meridian.toml");
  std::filesystem::current_path(old_cwd);
  unsetenv("XDG_CONFIG_HOME");
}

TEST(Config, SoftSwitchLastDirectiveWins) {
  EXPECT_FALSE(prompt_disables_thinking("What is 2+2?"));
  EXPECT_TRUE(prompt_disables_thinking("What is 2+2? /no_think"));
  EXPECT_FALSE(prompt_disables_thinking("first /no_think then /think please"));
  EXPECT_TRUE(prompt_disables_thinking("/think earlier, /no_think now"));
}

}  // namespace
}  // namespace meridian
