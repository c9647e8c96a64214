// meridian.toml reader: parse_config() may only throw ConfigError; a config it
// accepts must round-trip through to_toml(), print as JSON, and build every
// component that takes it (a validated config the router or scheduler then
// rejects is a validation gap).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "meridian/config.h"
#include "meridian/kv_block_manager.h"
#include "meridian/phase_router.h"
#include "meridian/scheduler.h"
#include "meridian/step_cost_model.h"

namespace meridian::fuzz {
namespace {

void build_components(const MeridianConfig& config) {
  for (const auto& [name, model] : config.models) {
    const PhaseRouter router(config, name);
    check(router.tracked() == 0, "a new router tracks nothing");
  }
  // A small device keeps the pool allocation cheap; the options are what matters.
  const std::uint64_t capacity = config.kv_memory.resolve_capacity_bytes(std::uint64_t{1} << 30);
  const std::uint64_t blocks = capacity / config.kv_memory.block_size_bytes;
  if (blocks > 0 && blocks <= (1U << 20)) {
    const KvBlockManager kv(KvBlockManagerOptions::from_config(config, capacity));
    check(kv.check_invariants().empty(), "a new block manager is consistent");
  }
  const DualQueueScheduler scheduler(SchedulerOptions::from_config(config, blocks == 0 ? 1 : blocks),
                                     StepCostModel::from_config(config.scheduler));
  check(scheduler.size() == 0, "a new scheduler holds nothing");
}

void run(std::string_view text) {
  MeridianConfig config;
  try {
    config = parse_config(text, "<fuzz>");
  } catch (const ConfigError& e) {
    check(!e.issues().empty(), "a ConfigError names at least one issue");
    return;
  }
  const std::string toml = to_toml(config);
  MeridianConfig again;
  try {
    again = parse_config(toml, "<to_toml>");
  } catch (const ConfigError& e) {
    finding(std::string("to_toml() output does not parse back:\n") + e.what() + "\n--- document ---\n" +
            toml);
  }
  check(again == config, "to_toml() output parses back to a different config:\n" + toml);
  check(to_toml(again) == toml, "to_toml() is not a fixed point");
  static_cast<void>(to_json(config));
  build_components(config);
}

}  // namespace
}  // namespace meridian::fuzz

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry point
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return meridian::fuzz::run_input([&] { meridian::fuzz::run(meridian::fuzz::as_text(data, size)); });
}
