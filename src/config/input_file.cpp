#include "config/input_file.h"

#include <array>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <system_error>

#include <fmt/format.h>

namespace meridian::input_file {

std::optional<std::string> read_all(const std::filesystem::path& file, std::string& why,
                                    std::size_t max_bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) {
    why = "it is a directory";
    return std::nullopt;
  }
  // stdio rather than iostreams: a failed read() must be told apart from the
  // end of the file, and an ifstream reports both as EOF.
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(std::fopen(file.c_str(), "rb"), &std::fclose);
  if (!in) {
    why = std::generic_category().message(errno);
    return std::nullopt;
  }
  errno = 0;
  std::string text;
  std::array<char, 1U << 16U> buffer{};
  for (;;) {
    const std::size_t n = std::fread(buffer.data(), 1, buffer.size(), in.get());
    if (n > 0 && text.size() + n > max_bytes) {
      why = fmt::format("it is larger than {} MiB", max_bytes >> 20U);
      return std::nullopt;
    }
    text.append(buffer.data(), n);
    if (n < buffer.size()) break;
  }
  if (std::ferror(in.get()) != 0) {
    why = errno != 0 ? std::generic_category().message(errno) : std::string("read error");
    return std::nullopt;
  }
  return text;
}

}  // namespace meridian::input_file
