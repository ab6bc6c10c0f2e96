#pragma once
/// @file
/// W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` and `tracestate`
/// an event carries from the writer's transaction to the consumer's effect.

#include <cstddef>
#include <string>
#include <string_view>

namespace outbox {

/// The header that carries a W3C `traceparent` (`00-<trace-id>-<parent-id>-<flags>`), under the
/// name OpenTelemetry's propagators read on every transport.
inline constexpr std::string_view traceparent_header = "traceparent";
/// The header that carries a W3C `tracestate` (vendor key=value pairs, comma separated).
inline constexpr std::string_view tracestate_header = "tracestate";

/// The trace context of an event: W3C `traceparent` and `tracestate`, as a tracer's propagator
/// writes them. Empty: the event belongs to no trace.
struct trace_context {
  std::string traceparent{};  ///< e.g. "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
  std::string tracestate{};   ///< Optional, e.g. "congo=t61rcWkgMzE"; needs a `traceparent`.

  /// True when neither part is set.
  [[nodiscard]] bool empty() const noexcept { return traceparent.empty() && tracestate.empty(); }
  /// The 32 hex digits of the trace id; empty when `traceparent` is not valid.
  [[nodiscard]] std::string_view trace_id() const noexcept;
  /// The 16 hex digits of the parent (span) id; empty when `traceparent` is not valid.
  [[nodiscard]] std::string_view parent_id() const noexcept;
  /// Equal parts.
  friend bool operator==(const trace_context&, const trace_context&) = default;
};

namespace detail {
constexpr bool is_lower_hex(char c) noexcept {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}
constexpr bool all_lower_hex(std::string_view s) noexcept {
  for (char c : s)
    if (!is_lower_hex(c)) return false;
  return true;
}
constexpr bool all_zero(std::string_view s) noexcept {
  for (char c : s)
    if (c != '0') return false;
  return true;
}
constexpr bool is_lcalpha(char c) noexcept { return c >= 'a' && c <= 'z'; }
constexpr bool is_key_char(char c) noexcept {
  return is_lcalpha(c) || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '*' || c == '/';
}
constexpr bool is_ows(char c) noexcept { return c == ' ' || c == '\t'; }

/// A tracestate key: `lcalpha 0*255(keychar)`, or `tenant@system` (tenant: lcalpha or digit
/// then up to 240 key characters; system: lcalpha then up to 13).
constexpr bool is_tracestate_key(std::string_view k) noexcept {
  const auto at = k.find('@');
  if (at == std::string_view::npos) {
    if (k.empty() || k.size() > 256 || !is_lcalpha(k[0])) return false;
    for (char c : k.substr(1))
      if (!is_key_char(c)) return false;
    return true;
  }
  const auto tenant = k.substr(0, at);
  const auto system = k.substr(at + 1);
  if (tenant.empty() || tenant.size() > 241 || system.empty() || system.size() > 14) return false;
  if (!is_lcalpha(tenant[0]) && !(tenant[0] >= '0' && tenant[0] <= '9')) return false;
  for (char c : tenant.substr(1))
    if (!is_key_char(c)) return false;
  if (!is_lcalpha(system[0])) return false;
  for (char c : system.substr(1))
    if (!is_key_char(c)) return false;
  return true;
}

/// A tracestate value: 1 to 256 printable ASCII characters but ',' and '=', not ending in a
/// space.
constexpr bool is_tracestate_value(std::string_view v) noexcept {
  if (v.empty() || v.size() > 256 || v.back() == ' ') return false;
  for (char c : v)
    if (c < 0x20 || c > 0x7E || c == ',' || c == '=') return false;
  return true;
}
}  // namespace detail

/// The longest `traceparent` accepted: a later version's extra fields included.
inline constexpr std::size_t max_traceparent_bytes = 256;

/// Why `s` is not a W3C `traceparent` a propagator accepts; empty when it is one. Version 00 is
/// exactly `00-<32 hex>-<16 hex>-<2 hex>`, lowercase, ids not all zero; a later version (not
/// `ff`) may append `-` and lowercase hex fields (up to `max_traceparent_bytes` in all), which
/// are kept as given.
[[nodiscard]] constexpr std::string_view traceparent_problem(std::string_view s) noexcept {
  if (s.size() < 55) return "is shorter than a W3C traceparent (version-traceid-parentid-flags)";
  if (s[2] != '-' || s[35] != '-' || s[52] != '-')
    return "is not version-traceid-parentid-flags, separated by '-'";
  const auto version = s.substr(0, 2);
  if (!detail::all_lower_hex(version) || version == "ff")
    return "has a version that is not two lowercase hex digits (or is ff)";
  if (version == "00" && s.size() != 55) return "is longer than a version 00 traceparent";
  if (s.size() > 55 && s[55] != '-') return "has a later version's extra field without '-'";
  // A later version's extra fields: kept as given, so only what its fields can be (lowercase
  // hex, '-'), and not more than a few of them.
  if (s.size() > max_traceparent_bytes) return "is longer than 256 bytes";
  for (char c : s.substr(55))
    if (c != '-' && !detail::is_lower_hex(c))
      return "has a later version's extra field that is not lowercase hex";
  const auto trace_id = s.substr(3, 32);
  const auto parent_id = s.substr(36, 16);
  if (!detail::all_lower_hex(trace_id) || !detail::all_lower_hex(parent_id) ||
      !detail::all_lower_hex(s.substr(53, 2)))
    return "has a field that is not lowercase hex";
  if (detail::all_zero(trace_id)) return "has an all-zero trace id";
  if (detail::all_zero(parent_id)) return "has an all-zero parent id";
  return {};
}

/// Why `s` is not a W3C `tracestate`; empty when it is one: at most 32 comma-separated
/// `key=value` members (blank members and spaces around them allowed), keys unique.
[[nodiscard]] constexpr std::string_view tracestate_problem(std::string_view s) noexcept {
  std::size_t members = 0;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    auto end = s.find(',', pos);
    if (end == std::string_view::npos) end = s.size();
    auto m = s.substr(pos, end - pos);
    while (!m.empty() && detail::is_ows(m.front())) m.remove_prefix(1);
    while (!m.empty() && detail::is_ows(m.back())) m.remove_suffix(1);
    if (!m.empty()) {
      const auto eq = m.find('=');
      if (eq == std::string_view::npos) return "has a member that is not key=value";
      const auto key = m.substr(0, eq);
      if (!detail::is_tracestate_key(key)) return "has a key W3C does not allow";
      if (!detail::is_tracestate_value(m.substr(eq + 1))) return "has a value W3C does not allow";
      if (++members > 32) return "has more than 32 members";
      // Keys are unique: look for the same key among the members before this one.
      for (std::size_t p = 0; p < pos;) {
        auto e = s.find(',', p);
        auto prev = s.substr(p, e - p);
        while (!prev.empty() && detail::is_ows(prev.front())) prev.remove_prefix(1);
        if (prev.substr(0, prev.find('=')) == key) return "has a key twice";
        p = e + 1;
      }
    }
    pos = end + 1;
  }
  return {};
}

/// Why `t` is not a trace context to store; empty when it is one (or is empty). A `tracestate`
/// without a `traceparent` is refused: no propagator reads it alone.
[[nodiscard]] constexpr std::string_view trace_problem(const trace_context& t) noexcept {
  if (t.traceparent.empty()) {
    if (!t.tracestate.empty()) return "has a tracestate without a traceparent";
    return {};
  }
  if (const auto p = traceparent_problem(t.traceparent); !p.empty()) return p;
  if (!t.tracestate.empty()) return tracestate_problem(t.tracestate);
  return {};
}

inline std::string_view trace_context::trace_id() const noexcept {
  if (!traceparent_problem(traceparent).empty()) return {};
  return std::string_view(traceparent).substr(3, 32);
}

inline std::string_view trace_context::parent_id() const noexcept {
  if (!traceparent_problem(traceparent).empty()) return {};
  return std::string_view(traceparent).substr(36, 16);
}

}  // namespace outbox
