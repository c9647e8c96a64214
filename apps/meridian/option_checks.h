// Validators for the CLI's numeric options, and the error a command line
// that is wrong by itself raises. CLI11 2.1 converts "-1" into an unsigned
// option by wrapping it to 2^64 - 1, reads "010" as octal and saturates
// out-of-range integers, so every integer and float option goes through one
// of these checks before CLI11 converts it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "meridian/error.h"

namespace meridian::cli {

/// A command line that is wrong by itself (a value out of range, options that
/// exclude each other, an unknown name): `meridian` exits with status 2, as
/// for an option CLI11 rejects while parsing. Failures of the work itself exit 1.
class UsageError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

/// Exit status of a usage error.
inline constexpr int kUsageExitCode = 2;

/// A decimal integer (digits only) in [min, max]; rewrites it without leading
/// zeros, so pass it to Option::transform (check() would discard the rewrite).
[[nodiscard]] CLI::Validator integer_in(std::uint64_t min, std::uint64_t max);

/// A finite number in [min, max], or in (min, max] when `min_exclusive`.
[[nodiscard]] CLI::Validator number_in(double min, double max, bool min_exclusive = false);

/// The items of a comma-separated list, refusing an empty one ("a,", ",a", "a,,b": a stray
/// comma would otherwise drop an item without a word). `option` names it in the error.
[[nodiscard]] std::vector<std::string> split_list(std::string_view text, std::string_view option);

/// A comma-separated list of numbers, each as number_in(min, max, min_exclusive); no empty item.
[[nodiscard]] CLI::Validator number_list_in(double min, double max, bool min_exclusive = false);

/// A host to listen on (net_address.h: numeric IPv4/IPv6 or localhost);
/// rewrites it to the canonical form that is bound, so pass it to
/// Option::transform.
[[nodiscard]] CLI::Validator listen_host();

}  // namespace meridian::cli
