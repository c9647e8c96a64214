#include "config/input_file.h"

#include <array>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <system_error>

#include <fmt/format.h>

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

namespace meridian::input_file {

std::optional<std::string> read_all(const std::filesystem::path& file, std::string& why,
                                    std::size_t max_bytes, std::chrono::milliseconds fifo_wait) {
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) {
    why = "it is a directory";
    return std::nullopt;
  }
  // stdio rather than iostreams: a failed read() must be told apart from the
  // end of the file, and an ifstream reports both as EOF.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(nullptr, &std::fclose);
  if (std::filesystem::is_fifo(file, ec)) {
    // open() on a FIFO blocks until something opens it for writing, forever if nothing does
    // ($MERIDIAN_CONFIG pointing at a stray FIFO): open without blocking and wait a bounded time
    // for the first byte or the writer's close, then read as from any pipe.
    const int fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      why = std::generic_category().message(errno);
      return std::nullopt;
    }
    pollfd ready{fd, POLLIN, 0};
    int polled = 0;
    do {
      polled = ::poll(&ready, 1, static_cast<int>(fifo_wait.count()));
    } while (polled < 0 && errno == EINTR);
    if (polled <= 0) {
      why = polled == 0 ? fmt::format("it is a FIFO and nothing wrote to it within {} ms", fifo_wait.count())
                        : std::generic_category().message(errno);
      ::close(fd);
      return std::nullopt;
    }
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {  // NOLINT(hicpp-signed-bitwise)
      why = std::generic_category().message(errno);
      ::close(fd);
      return std::nullopt;
    }
    in.reset(::fdopen(fd, "rb"));
    if (!in) {
      why = std::generic_category().message(errno);  // before close() can change errno
      ::close(fd);
      return std::nullopt;
    }
  } else {
    in.reset(std::fopen(file.c_str(), "rb"));
  }
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
