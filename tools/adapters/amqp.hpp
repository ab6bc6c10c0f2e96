#pragma once
// The `outbox` tool's AMQP transport: amqp://user:password@host:5672/vhost?exchange=outbox
// (amqps:// with TLS).

#include <string>
#include <string_view>

#include <outbox/amqp/amqp.hpp>

#include "../transport_maker.hpp"

namespace outbox_tool::adapters {

struct amqp {
  static constexpr std::string_view schemes = "amqp amqps";
  /// Its URL forms, for `outbox --help`.
  static constexpr std::string_view help = "amqp://user:password@host:5672/vhost?exchange=outbox";

  template <class R, class F>
  static R with_maker(const store_url& u, F& f) {
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
      if (cloudevents_value(k, v, o.cloudevents)) continue;
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
      else if (k == "retry_unroutable")
        o.retry_unroutable = flag_value(k, v);
      else
        throw usage_error(
            "unknown amqp URL parameter '" + k +
            "' (exchange, exchange_type, declare_exchange, max_message_bytes, "
            "ca_cert, client_cert, client_key, verify_hostname, retry_unroutable, cloudevents, "
            "cloudevents_source)");
    }
    using T = outbox::amqp::publisher;
    return f(transport_maker<T>{[o] { return T(o); }, [](T& t) { t.connect(); }, true});
  }
};

}  // namespace outbox_tool::adapters
