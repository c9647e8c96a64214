// Python view of the metric catalog, the MetricRegistry and the EngineMetrics
// feeds (meridian/metric_catalog.h, meridian/metrics.h): what the vLLM
// plugin's exporters (prometheus_client, OTLP) read and fill. Metrics and
// label values are named by strings here and turned into the catalog's
// indices; an unknown name or value, a wrong label count or a call that does
// not fit the metric's type is a ValueError naming it (in C++ such a call is
// a counted no-op, but Python callers are better served by an error).
#include <array>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "meridian/config.h"
#include "meridian/error.h"
#include "meridian/kv_block_manager.h"
#include "meridian/kv_offload_counters.h"
#include "meridian/metrics.h"
#include "meridian/phase_router.h"
#include "meridian/request_clock.h"
#include "meridian/scheduler.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace meridian::python {
namespace {

using telemetry::EngineMetrics;
using telemetry::MetricId;
using telemetry::MetricRegistry;
using telemetry::MetricSpec;
using telemetry::MetricType;
using telemetry::RequestClock;

struct Series {
  MetricId id;
  std::array<std::uint8_t, telemetry::kMaxLabels> labels{};
  std::size_t label_count = 0;
};

// The metric `name` with label values `labels` (in the catalog's label
// order), checked against `expected` types; throws InvalidArgument naming what is wrong.
Series resolve(std::string_view name, const std::vector<std::string>& labels, std::string_view call,
               std::initializer_list<MetricType> expected) {
  const auto id = telemetry::find_metric(name);
  if (!id) throw InvalidArgument(fmt::format("unknown metric '{}' (not in the metric catalog)", name));
  const MetricSpec& s = telemetry::spec(*id);
  bool type_ok = false;
  for (const MetricType t : expected) type_ok = type_ok || t == s.type;
  if (!type_ok) {
    throw InvalidArgument(
        fmt::format("{}() does not apply to metric '{}', a {}", call, name, to_string(s.type)));
  }
  if (labels.size() != s.labels.size()) {
    std::string names;
    for (const auto& l : s.labels) names += fmt::format("{}'{}'", names.empty() ? "" : ", ", l.name);
    throw InvalidArgument(fmt::format("metric '{}' takes {} label value(s) ({}), got {}", name,
                                      s.labels.size(), names.empty() ? "none" : names, labels.size()));
  }
  Series series{*id};
  series.label_count = labels.size();
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const auto index = telemetry::label_value_index(s, i, labels[i]);
    if (!index) {
      std::string values;
      for (const auto v : s.labels[i].values) values += fmt::format("{}'{}'", values.empty() ? "" : ", ", v);
      throw InvalidArgument(fmt::format("unknown value '{}' of label '{}' of metric '{}' (one of {})",
                                        labels[i], s.labels[i].name, name, values));
    }
    series.labels[i] = *index;
  }
  return series;
}

// The registry's calls take an initializer_list; the catalog has at most two labels.
template <typename Call>
auto with_labels(const Series& s, Call&& call) {
  static_assert(telemetry::kMaxLabels == 2, "extend with_labels for more labels");
  switch (s.label_count) {
    case 0: return call(std::initializer_list<std::uint8_t>{});
    case 1: return call(std::initializer_list<std::uint8_t>{s.labels[0]});
    default: return call(std::initializer_list<std::uint8_t>{s.labels[0], s.labels[1]});
  }
}

nb::list to_list(std::span<const double> values) {
  nb::list out;
  for (const double v : values) out.append(v);
  return out;
}

nb::dict spec_dict(const MetricSpec& s) {
  nb::dict d;
  d["name"] = std::string(s.name);
  d["type"] = std::string(to_string(s.type));
  d["unit"] = std::string(s.unit);
  nb::list labels;
  for (const auto& l : s.labels) {
    nb::list values;
    for (const auto v : l.values) values.append(std::string(v));
    labels.append(nb::make_tuple(std::string(l.name), values));
  }
  d["labels"] = labels;
  d["buckets"] = to_list(s.buckets);
  d["help"] = std::string(s.help);
  d["source"] = std::string(s.source);
  d["action"] = std::string(s.action);
  return d;
}

nb::list snapshot_list(const MetricRegistry& registry) {
  nb::list families;
  for (const auto& f : registry.snapshot()) {
    const MetricSpec& s = *f.spec;
    nb::list series;
    for (const auto& one : f.series) {
      nb::dict labels;
      for (std::size_t i = 0; i < s.labels.size(); ++i) {
        labels[std::string(s.labels[i].name).c_str()] = std::string(s.labels[i].values[one.label_index[i]]);
      }
      nb::dict d;
      d["labels"] = labels;
      d["value"] = one.value;
      nb::list buckets;
      for (const auto b : one.bucket_counts) buckets.append(b);
      d["bucket_counts"] = buckets;
      d["sum"] = one.sum;
      d["count"] = one.count;
      series.append(d);
    }
    nb::dict family;
    family["name"] = std::string(s.name);
    family["type"] = std::string(to_string(s.type));
    family["series"] = series;
    families.append(family);
  }
  return families;
}

}  // namespace

void bind_telemetry(nb::module_& m) {
  m.def(
      "metric_catalog",
      [] {
        nb::list out;
        for (const MetricSpec& s : telemetry::metric_catalog()) out.append(spec_dict(s));
        return out;
      },
      "Every metric Meridian exports (the catalog, SPEC §3.9): name, type, unit, labels with their values, "
      "buckets, help, source, action.");

  nb::class_<MetricRegistry>(m, "MetricRegistry",
                             "Live values of every catalog metric (relaxed atomic cells; any thread).")
      .def(nb::init<>())
      .def(
          "add",
          [](MetricRegistry& r, std::string_view name, double delta, const std::vector<std::string>& labels) {
            const Series s = resolve(name, labels, "add", {MetricType::kCounter});
            if (!std::isfinite(delta) || delta < 0) {
              throw InvalidArgument(
                  fmt::format("add() to counter '{}' needs a finite delta >= 0, got {}", name, delta));
            }
            with_labels(s, [&](auto l) { r.add(s.id, delta, l); });
          },
          "name"_a, "delta"_a, "labels"_a = std::vector<std::string>{},
          "Add `delta` (>= 0) to a counter series.")
      .def(
          "set",
          [](MetricRegistry& r, std::string_view name, double value, const std::vector<std::string>& labels) {
            const Series s = resolve(name, labels, "set", {MetricType::kGauge, MetricType::kCounter});
            with_labels(s, [&](auto l) { r.set(s.id, value, l); });
          },
          "name"_a, "value"_a, "labels"_a = std::vector<std::string>{},
          "Set a gauge; or mirror a monotonic total into a counter (a smaller value is ignored).")
      .def(
          "observe",
          [](MetricRegistry& r, std::string_view name, double value, const std::vector<std::string>& labels) {
            const Series s = resolve(name, labels, "observe", {MetricType::kHistogram});
            with_labels(s, [&](auto l) { r.observe(s.id, value, l); });
          },
          "name"_a, "value"_a, "labels"_a = std::vector<std::string>{},
          "Count one observation in a histogram.")
      .def(
          "value",
          [](const MetricRegistry& r, std::string_view name, const std::vector<std::string>& labels) {
            const Series s = resolve(name, labels, "value",
                                     {MetricType::kCounter, MetricType::kGauge, MetricType::kHistogram});
            return with_labels(s, [&](auto l) { return r.value(s.id, l); });
          },
          "name"_a, "labels"_a = std::vector<std::string>{},
          "A counter/gauge series' value, or a histogram series' count.")
      .def("misuse_count", &MetricRegistry::misuse_count)
      .def("snapshot", &snapshot_list,
           "Every family in catalog order: {name, type, series: [{labels, value, bucket_counts (per bucket, "
           "last +Inf), sum, count}]}.");

  nb::class_<EngineMetrics>(
      m, "EngineMetrics",
      "Feeds a MetricRegistry from the router, scheduler, block manager and engine loop "
      "(one per engine loop; keeps the registry alive).")
      .def(nb::init<MetricRegistry&>(), "registry"_a, nb::keep_alive<1, 2>())
      .def(
          "sync_router", [](EngineMetrics& e, const PhaseRouter& router) { e.sync(router); }, "router"_a)
      .def(
          "sync_scheduler", [](EngineMetrics& e, const DualQueueScheduler& scheduler) { e.sync(scheduler); },
          "scheduler"_a)
      .def(
          "sync_kv",
          [](EngineMetrics& e, const KvBlockManager& kv, std::string_view fabric) {
            if (!fabric.empty() &&
                !telemetry::label_value_index(telemetry::spec(MetricId::kDisaggBlocksOffloaded), 0, fabric)) {
              throw InvalidArgument(
                  fmt::format("unknown fabric '{}' for meridian_disagg_blocks_offloaded_total", fabric));
            }
            e.sync(kv, fabric);
          },
          "kv"_a, "fabric"_a = "")
      .def(
          "sync_offload",
          [](EngineMetrics& e, const KvOffloadCounters& counters, std::string_view fabric) {
            if (!telemetry::label_value_index(telemetry::spec(MetricId::kDisaggBlocksOffloaded), 0, fabric)) {
              throw InvalidArgument(
                  fmt::format("unknown fabric '{}' for the meridian_disagg_* metrics", fabric));
            }
            e.sync_offload(counters, fabric);
          },
          "counters"_a, "fabric"_a,
          "Mirror KvOffloader.counters into the meridian_disagg_* families under `fabric` (its fabric_label)")
      .def("record_step", &EngineMetrics::record_step, "stats"_a, "schedule_seconds"_a)
      .def("record_event", &EngineMetrics::record_event, "event"_a)
      .def("record_output_itl", &EngineMetrics::record_output_itl, "gap_s"_a)
      .def(
          "record_request",
          [](EngineMetrics& e, double ttft_s, double ttfv_s, double ttot_s, double e2e_s, bool completed,
             bool slo_met, const std::vector<std::string>& missed) {
            std::uint8_t bits = 0;
            for (const std::string& name : missed) {
              std::uint8_t bit = 0;
              while (bit < kSloMissBounds && slo_miss_name(bit) != name) ++bit;
              if (bit == kSloMissBounds) {
                throw nb::value_error(("EngineMetrics.record_request: missed names an unknown SLO bound '" +
                                       name + "' (incomplete, ttft, ttfv, think_tpot, output_tpot)")
                                          .c_str());
              }
              bits |= static_cast<std::uint8_t>(1U << bit);
            }
            if (slo_met && bits != 0) {
              throw nb::value_error("EngineMetrics.record_request: slo_met=True with bounds missed");
            }
            e.record_request({ttft_s, ttfv_s, ttot_s, e2e_s, completed, slo_met, bits});
          },
          "ttft_s"_a = -1.0, "ttfv_s"_a = -1.0, "ttot_s"_a = -1.0, "e2e_s"_a = -1.0, "completed"_a = false,
          "slo_met"_a = false, "missed"_a = std::vector<std::string>{},
          "Records one finished request; `missed` names the SLO bounds it missed "
          "(meridian_slo_bound_misses_total{bound})");

  nb::class_<RequestClock>(m, "RequestClock",
                           "Per-request wall-clock times of an engine adapter (TTFT, TTFV, TTOT, answer ITL, "
                           "E2E, SLO verdict) recorded into an EngineMetrics (one per engine loop; keeps the "
                           "feed alive)")
      .def(
          "__init__",
          [](RequestClock* self, EngineMetrics& feed, double ttft_s, double output_tpot_s,
             double think_tpot_s, const std::vector<TokenId>& think_start_ids, double ttfv_s) {
            new (self) RequestClock(feed, {ttft_s, output_tpot_s, think_tpot_s, ttfv_s}, think_start_ids);
          },
          "feed"_a, "ttft_s"_a, "output_tpot_s"_a, "think_tpot_s"_a, "think_start_ids"_a, "ttfv_s"_a = 0.0,
          nb::keep_alive<1, 2>())
      .def(
          "__init__",
          [](RequestClock* self, EngineMetrics& feed, const MeridianConfig& config,
             const std::vector<TokenId>& think_start_ids) {
            new (self) RequestClock(feed, RequestClock::slo_of(config.scheduler), think_start_ids);
          },
          "feed"_a, "config"_a, "think_start_ids"_a, nb::keep_alive<1, 2>(),
          "The verdict's bounds from the configuration's [scheduler] (RequestClock::slo_of)")
      .def("add", &RequestClock::add, "request_id"_a, "arrival_s"_a, "thinking"_a)
      .def("set_thinking", &RequestClock::set_thinking, "request_id"_a, "thinking"_a)
      .def("think_ended", &RequestClock::think_ended, "request_id"_a, "now_s"_a)
      .def("sampled", &RequestClock::sampled, "request_id"_a, "first_token"_a, "now_s"_a)
      .def("finish", &RequestClock::finish, "request_id"_a, "completed"_a, "think_tokens"_a, "now_s"_a)
      .def("__len__", &RequestClock::size);
}

}  // namespace meridian::python
