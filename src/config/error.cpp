#include "meridian/error.h"

#include <fmt/format.h>

namespace meridian {
namespace {

std::string join_issues(const std::vector<ConfigIssue>& issues) {
  std::string out;
  for (const ConfigIssue& issue : issues) {
    if (!out.empty()) out += '\n';
    out += issue.describe();
  }
  return out.empty() ? std::string("invalid configuration") : out;
}

}  // namespace

std::string ConfigIssue::describe() const {
  if (line == 0) return source.empty() ? message : fmt::format("{} (in {})", message, source);
  return fmt::format("{} (at {}:{}:{})", message, source, line, column);
}

ConfigError::ConfigError(std::vector<ConfigIssue> issues)
    : Error(join_issues(issues)), issues_(std::move(issues)) {}

}  // namespace meridian
