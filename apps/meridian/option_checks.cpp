// The CLI's numeric option checks (option_checks.h).
#include "option_checks.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include "meridian/net_address.h"

namespace meridian::cli {
namespace {

// Long values are cut in messages so a pasted blob does not flood the terminal.
std::string shown(std::string_view text) {
  constexpr std::size_t kMaxShown = 40;
  if (text.size() <= kMaxShown) return fmt::format("'{}'", text);
  return fmt::format("'{}...' ({} characters)", text.substr(0, kMaxShown), text.size());
}

}  // namespace

CLI::Validator integer_in(std::uint64_t min, std::uint64_t max) {
  const std::string rule = fmt::format("an integer in [{}, {}]", min, max);
  return {[min, max, rule](std::string& text) -> std::string {
            std::uint64_t value = 0;
            const char* end = text.data() + text.size();
            const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
            const auto [ptr, ec] = std::from_chars(text.data(), end, value);
            if (!digits || ec != std::errc{} || ptr != end || value < min || value > max) {
              return fmt::format("must be {}; got {}", rule, shown(text));
            }
            text = fmt::format("{}", value);  // "010" is ten, not CLI11's octal eight
            return {};
          },
          fmt::format("INT in [{}, {}]", min, max)};
}

CLI::Validator number_in(double min, double max, bool min_exclusive) {
  const std::string rule = fmt::format("a finite number in {}{}, {}]", min_exclusive ? "(" : "[", min, max);
  return {[min, max, min_exclusive, rule](std::string& text) -> std::string {
            // strtod, not from_chars: it also reads the forms CLI11 converts ("1e3", "0x1p4").
            errno = 0;
            char* end = nullptr;
            const double value = text.empty() ? NAN : std::strtod(text.c_str(), &end);
            const bool parsed = !text.empty() && end == text.c_str() + text.size() && errno == 0;
            const bool above = min_exclusive ? value > min : value >= min;
            if (!parsed || !std::isfinite(value) || !above || value > max) {
              return fmt::format("must be {}; got {}", rule, shown(text));
            }
            return {};
          },
          fmt::format("NUMBER in {}{}, {}]", min_exclusive ? "(" : "[", min, max)};
}

namespace {

// The items between commas, empty ones included ("a," is {"a", ""}).
std::vector<std::string> items_of(std::string_view text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    items.emplace_back(text.substr(start, comma == std::string_view::npos ? text.npos : comma - start));
    if (comma == std::string_view::npos) return items;
    start = comma + 1;
  }
}

// "item N of 'TEXT' is empty (a stray comma?)" for the first empty item; "" when there is none.
std::string empty_item_problem(const std::vector<std::string>& items, std::string_view text) {
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (items[i].empty()) return fmt::format("item {} of {} is empty (a stray comma?)", i + 1, shown(text));
  }
  return {};
}

}  // namespace

std::vector<std::string> split_list(std::string_view text, std::string_view option) {
  std::vector<std::string> items = items_of(text);
  if (const std::string problem = empty_item_problem(items, text); !problem.empty()) {
    throw UsageError(fmt::format("{}: {}", option, problem));
  }
  return items;
}

CLI::Validator number_list_in(double min, double max, bool min_exclusive) {
  const CLI::Validator each = number_in(min, max, min_exclusive);
  return {[each](std::string& text) -> std::string {
            std::vector<std::string> items = items_of(text);
            if (std::string problem = empty_item_problem(items, text); !problem.empty()) return problem;
            for (std::size_t i = 0; i < items.size(); ++i) {
              if (std::string problem = each(items[i]); !problem.empty()) {
                return fmt::format("item {}: {}", i + 1, problem);
              }
            }
            return {};
          },
          "NUMBER[,NUMBER...]"};
}

CLI::Validator listen_host() {
  return {[](std::string& text) -> std::string {
            if (std::string problem = listen_host_problem(text); !problem.empty()) return problem;
            text = canonical_listen_host(text);
            return {};
          },
          "ADDRESS"};
}

}  // namespace meridian::cli
