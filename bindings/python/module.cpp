#include <nanobind/nanobind.h>

#include "bindings.h"
#include "meridian/error.h"

namespace nb = nanobind;

NB_MODULE(_meridian, m) {
  m.doc() =
      "Meridian core (C++): configuration schema, phase router, scheduler, KV block manager and entropy "
      "probe";
  m.attr("__version__") = "0.1.0";

  // Config and tokenizer problems are bad input: ValueError, whose text lists
  // every issue with its dotted path. Other Meridian errors are RuntimeError.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const meridian::ConfigError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const meridian::TokenizerError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const meridian::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });

  meridian::python::bind_config(m);
  meridian::python::bind_router(m);
  meridian::python::bind_scheduler(m);
  // Registers meridian.KernelError's translator, which then takes precedence
  // over the RuntimeError one above (nanobind tries the newest first).
  meridian::python::bind_probe(m);
}
