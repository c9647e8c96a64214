// Issue 15: one error model (everything thrown derives from meridian::Error,
// argument errors are InvalidArgument / NotFound / OutOfRange), and the
// components that are handed a config section check it themselves: the
// Python bindings and hand-built configs reach them without load_config().
#include <chrono>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "meridian/config.h"
#include "meridian/entropy_probe.h"
#include "meridian/error.h"
#include "meridian/kv_block_manager.h"
#include "meridian/phase_router.h"
#include "meridian/scheduler.h"
#include "meridian/step_cost_model.h"
#include "router_test_model.h"

namespace meridian {
namespace {

static_assert(std::is_base_of_v<Error, ConfigError>);
static_assert(std::is_base_of_v<Error, InvalidArgument>);
static_assert(std::is_base_of_v<Error, NotFound>);
static_assert(std::is_base_of_v<Error, OutOfRange>);
static_assert(std::is_base_of_v<Error, TokenizerError>);

// Runs `f`, expects a ConfigError, returns its what().
template <class F>
std::string config_error_of(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected ConfigError";
  return "";
}

// The example: max_think_tokens = 0 below min_think_tokens = 10 was
// accepted by PhaseRouter (from Python, nothing had validated the config).
TEST(EntryPointValidation, RouterChecksTheSchedulerSection) {
  MeridianConfig config = MeridianConfig::defaults();
  config.scheduler.min_think_tokens = 10;
  config.scheduler.max_think_tokens = 0;
  const std::string what = config_error_of([&] { PhaseRouter router(config, "qwen3"); });
  EXPECT_NE(what.find("scheduler.min_think_tokens must be < scheduler.max_think_tokens"), std::string::npos)
      << what;
  EXPECT_THROW((void)RouterLimits::from(config.scheduler), ConfigError);
}

TEST(EntryPointValidation, RouterChecksTheModel) {
  ModelConfig model = testing::id_model();
  model.name = "custom";
  model.eos_token_ids = {testing::kEnd};  // also the think end: two roles
  const std::string what = config_error_of([&] { PhaseRouter router(model, RouterLimits{}); });
  EXPECT_NE(what.find("model.custom.eos_token_ids[0]"), std::string::npos) << what;

  ModelConfig granite = testing::id_model(ReasoningParser::kGranite);
  granite.name = "g";
  const std::string why = config_error_of([&] { PhaseRouter router(granite, RouterLimits{}); });
  EXPECT_NE(why.find("model.g.think_start_markers must not be empty"), std::string::npos) << why;
}

TEST(EntryPointValidation, RouterLimitsAreChecked) {
  RouterLimits no_grace;
  no_grace.force_reissue_grace_steps = 0;  // was silently made 1
  EXPECT_THROW(PhaseRouter(testing::id_model(), no_grace), InvalidArgument);
  RouterLimits reap_now;
  reap_now.reap_idle_after = std::chrono::nanoseconds(0);
  EXPECT_THROW(PhaseRouter(testing::id_model(), reap_now), InvalidArgument);
}

// A huge idle time is a config error, not an undefined float -> int conversion.
TEST(EntryPointValidation, HugeReapIdleTimeIsRejected) {
  SchedulerConfig scheduler;
  scheduler.reap_idle_after_s = 1e300;
  EXPECT_NE(config_error_of([&] { (void)RouterLimits::from(scheduler); }).find("scheduler.reap_idle_after_s"),
            std::string::npos);
}

TEST(EntryPointValidation, RouterBatchLengthMismatchIsAnArgumentError) {
  PhaseRouter router(testing::id_model(), RouterLimits{});
  const std::vector<RequestId> ids{1, 2};
  const std::vector<TokenId> tokens{testing::kWord};
  std::vector<PhaseEvent> events(2);
  EXPECT_THROW(router.on_tokens(ids, tokens, events), InvalidArgument);
}

// The batch path carries decoded text, so prose-marker models change phase on it.
TEST(EntryPointValidation, GraniteChangesPhaseThroughTheBatchPath) {
  PhaseRouter router(MeridianConfig::defaults(), "granite_3_2");
  router.begin(1);
  router.begin(2);
  const std::vector<RequestId> ids{1, 2, 1};
  const std::vector<TokenId> tokens{500, 501, 502};
  const std::vector<std::string_view> texts{"Here is my thought process:", "Hello", " Here is my response:"};
  std::vector<PhaseEvent> events(ids.size());
  events.resize(router.on_tokens(ids, tokens, events, texts));
  ASSERT_EQ(events.size(), 2U);
  EXPECT_EQ(events[0].kind, PhaseEventKind::kEnterThink);
  EXPECT_EQ(events[1].kind, PhaseEventKind::kExitThink);
  EXPECT_EQ(router.snapshot(2)->phase, Phase::kOutputDecode);
}

TEST(EntryPointValidation, SchedulerChecksItsSectionsAndOptions) {
  MeridianConfig config = MeridianConfig::defaults();
  config.scheduler.preempt_max_fraction = 1.5;
  EXPECT_NE(config_error_of([&] {
              (void)SchedulerOptions::from_config(config, 100);
            }).find("scheduler.preempt_max_fraction"),
            std::string::npos);

  SchedulerOptions options;
  options.think_batch_multiplier = std::numeric_limits<double>::infinity();
  EXPECT_THROW(DualQueueScheduler(options, StepCostModel({6.0, 0.03, 0.044}, false, 1.0)), InvalidArgument);

  DualQueueScheduler scheduler(SchedulerOptions{}, StepCostModel({6.0, 0.03, 0.044}, false, 1.0));
  scheduler.add({1, Phase::kThinkDecode, 10, 0, 0});
  EXPECT_THROW(scheduler.add({1, Phase::kThinkDecode, 10, 0, 0}), InvalidArgument);
}

TEST(EntryPointValidation, BlockManagerChecksItsSectionAndIndices) {
  MeridianConfig config = MeridianConfig::defaults();
  config.kv_memory.think_phase_memory_fraction = 1.5;
  EXPECT_NE(config_error_of([&] {
              (void)KvBlockManagerOptions::from_config(config, 1 << 20);
            }).find("kv_memory.think_phase_memory_fraction"),
            std::string::npos);

  KvBlockManagerOptions options;
  options.num_blocks = 8;
  const KvBlockManager kv(options);
  EXPECT_THROW((void)kv.tier_of(8), OutOfRange);
}

TEST(EntryPointValidation, EntropyProbeChecksItsSettings) {
  MeridianConfig config = MeridianConfig::defaults();
  config.entropy.ema_alpha = 1.5;
  EXPECT_NE(config_error_of([&] { (void)ProbeSettings::from(config); }).find("entropy.ema_alpha"),
            std::string::npos);

  ProbeSettings settings;
  settings.ema_alpha = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(EntropyProbe probe(settings), InvalidArgument);
  settings.ema_alpha = 0.5;
  EntropyProbe probe(settings);
  probe.observe({.think_tokens = 5});
  EXPECT_THROW(probe.observe({.think_tokens = 4}), InvalidArgument);  // think tokens never go back
}

TEST(EntryPointValidation, SectionValidatorsKeepTheDottedPaths) {
  SchedulerConfig scheduler;
  scheduler.output_tpot_budget_ms = 0;
  EXPECT_NE(config_error_of([&] { validate_or_throw(scheduler); }).find("scheduler.output_tpot_budget_ms"),
            std::string::npos);
  EntropyConfig entropy;
  entropy.rpdi_window_tokens = 0;
  EXPECT_NE(config_error_of([&] { validate_or_throw(entropy); }).find("entropy.rpdi_window_tokens"),
            std::string::npos);
  KvMemoryConfig kv;
  kv.block_size_bytes = 0;
  EXPECT_NE(config_error_of([&] { validate_or_throw(kv); }).find("kv_memory.block_size_bytes"),
            std::string::npos);
  // Valid sections pass.
  validate_or_throw(SchedulerConfig{});
  validate_or_throw(EntropyConfig{});
  validate_or_throw(KvMemoryConfig{});
  validate_or_throw(MeridianConfig::defaults().model("granite_3_2"));
}

}  // namespace
}  // namespace meridian
