#include "meridian/error.h"

#include <algorithm>

#include <fmt/format.h>

namespace meridian {
namespace {

// what(): the kept issues, one per line, then how many more were found.
std::string join_issues(const std::vector<ConfigIssue>& issues, std::size_t omitted) {
  const std::size_t kept = std::min(issues.size(), ConfigError::kMaxIssues);
  omitted += issues.size() - kept;
  std::string out;
  for (std::size_t i = 0; i < kept; ++i) {
    if (!out.empty()) out += '\n';
    out += issues[i].describe();
  }
  if (omitted > 0) {
    out +=
        fmt::format("{}… and {} more problem{}", out.empty() ? "" : "\n", omitted, omitted == 1 ? "" : "s");
  }
  return out.empty() ? std::string("invalid configuration") : out;
}

}  // namespace

std::string ConfigIssue::describe() const {
  if (line == 0) return source.empty() ? message : fmt::format("{} (in {})", message, source);
  return fmt::format("{} (at {}:{}:{})", message, source, line, column);
}

ConfigError::ConfigError(std::vector<ConfigIssue> issues, std::size_t omitted)
    : Error(join_issues(issues, omitted)), issues_(std::move(issues)), omitted_(omitted) {
  if (issues_.size() > kMaxIssues) {
    omitted_ += issues_.size() - kMaxIssues;
    issues_.resize(kMaxIssues);
  }
}

}  // namespace meridian
