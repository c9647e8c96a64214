#include "meridian/net_address.h"

#include <array>
#include <charconv>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "config/toml_fields.h"
#include <arpa/inet.h>
#include <netinet/in.h>

namespace meridian {

using toml_fields::shown;

std::string canonical_listen_host(std::string_view host) {
  if (host == "localhost") return "127.0.0.1";
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  // A NUL would end the text inet_pton reads: "1.2.3.4\0junk" must not pass as 1.2.3.4.
  if (host.empty() || host.size() >= INET6_ADDRSTRLEN || host.find('\0') != std::string_view::npos) return {};
  const std::string text(host);
  std::array<char, INET6_ADDRSTRLEN> out{};
  // inet_pton, unlike inet_aton and getaddrinfo, takes only the dotted quad
  // with each part 0-255 (no "127.1", octal or hex parts).
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return inet_ntop(AF_INET, &v4, out.data(), out.size()) != nullptr ? std::string(out.data())
                                                                      : std::string();
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    // An IPv4-mapped address (::ffff:a.b.c.d) is the IPv4 address a socket ends up bound to:
    // "::ffff:0.0.0.0" listened on every IPv4 interface while it was reported as itself.
    if (IN6_IS_ADDR_V4MAPPED(&v6)) {
      std::memcpy(&v4, &v6.s6_addr[12], sizeof v4);
      return inet_ntop(AF_INET, &v4, out.data(), out.size()) != nullptr ? std::string(out.data())
                                                                        : std::string();
    }
    return inet_ntop(AF_INET6, &v6, out.data(), out.size()) != nullptr ? std::string(out.data())
                                                                       : std::string();
  }
  return {};
}

std::string listen_host_problem(std::string_view host) {
  const std::string canonical = canonical_listen_host(host);
  if (canonical.empty()) {
    return fmt::format(
        "must be an IPv4 address (four parts, each 0-255), an IPv6 address or localhost; got \"{}\"",
        shown(host));
  }
  // Every interface only when asked for in so many words: a wildcard spelled any other way
  // ("::ffff:0.0.0.0", "0:0:0:0:0:0:0:0") is refused rather than bound.
  std::string_view bare = host;
  if (bare.size() >= 2 && bare.front() == '[' && bare.back() == ']') bare = bare.substr(1, bare.size() - 2);
  if ((canonical == "0.0.0.0" || canonical == "::") && bare != canonical) {
    return fmt::format(
        "spells the address of every interface as \"{}\"; write {} to listen on every interface, or a "
        "local address such as 127.0.0.1",
        shown(host), canonical);
  }
  return {};
}

std::string otlp_endpoint_problem(std::string_view endpoint) {
  const auto got = [&] { return fmt::format("; got \"{}\"", shown(endpoint)); };
  std::string_view rest;
  if (endpoint.starts_with("http://")) {
    rest = endpoint.substr(7);
  } else if (endpoint.starts_with("https://")) {
    rest = endpoint.substr(8);
  } else {
    return "must be an http:// or https:// URL such as http://localhost:4318" + got();
  }
  if (endpoint.find_first_of(" \t\r\n") != std::string_view::npos) {
    return "must not contain whitespace" + got();
  }
  if (rest.find_first_of("?#") != std::string_view::npos) return "must not have a query or fragment" + got();
  const std::size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  const std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) return "must not carry user information" + got();
  std::string_view host = authority;
  std::string_view port;
  if (authority.starts_with('[')) {  // [IPv6]:port
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) return "has an unclosed [ in its host" + got();
    host = authority.substr(1, close - 1);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return "has text after its [IPv6] host" + got();
      port = after.substr(1);
    }
  } else if (const std::size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    if (port.empty()) return "has a ':' without a port" + got();
  }
  if (host.empty()) return "has no host" + got();
  if (!port.empty()) {
    std::uint32_t value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
      return fmt::format("has port \"{}\": it must be a number in 1..65535", shown(port)) + got();
    }
  }
  std::string_view trimmed = path;
  while (trimmed.ends_with('/')) trimmed.remove_suffix(1);
  if (trimmed.ends_with("/v1/metrics") || trimmed.ends_with("/v1/traces")) {
    return "is the collector's base URL (e.g. http://localhost:4318); /v1/metrics and /v1/traces are added "
           "to it" +
           got();
  }
  return {};
}

}  // namespace meridian
