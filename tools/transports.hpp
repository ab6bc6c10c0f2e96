#pragma once
// The transports this build of the `outbox` tool has (-DOUTBOX_TOOL_<TRANSPORT>), picked at run
// time by a URL's scheme, for `outbox relay`:
//   amqp://user:password@host:5672/vhost?exchange=outbox   (amqps:// with TLS)
//   zmq+tcp://127.0.0.1:5557   zmq+ipc:///run/outbox.sock
//   kafka://host:9092,host:9092?topic_pattern=outbox.event.{aggregate_type}&linger.ms=5

#include <chrono>
#include <functional>
#include <string>
#include <utility>

#include "common.hpp"
#ifdef OUTBOX_TOOL_AMQP
#include <outbox/amqp/amqp.hpp>
#endif
#ifdef OUTBOX_TOOL_ZEROMQ
#include <outbox/zeromq/zeromq.hpp>
#endif
#ifdef OUTBOX_TOOL_KAFKA
#include <outbox/kafka/kafka.hpp>
#endif

namespace outbox_tool {

/// The transports in this build, for messages: " amqp zeromq kafka".
inline std::string transports_in_build() {
  std::string out;
#ifdef OUTBOX_TOOL_AMQP
  out += " amqp amqps";
#endif
#ifdef OUTBOX_TOOL_ZEROMQ
  out += " zmq+tcp zmq+ipc";
#endif
#ifdef OUTBOX_TOOL_KAFKA
  out += " kafka";
#endif
  return out;
}

inline store_url parse_transport_url(const std::string& url) {
  return parse_url(url, "transport", "amqp:, amqps:, zmq+tcp:, zmq+ipc:, kafka:");
}

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

/// How to make one transport of a kind: each relay thread makes its own (a transport is used
/// from one thread), and `check` sees that it can reach its broker (at start-up).
template <class Transport>
struct transport_maker {
  std::function<Transport()> make;
  std::function<void(Transport&)> check;
  /// Several relays may each have one (false: the transport binds an endpoint).
  bool shareable = true;
};

/// Calls `f.template operator()<Transport>(transport_maker<Transport>)` for the transport that
/// `u`'s scheme names; a scheme this build has none for, or a bad parameter, is a usage error.
template <class F>
decltype(auto) with_transport_type(const store_url& u, F&& f) {
#ifdef OUTBOX_TOOL_AMQP
  if (u.scheme == "amqp" || u.scheme == "amqps") {
    outbox::amqp::publisher_options o;
    // The connection URL without the tool's parameters (the adapter parses it again).
    std::string conn = u.scheme + "://";
    if (!u.user.empty() || !u.password.empty())
      conn += percent_encode(u.user) +
              (u.password.empty() ? "" : ":" + percent_encode(u.password)) + "@";
    conn += u.host.find(':') != std::string::npos ? "[" + u.host + "]" : u.host;
    if (u.port) conn += ":" + std::to_string(*u.port);
    if (!u.path.empty()) conn += "/" + percent_encode(u.path);
    o.connection.url = conn;
    for (const auto& [k, v] : u.query) {
      if (k == "exchange")
        o.exchange = v;
      else if (k == "exchange_type")
        o.exchange_type = v;
      else if (k == "declare_exchange")
        o.declare_exchange = flag_value(k, v);
      else if (k == "max_message_bytes")
        o.max_message_bytes = size_value(k, v);
      else if (k == "ca_cert")
        o.connection.tls.ca_cert = v;
      else if (k == "client_cert")
        o.connection.tls.client_cert = v;
      else if (k == "client_key")
        o.connection.tls.client_key = v;
      else if (k == "verify_hostname")
        o.connection.tls.verify_hostname = flag_value(k, v);
      else
        throw usage_error("unknown amqp URL parameter '" + k +
                          "' (exchange, exchange_type, declare_exchange, max_message_bytes, "
                          "ca_cert, client_cert, client_key, verify_hostname)");
    }
    using T = outbox::amqp::publisher;
    return std::forward<F>(f).template operator()<T>(
        transport_maker<T>{[o] { return T(o); }, [](T& t) { t.connect(); }, true});
  }
#endif
#ifdef OUTBOX_TOOL_ZEROMQ
  if (u.scheme == "zmq+tcp" || u.scheme == "zmq+ipc") {
    outbox::zeromq::publisher_options o;
    if (u.scheme == "zmq+ipc") {
      o.endpoint = "ipc://" + u.path;
    } else {
      if (u.host.empty() || !u.port)
        throw usage_error("a zmq+tcp URL names a host and a port: zmq+tcp://127.0.0.1:5557");
      if (!u.user.empty() || !u.path.empty())
        throw usage_error("a zmq+tcp URL has no user or path: zmq+tcp://host:port");
      o.endpoint = "tcp://" +
                   (u.host.find(':') != std::string::npos ? "[" + u.host + "]" : u.host) + ":" +
                   std::to_string(*u.port);
      for (const auto& [k, v] : u.query) {
        if (k == "connect")
          o.bind = !flag_value(k, v);
        else if (k == "max_frame_bytes")
          o.max_frame_bytes = size_value(k, v);
        else
          throw usage_error("unknown zmq URL parameter '" + k + "' (connect, max_frame_bytes)");
      }
    }
    using T = outbox::zeromq::publisher;
    // A bound endpoint has one owner: one relay thread.
    return std::forward<F>(f).template operator()<T>(
        transport_maker<T>{[o] { return T(o); }, [](T&) {}, !o.bind});
  }
#endif
#ifdef OUTBOX_TOOL_KAFKA
  if (u.scheme == "kafka") {
    outbox::kafka::publisher_options o;
    if (u.host.empty())
      throw usage_error("a kafka URL names its bootstrap servers: kafka://host:9092,host:9092");
    if (!u.user.empty() || !u.password.empty())
      throw usage_error(
          "a kafka URL takes credentials as parameters (sasl.username, sasl.password), not "
          "user:password@");
    o.bootstrap_servers = u.host;
    for (const auto& [k, v] : u.query) {
      if (k == "topic_pattern")
        o.topic_pattern = v;
      else if (k == "delivery_timeout_ms")
        o.delivery_timeout = std::chrono::milliseconds(size_value(k, v));
      else
        o.config[k] = v;  // a librdkafka property (its value is never printed)
    }
    using T = outbox::kafka::publisher;
    return std::forward<F>(f).template operator()<T>(transport_maker<T>{
        [o] { return T(o); }, [](T& t) { t.connect(std::chrono::seconds(10)); }, true});
  }
#endif
  throw usage_error("transport '" + u.scheme +
                    "' is not in this build of outbox (it has:" + transports_in_build() + ")");
}

}  // namespace outbox_tool
