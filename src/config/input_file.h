// Reading a whole input file (meridian.toml, replay parameters, tokenizer.json)
// so that a path that is not a readable file is an error, never an empty
// document: a directory, a read that fails midway (EIO from /proc/self/mem)
// and an endless stream (/dev/zero) all fail with the reason.
//
// Internal header (not installed). Thread-safety: reentrant.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>

namespace meridian::input_file {

/// Largest input file read (a meridian.toml is a few KiB).
inline constexpr std::size_t kMaxTextFileBytes = std::size_t{64} << 20U;
/// How long a FIFO is waited on for its first byte (or its writer's close) before it is an
/// error: a path that names a FIFO nothing writes to must not hang the reader.
inline constexpr std::chrono::milliseconds kFifoWait{10000};

/// The file's bytes, or std::nullopt with `why` set ("it is a directory",
/// "Input/output error", "it is larger than 64 MiB"). Pipes and character
/// devices are read to their end (process substitution, /dev/stdin); a FIFO
/// that nothing writes to within kFifoWait is an error, not a hang.
[[nodiscard]] std::optional<std::string> read_all(const std::filesystem::path& file, std::string& why,
                                                  std::size_t max_bytes = kMaxTextFileBytes,
                                                  std::chrono::milliseconds fifo_wait = kFifoWait);

}  // namespace meridian::input_file
