// Paths of files checked into the repository, for tests that read shipped data.
// The source directory is compiled into one small object (source_path.cpp) rather than into
// every test, so the compiler cache can share the tests' objects between clones.
// Thread-safety: pure function. Ownership: returns a new string.
#pragma once

#include <string>
#include <string_view>

namespace meridian::test {

// `relative` (e.g. "tests/data/mrdn_vectors.json") under the source tree this build came from.
std::string source_path(std::string_view relative);

}  // namespace meridian::test
