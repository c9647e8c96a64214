// Network addresses taken from users: a host to listen on and an OTLP/HTTP
// endpoint, checked once here and shared by the configuration, the CLI, the
// metrics server and the Python package (issue 27: civetweb read
// "256.0.0.0" as 0.0.0.0, every interface, and "999.1.1.1" as 231.1.1.1).
//
// Thread-safety: free functions without state; safe from any thread.
#pragma once

#include <string>
#include <string_view>

namespace meridian {

/// The numeric form of a host to listen on: a dotted-quad IPv4 address (four
/// parts, each 0-255, no shorthand such as "127.1" or "0x7f.0.0.1"), an IPv6
/// address (with or without brackets) or "localhost" (127.0.0.1). Returns
/// it as inet_ntop writes it (an IPv4-mapped IPv6 address as the IPv4
/// address a socket binds), or an empty string when `host` is none of
/// these. Host names other than localhost are refused: a listener binds an
/// address, and a name could resolve to any interface.
[[nodiscard]] std::string canonical_listen_host(std::string_view host);

/// What is wrong with `host` as a listen address ("" when it is valid),
/// phrased to follow "<where> ": e.g. `must be an IPv4 or IPv6 address or
/// localhost; got "999.1.1.1"`. The address of every interface is valid only
/// written as 0.0.0.0 or :: (brackets allowed): "::ffff:0.0.0.0" and
/// "0:0:0:0:0:0:0:0" are refused.
[[nodiscard]] std::string listen_host_problem(std::string_view host);

/// What is wrong with an OTLP/HTTP base endpoint ("" when valid), phrased to
/// follow "<where> ": it must be an http:// or https:// URL with a host, an
/// optional port in 1..65535, no query, fragment or whitespace, and not end
/// in /v1/metrics or /v1/traces (those are added to it). The same rules as
/// meridian.telemetry.otlp.otlp_signal_urls.
[[nodiscard]] std::string otlp_endpoint_problem(std::string_view endpoint);

}  // namespace meridian
