// Registration functions of the meridian._meridian extension, one per
// component; module.cpp calls them in dependency order.
#pragma once

#include <nanobind/nanobind.h>

namespace meridian::python {

void bind_config(nanobind::module_& m);
void bind_router(nanobind::module_& m);
void bind_scheduler(nanobind::module_& m);
/// meridian.KernelError, EntropySignal and the entropy probe's core; after bind_router (ForceReason).
void bind_probe(nanobind::module_& m);
/// meridian.metric_catalog, MetricRegistry, EngineMetrics; after bind_router and bind_scheduler.
void bind_telemetry(nanobind::module_& m);
/// meridian._meridian.configure_logging, log_level, log_format (the C++ logger).
void bind_logging(nanobind::module_& m);
/// meridian.MrdnError and the MRDN v1 codec (mrdn_encode, mrdn_decode, ...); after bind_scheduler
/// (BlockTier).
void bind_disagg(nanobind::module_& m);
/// InProcessFabric, HostBlockStore, KvOffloader and the PyFabric trampoline; after bind_disagg.
void bind_disagg_fabric(nanobind::module_& m);
/// meridian._meridian.sim: the replay simulator's workload, cost model, metrics and goodput search.
void bind_sim(nanobind::module_& m);

}  // namespace meridian::python
