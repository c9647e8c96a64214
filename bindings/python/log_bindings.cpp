// meridian._meridian.configure_logging / log_level / log_format: the C++
// logger's settings (meridian/log.h), set by meridian.logging_setup so the
// C++ core and the Python `meridian` logger follow one [logging] section.
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bindings.h"
#include "meridian/log.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace meridian::python {

void bind_logging(nb::module_& m) {
  m.def(
      "configure_logging",
      [](const std::string& level, const std::string& format) {
        LoggingConfig config;
        config.level = level;
        config.format = format;
        configure_logging(config);  // InvalidArgument -> ValueError naming the field
      },
      "level"_a, "format"_a = "text",
      "Set the C++ logger's level (trace|debug|info|warn|error|off) and format (text|json); it writes to "
      "stderr. ValueError on other values.");
  m.def(
      "log_level", [] { return std::string(to_string(log_level())); }, "The C++ logger's level");
  m.def(
      "log_format", [] { return std::string(to_string(log_format())); }, "The C++ logger's format");
}

}  // namespace meridian::python
