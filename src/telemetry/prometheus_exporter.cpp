// prometheus-cpp export of the MetricRegistry (meridian/telemetry.h).
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "meridian/error.h"
#include "meridian/net_address.h"
#include "meridian/telemetry.h"
#include <civetweb.h>
#include <prometheus/exposer.h>
#include <prometheus/text_serializer.h>

namespace meridian::telemetry {
namespace {

prometheus::MetricType prometheus_type(MetricType type) {
  switch (type) {
    case MetricType::kCounter: return prometheus::MetricType::Counter;
    case MetricType::kGauge: return prometheus::MetricType::Gauge;
    case MetricType::kHistogram: return prometheus::MetricType::Histogram;
  }
  return prometheus::MetricType::Untyped;
}

prometheus::ClientMetric client_metric(const MetricSpec& spec, const SeriesSnapshot& series) {
  prometheus::ClientMetric m;
  for (std::size_t i = 0; i < spec.labels.size(); ++i) {
    m.label.push_back(
        {std::string(spec.labels[i].name), std::string(spec.labels[i].values[series.label_index[i]])});
  }
  switch (spec.type) {
    case MetricType::kCounter: m.counter.value = series.value; break;
    case MetricType::kGauge: m.gauge.value = series.value; break;
    case MetricType::kHistogram: {
      // The registry keeps per-bucket counts; Prometheus wants cumulative ones.
      // The +Inf bucket is the serializer's, from sample_count; taking the
      // count from the buckets keeps the two equal when a writer races the scrape.
      std::uint64_t cumulative = 0;
      for (std::size_t b = 0; b < spec.buckets.size(); ++b) {
        cumulative += series.bucket_counts[b];
        m.histogram.bucket.push_back({cumulative, spec.buckets[b]});
      }
      cumulative += series.bucket_counts.back();
      m.histogram.sample_count = cumulative;
      m.histogram.sample_sum = series.sum;
      break;
    }
  }
  return m;
}

}  // namespace

std::vector<prometheus::MetricFamily> RegistryCollectable::Collect() const {
  std::vector<prometheus::MetricFamily> families;
  const auto snapshot = registry_.snapshot();
  families.reserve(snapshot.size());
  for (const FamilySnapshot& f : snapshot) {
    prometheus::MetricFamily family;
    family.name = std::string(f.spec->name);
    family.help = std::string(f.spec->help);
    family.type = prometheus_type(f.spec->type);
    family.metric.reserve(f.series.size());
    for (const SeriesSnapshot& s : f.series) family.metric.push_back(client_metric(*f.spec, s));
    families.push_back(std::move(family));
  }
  return families;
}

std::string exposition_text(const MetricRegistry& registry) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, RegistryCollectable(registry).Collect());
  return out.str();
}

struct MetricsServer::Impl {
  std::shared_ptr<RegistryCollectable> collectable;
  std::unique_ptr<prometheus::Exposer> exposer;
};

MetricsServer::MetricsServer(const MetricRegistry& registry, const std::string& host, std::uint16_t port)
    : impl_(std::make_unique<Impl>()), host_(canonical_listen_host(host)) {
  // civetweb parses an address without range checks ("256.0.0.0" bound every
  // interface): only the canonical numeric form reaches it.
  if (const std::string problem = listen_host_problem(host); !problem.empty()) {
    throw InvalidArgument("metrics host " + problem);
  }
  // civetweb's listening_ports syntax: an IPv6 address goes in brackets.
  const bool ipv6 = host_.find(':') != std::string::npos;
  if (ipv6 && !serves_ipv6()) {
    throw InvalidArgument(
        fmt::format("metrics host {}: this build's HTTP server (civetweb, built without IPv6) listens on "
                    "IPv4 only; use an "
                    "IPv4 address such as 127.0.0.1",
                    host_));
  }
  const std::string address = ipv6 ? fmt::format("[{}]:{}", host_, port) : fmt::format("{}:{}", host_, port);
  try {
    impl_->exposer = std::make_unique<prometheus::Exposer>(address, 2);
  } catch (const std::exception& e) {
    throw Error(
        fmt::format("cannot serve metrics on {}: {} (is the port in use, or the host not a local address?)",
                    address, e.what()));
  }
  const std::vector<int> ports = impl_->exposer->GetListeningPorts();
  if (ports.empty() || ports.front() <= 0 || ports.front() > 65535) {
    throw Error(fmt::format("cannot serve metrics on {}: no listening port", address));
  }
  port_ = static_cast<std::uint16_t>(ports.front());
  impl_->collectable = std::make_shared<RegistryCollectable>(registry);
  impl_->exposer->RegisterCollectable(impl_->collectable, "/metrics");
}

MetricsServer::~MetricsServer() = default;

bool MetricsServer::serves_ipv6() noexcept {
  constexpr unsigned kIpv6Feature = 8;  // civetweb.h: mg_check_feature(8), "IPv6"
  return mg_check_feature(kIpv6Feature) != 0;
}

std::string MetricsServer::url() const {
  const bool ipv6 = host_.find(':') != std::string::npos;
  return ipv6 ? fmt::format("http://[{}]:{}/metrics", host_, port_)
              : fmt::format("http://{}:{}/metrics", host_, port_);
}

}  // namespace meridian::telemetry
