// Validation of one config section on its own, for the components that are
// handed a section rather than a whole MeridianConfig (the router, the step
// cost model, the block manager, the bindings). It reuses validate(): the
// section is placed in an otherwise default config with no models, so the
// rules (ranges and cross-field checks) live in one place only.
#include <string_view>
#include <utility>
#include <vector>

#include "meridian/config.h"

namespace meridian {
namespace {

// Issues of `config` whose path lies under `prefix`; throws them as one ConfigError.
void throw_issues_under(const MeridianConfig& config, std::string_view prefix) {
  std::vector<ConfigIssue> issues = validate(config);
  std::erase_if(issues, [&](const ConfigIssue& issue) { return !issue.path.starts_with(prefix); });
  if (!issues.empty()) throw ConfigError(std::move(issues));
}

}  // namespace

void validate_or_throw(const SchedulerConfig& scheduler) {
  MeridianConfig config;
  config.scheduler = scheduler;
  throw_issues_under(config, "scheduler.");
}

void validate_or_throw(const EntropyConfig& entropy) {
  MeridianConfig config;
  config.entropy = entropy;
  throw_issues_under(config, "entropy.");
}

void validate_or_throw(const KvMemoryConfig& kv_memory) {
  MeridianConfig config;
  config.kv_memory = kv_memory;
  throw_issues_under(config, "kv_memory.");
}

void validate_or_throw(const ModelConfig& model) {
  MeridianConfig config;
  config.models.emplace(model.name, model);
  throw_issues_under(config, "model.");
}

}  // namespace meridian
