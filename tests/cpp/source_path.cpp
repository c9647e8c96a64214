#include "source_path.h"

namespace meridian::test {

std::string source_path(std::string_view relative) {
  std::string path = MERIDIAN_SOURCE_DIR;
  path += '/';
  path += relative;
  return path;
}

}  // namespace meridian::test
