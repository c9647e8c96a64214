#include <string>
#include <string_view>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>

#include "bindings.h"
#include "meridian/error.h"
#include "meridian/row_stats.h"     // KernelError
#include "meridian/sim_workload.h"  // TraceError

namespace nb = nanobind;

NB_MODULE(_meridian, m) {
  m.doc() =
      "Meridian core (C++): configuration schema, phase router, scheduler, KV block manager and entropy "
      "probe";
  m.attr("__version__") = "0.1.0";

  // Meridian's error model at the Python boundary (meridian/error.h): bad
  // input of any kind is ValueError, a name that is not there KeyError, an
  // index outside a container IndexError; the text names the field or value.
  // Other Meridian errors are RuntimeError.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const meridian::ConfigError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const meridian::TokenizerError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const meridian::sim::TraceError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const meridian::InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const meridian::NotFound& e) {
      PyErr_SetString(PyExc_KeyError, e.what());
    } catch (const meridian::OutOfRange& e) {
      PyErr_SetString(PyExc_IndexError, e.what());
    } catch (const meridian::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });

  // Throws the Meridian error `kind` names, so tests can check each mapping
  // above (some kinds, e.g. TraceError, have no Python-facing thrower).
  m.def(
      "_raise_error",
      [](std::string_view kind, const std::string& message) {
        if (kind == "config") throw meridian::ConfigError({{"test.field", message, "", 0, 0}});
        if (kind == "tokenizer") throw meridian::TokenizerError(message);
        if (kind == "trace") throw meridian::sim::TraceError(message);
        if (kind == "invalid_argument") throw meridian::InvalidArgument(message);
        if (kind == "not_found") throw meridian::NotFound(message);
        if (kind == "out_of_range") throw meridian::OutOfRange(message);
        if (kind == "kernel") throw meridian::KernelError(message);
        throw meridian::Error(message);
      },
      nb::arg("kind"), nb::arg("message"), "Raise the Meridian error `kind` (tests of the error mapping)");

  meridian::python::bind_config(m);
  meridian::python::bind_router(m);
  meridian::python::bind_scheduler(m);
  // Registers meridian.KernelError's translator, which then takes precedence
  // over the RuntimeError one above (nanobind tries the newest first).
  meridian::python::bind_probe(m);
  meridian::python::bind_telemetry(m);
  meridian::python::bind_logging(m);
  meridian::python::bind_disagg(m);
  meridian::python::bind_disagg_fabric(m);
  meridian::python::bind_sim(m);
}
