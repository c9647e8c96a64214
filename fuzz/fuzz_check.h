// Shared by the harnesses: a finding prints what broke and aborts, so
// libFuzzer saves the input as a crash (fuzz/regressions/ keeps the fixed ones).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>

#include <cxxabi.h>

namespace meridian::fuzz {

[[noreturn]] inline void finding(std::string_view what) {
  std::fprintf(stderr, "\nFUZZ FINDING: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

inline void check(bool ok, std::string_view what) {
  if (!ok) finding(what);
}

/// An exception of a type the surface must not throw (the error model allows
/// exactly one meridian::Error subclass per reader).
[[noreturn]] inline void unexpected(const std::exception& e) {
  int status = 0;
  char* name = abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status);
  std::string message = "unexpected exception ";
  message += status == 0 && name != nullptr ? name : typeid(e).name();
  message += ": ";
  message += e.what();
  std::free(name);  // NOLINT(cppcoreguidelines-no-malloc): __cxa_demangle's buffer
  finding(message);
}

/// Every entry point's body: runs `harness` on one input, and turns an
/// exception that escapes it (the surface's allowed error is caught inside)
/// into a finding. Returns libFuzzer's "input processed".
template <typename Harness>
int run_input(Harness&& harness) {
  try {
    harness();
  } catch (const std::exception& e) {
    unexpected(e);
  }
  return 0;
}

/// The input as text, for the harnesses of text formats.
inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace meridian::fuzz
