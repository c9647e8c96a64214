// The prometheus-cpp exporter: the exposition text of every catalog metric
// (HELP, TYPE, labels, cumulative buckets) and the real HTTP server, scraped
// over a plain socket.
#include <map>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "meridian/error.h"
#include "meridian/telemetry.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace meridian::telemetry {
namespace {

// Sample lines ("name{labels} value") keyed by everything before the value.
std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

std::string http_get(std::uint16_t port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  EXPECT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  std::string response;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    response.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return response;
}

TEST(PrometheusExporter, ExpositionHasEveryCatalogMetricWithHelpTypeAndLabels) {
  MetricRegistry registry;
  registry.add(MetricId::kPreemptions, 3, {1, 0});
  registry.set(MetricId::kQueueDepth, 4, {1});
  registry.observe(MetricId::kSchedulerBatchSize, 3, {0});
  registry.observe(MetricId::kSchedulerBatchSize, 5000, {0});
  const std::string text = exposition_text(registry);
  for (const MetricSpec& s : metric_catalog()) {
    // Counters are exposed under their catalog name, which already ends in _total.
    EXPECT_NE(text.find("# HELP " + std::string(s.name) + " " + std::string(s.help) + "\n"),
              std::string::npos)
        << s.name;
    EXPECT_NE(text.find("# TYPE " + std::string(s.name) + " " + std::string(to_string(s.type)) + "\n"),
              std::string::npos)
        << s.name;
  }
  const auto values = samples(text);
  ASSERT_TRUE(values.count("meridian_preemptions_total{phase=\"think\",mode=\"recompute\"}")) << text;
  ASSERT_TRUE(values.count("meridian_scheduler_batch_size_bucket{phase=\"output\",le=\"4\"}")) << text;
  EXPECT_EQ(values.at("meridian_preemptions_total{phase=\"think\",mode=\"recompute\"}"), 3);
  EXPECT_EQ(values.at("meridian_preemptions_total{phase=\"output\",mode=\"swap\"}"), 0);
  EXPECT_EQ(values.at("meridian_queue_depth{queue=\"think\"}"), 4);
  // Cumulative buckets: 3 is in le=4 and every bucket above; 5000 only in +Inf.
  EXPECT_EQ(values.at("meridian_scheduler_batch_size_bucket{phase=\"output\",le=\"2\"}"), 0);
  EXPECT_EQ(values.at("meridian_scheduler_batch_size_bucket{phase=\"output\",le=\"4\"}"), 1);
  EXPECT_EQ(values.at("meridian_scheduler_batch_size_bucket{phase=\"output\",le=\"1024\"}"), 1);
  EXPECT_EQ(values.at("meridian_scheduler_batch_size_bucket{phase=\"output\",le=\"+Inf\"}"), 2);
  EXPECT_EQ(values.at("meridian_scheduler_batch_size_count{phase=\"output\"}"), 2);
  EXPECT_EQ(values.at("meridian_scheduler_batch_size_sum{phase=\"output\"}"), 5003);
  EXPECT_EQ(text.find("vllm"), std::string::npos);
}

TEST(PrometheusExporter, TheHostIsCheckedAndTheBoundAddressReported) {
  // Issue 27: civetweb read "256.0.0.0" as 0.0.0.0, every interface.
  const MetricRegistry registry;
  for (const char* bad : {"256.0.0.0", "999.1.1.1", "127.1", "example.com"}) {
    EXPECT_THROW(MetricsServer(registry, bad, 0), InvalidArgument) << bad;
  }
  const MetricsServer local(registry, "localhost", 0);
  EXPECT_EQ(local.host(), "127.0.0.1");
  EXPECT_EQ(local.url(), fmt::format("http://127.0.0.1:{}/metrics", local.port()));
  // The address actually bound, not the spelling: an IPv4-mapped host binds (and is) IPv4.
  const MetricsServer mapped(registry, "::ffff:127.0.0.1", 0);
  EXPECT_EQ(mapped.url(), fmt::format("http://127.0.0.1:{}/metrics", mapped.port()));
  EXPECT_THROW(MetricsServer(registry, "::ffff:0.0.0.0", 0), InvalidArgument);
  // IPv6 validated but never bound ("port in use?") where civetweb has no IPv6: a clear refusal.
  if (MetricsServer::serves_ipv6()) {
    const MetricsServer v6(registry, "::1", 0);
    EXPECT_EQ(v6.url(), fmt::format("http://[::1]:{}/metrics", v6.port()));
  } else {
    try {
      const MetricsServer v6(registry, "::1", 0);
      FAIL() << "bound";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("listens on IPv4 only"), std::string::npos) << e.what();
    }
  }
}

TEST(PrometheusExporter, ServerOnAnEphemeralPortServesLiveValues) {
  MetricRegistry registry;
  MetricsServer server(registry, "127.0.0.1", 0);
  ASSERT_NE(server.port(), 0);
  EXPECT_EQ(server.url(), "http://127.0.0.1:" + std::to_string(server.port()) + "/metrics");
  registry.add(MetricId::kSchedulerSteps, 5);
  std::string response = http_get(server.port(), "/metrics");
  ASSERT_EQ(response.rfind("HTTP/1.1 200", 0), 0U) << response.substr(0, 200);
  std::string body = response.substr(response.find("\r\n\r\n") + 4);
  EXPECT_EQ(samples(body).at("meridian_scheduler_steps_total"), 5);
  registry.add(MetricId::kSchedulerSteps, 2);
  body = http_get(server.port(), "/metrics");
  EXPECT_EQ(samples(body.substr(body.find("\r\n\r\n") + 4)).at("meridian_scheduler_steps_total"), 7);
}

TEST(PrometheusExporter, APortInUseIsAnErrorNamingHostAndPort) {
  MetricRegistry registry;
  MetricsServer first(registry, "127.0.0.1", 0);
  try {
    MetricsServer second(registry, "127.0.0.1", first.port());
    FAIL() << "a second server bound the same port";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(first.port())), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace meridian::telemetry
