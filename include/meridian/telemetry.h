// Prometheus export of a MetricRegistry (meridian/metrics.h) with
// prometheus-cpp: a Collectable that turns snapshots into metric families,
// the text exposition format, and an HTTP server for `/metrics`.
//
// Target meridian::meridian_telemetry (links prometheus-cpp::core publicly,
// prometheus-cpp::pull privately); meridian_core stays free of prometheus-cpp.
//
// Thread-safety: RegistryCollectable::Collect() and exposition_text() may be
// called from any thread (they only read the registry's atomic cells).
// MetricsServer serves scrapes from its own worker threads; construct and
// destroy it from one thread.
// Ownership: RegistryCollectable and MetricsServer refer to a MetricRegistry
// they do not own; it must outlive them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meridian/metrics.h"
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

namespace meridian::telemetry {

/// Every catalog metric of `registry`, as prometheus-cpp metric families:
/// HELP from the catalog, label names and values as strings, histogram
/// buckets cumulative with their `le` bounds (+Inf last).
class RegistryCollectable final : public prometheus::Collectable {
 public:
  explicit RegistryCollectable(const MetricRegistry& registry) : registry_(registry) {}
  [[nodiscard]] std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const MetricRegistry& registry_;
};

/// The Prometheus text exposition (version 0.0.4) of `registry`.
[[nodiscard]] std::string exposition_text(const MetricRegistry& registry);

/// Serves `registry` at http://host:port/metrics until destroyed.
class MetricsServer {
 public:
  /// `port` 0 picks a free ephemeral port (see port()). `host` must be a
  /// numeric address or localhost (listen_host_problem(), net_address.h;
  /// InvalidArgument otherwise, also for an IPv6 host when !serves_ipv6()).
  /// Throws meridian::Error naming host:port when it cannot listen (the port
  /// is in use, the host is not a local address).
  MetricsServer(const MetricRegistry& registry, const std::string& host, std::uint16_t port);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  MetricsServer(MetricsServer&&) = delete;
  MetricsServer& operator=(MetricsServer&&) = delete;

  /// The port it listens on (the bound one when constructed with 0).
  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
  /// The address it listens on, in canonical form ("127.0.0.1" for "localhost").
  [[nodiscard]] const std::string& host() const noexcept { return host_; }
  /// "http://host:port/metrics", with the address and port it is bound to.
  [[nodiscard]] std::string url() const;
  /// Whether the HTTP server underneath (civetweb) was built with IPv6: Debian's is not.
  [[nodiscard]] static bool serves_ipv6() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string host_;
  std::uint16_t port_ = 0;
};

}  // namespace meridian::telemetry
