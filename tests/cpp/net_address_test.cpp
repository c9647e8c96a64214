// Listen hosts and OTLP endpoints (net_address.h): what is accepted, in which
// canonical form, and what each refusal says.
#include "meridian/net_address.h"

#include <gtest/gtest.h>

namespace meridian {
namespace {

TEST(NetAddress, ListenHostsAreNumericOrLocalhostAndCanonical) {
  EXPECT_EQ(canonical_listen_host("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(canonical_listen_host("0.0.0.0"), "0.0.0.0");
  EXPECT_EQ(canonical_listen_host("localhost"), "127.0.0.1");
  EXPECT_EQ(canonical_listen_host("::1"), "::1");
  EXPECT_EQ(canonical_listen_host("[::1]"), "::1");
  EXPECT_EQ(canonical_listen_host("0:0:0:0:0:0:0:1"), "::1");
  EXPECT_EQ(canonical_listen_host("::"), "::");
  // What civetweb or inet_aton would have read as another address.
  for (const char* bad :
       {"256.0.0.0", "999.1.1.1", "127.1", "1.2.3", "0x7f.0.0.1", "2130706433", "0", "", "1.2.3.4.5",
        " 127.0.0.1", "127.0.0.1 ", "example.com", "[::1", "::1]", "1.2.3.4:80", "0177.0.0.1"}) {
    EXPECT_EQ(canonical_listen_host(bad), "") << bad;
    EXPECT_NE(listen_host_problem(bad), "") << bad;
  }
  EXPECT_EQ(
      listen_host_problem("999.1.1.1"),
      "must be an IPv4 address (four parts, each 0-255), an IPv6 address or localhost; got \"999.1.1.1\"");
  EXPECT_EQ(listen_host_problem(std::string_view("1.2.3.4\0x", 9)),
            "must be an IPv4 address (four parts, each 0-255), an IPv6 address or localhost; got "
            "\"1.2.3.4\\x00x\"");
  EXPECT_EQ(listen_host_problem("localhost"), "");
}

TEST(NetAddress, MappedAddressesAreTheIpv4TheyBindAndWildcardsMustBeSpelledOut) {
  // Issue 48: "::ffff:0.0.0.0" passed, bound every IPv4 interface and was reported as itself.
  EXPECT_EQ(canonical_listen_host("::ffff:127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(canonical_listen_host("[::ffff:10.1.2.3]"), "10.1.2.3");
  EXPECT_EQ(canonical_listen_host("::ffff:0.0.0.0"), "0.0.0.0");
  EXPECT_EQ(listen_host_problem("::ffff:127.0.0.1"), "");
  for (const char* disguised :
       {"::ffff:0.0.0.0", "[::ffff:0.0.0.0]", "0:0:0:0:0:0:0:0", "::0", "0::0", "[0:0::0]", "::ffff:0:0"}) {
    EXPECT_NE(listen_host_problem(disguised).find("spells the address of every interface as"),
              std::string::npos)
        << disguised;
  }
  // Asked for in so many words, every interface is allowed.
  for (const char* spelled : {"0.0.0.0", "::", "[::]"})
    EXPECT_EQ(listen_host_problem(spelled), "") << spelled;
}

TEST(NetAddress, OtlpEndpointsFollowThePythonExportersRules) {
  for (const char* good : {"http://localhost:4318", "https://collector.example:443/otlp", "http://[::1]:4318",
                           "http://10.0.0.5", "http://c:4318/"}) {
    EXPECT_EQ(otlp_endpoint_problem(good), "") << good;
  }
  EXPECT_EQ(otlp_endpoint_problem("http://"), "has no host; got \"http://\"");
  EXPECT_EQ(otlp_endpoint_problem("http://:4318"), "has no host; got \"http://:4318\"");
  EXPECT_EQ(otlp_endpoint_problem("grpc://c:4317"),
            "must be an http:// or https:// URL such as http://localhost:4318; got \"grpc://c:4317\"");
  EXPECT_EQ(otlp_endpoint_problem("http://c:0"),
            "has port \"0\": it must be a number in 1..65535; got \"http://c:0\"");
  EXPECT_EQ(otlp_endpoint_problem("http://c:x1"),
            "has port \"x1\": it must be a number in 1..65535; got \"http://c:x1\"");
  EXPECT_EQ(otlp_endpoint_problem("http://c:"), "has a ':' without a port; got \"http://c:\"");
  EXPECT_EQ(otlp_endpoint_problem("http://c/?a=1"),
            "must not have a query or fragment; got \"http://c/?a=1\"");
  EXPECT_EQ(
      otlp_endpoint_problem("http://c/v1/metrics"),
      "is the collector's base URL (e.g. http://localhost:4318); /v1/metrics and /v1/traces are added to "
      "it; got \"http://c/v1/metrics\"");
  EXPECT_EQ(otlp_endpoint_problem("http://c d"), "must not contain whitespace; got \"http://c d\"");
  EXPECT_EQ(otlp_endpoint_problem("http://[::1"), "has an unclosed [ in its host; got \"http://[::1\"");
  EXPECT_EQ(otlp_endpoint_problem("http://u@c"), "must not carry user information; got \"http://u@c\"");
}

}  // namespace
}  // namespace meridian
