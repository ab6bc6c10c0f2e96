#pragma once
// What a transport adapter of the `outbox` tool builds from a transport URL
// (adapters/<name>.hpp), and the readers of its parameters.

#include <cstddef>
#include <exception>
#include <functional>
#include <string>

#include <outbox/cloudevents.hpp>

#include "common.hpp"

namespace outbox_tool {

/// A URL parameter read as a flag: true/false, 1/0, yes/no.
inline bool flag_value(const std::string& key, const std::string& value) {
  if (value == "true" || value == "1" || value == "yes") return true;
  if (value == "false" || value == "0" || value == "no") return false;
  throw usage_error("transport URL parameter " + key + " takes true or false, got '" + value + "'");
}

inline std::size_t size_value(const std::string& key, const std::string& value) {
  try {
    std::size_t used = 0;
    const unsigned long long n = std::stoull(value, &used);
    if (used == value.size() && n > 0) return static_cast<std::size_t>(n);
  } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): refused below
  }
  throw usage_error("transport URL parameter " + key + " takes a positive number, got '" + value +
                    "'");
}

/// The CloudEvents parameters every transport URL takes (docs/cloudevents.md):
/// `cloudevents=off|binary|structured` and `cloudevents_source=` a URI reference (required with
/// a mode not off: the publisher refuses it without, `misconfigured`). True when `key` is one.
inline bool cloudevents_value(const std::string& key, const std::string& value,
                              outbox::cloudevents_options& o) {
  if (key == "cloudevents") {
    if (value == "off")
      o.mode = outbox::cloudevents_mode::off;
    else if (value == "binary")
      o.mode = outbox::cloudevents_mode::binary;
    else if (value == "structured")
      o.mode = outbox::cloudevents_mode::structured;
    else
      throw usage_error(
          "transport URL parameter cloudevents takes off, binary or structured, got '" + value +
          "'");
    return true;
  }
  if (key != "cloudevents_source") return false;
  if (const auto why = outbox::uri_reference_problem(value); !why.empty())
    throw usage_error("transport URL parameter cloudevents_source " + why +
                      ": it must be a URI reference such as /orders-service");
  o.source = value;
  return true;
}

/// How to make one transport of a kind: each relay thread makes its own (a transport is used
/// from one thread), and `check` sees that it can reach its broker (at start-up).
template <class Transport>
struct transport_maker {
  std::function<Transport()> make;
  std::function<void(Transport&)> check;
  /// Several relays may each have one (false: the transport binds an endpoint).
  bool shareable = true;
};

}  // namespace outbox_tool
