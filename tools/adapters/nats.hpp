#pragma once
// The `outbox` tool's NATS JetStream transport:
//   nats://user:password@host:4222?stream=OUTBOX&subject_pattern=outbox.event.{event_type}
// (tls:// with TLS; token, creds_file, nkey_public with nkey_seed_file, ca_cert, client_cert,
// client_key, create_stream, stream_subjects, duplicate_window_ms as parameters).

#include <chrono>
#include <string>
#include <string_view>

#include <outbox/nats/nats.hpp>

#include "../transport_maker.hpp"

namespace outbox_tool::adapters {

struct nats {
  static constexpr std::string_view schemes = "nats tls";
  /// Its URL forms, for `outbox --help`.
  static constexpr std::string_view help =
      "nats://user:password@host:4222?stream=OUTBOX&subject_pattern=outbox.event.{event_type}";

  template <class R, class F>
  static R with_maker(const store_url& u, F& f) {
    outbox::nats::publisher_options o;
    // The server without the tool's parameters; the credentials apart (no percent-encoding).
    o.connection.url = u.scheme + "://" + u.host + (u.port ? ":" + std::to_string(*u.port) : "");
    o.connection.user = u.user;
    o.connection.password = u.password;
    for (const auto& [k, v] : u.query) {
      if (cloudevents_value(k, v, o.cloudevents)) continue;
      if (k == "stream")
        o.stream.name = v;
      else if (k == "create_stream")
        o.stream.create = flag_value(k, v);
      else if (k == "stream_subjects")
        o.stream.subjects = {v};
      else if (k == "duplicate_window_ms")
        o.stream.duplicate_window = std::chrono::milliseconds(size_value(k, v));
      else if (k == "subject_pattern")
        o.subject_pattern = v;
      else if (k == "token")
        o.connection.token = v;
      else if (k == "creds_file")
        o.connection.creds_file = v;
      else if (k == "nkey_public")
        o.connection.nkey_public = v;
      else if (k == "nkey_seed_file")
        o.connection.nkey_seed_file = v;
      else if (k == "ca_cert")
        o.connection.tls.ca_cert = v;
      else if (k == "client_cert")
        o.connection.tls.client_cert = v;
      else if (k == "client_key")
        o.connection.tls.client_key = v;
      else
        throw usage_error("unknown nats URL parameter '" + k +
                          "' (stream, create_stream, stream_subjects, duplicate_window_ms, "
                          "subject_pattern, token, creds_file, nkey_public, nkey_seed_file, "
                          "ca_cert, client_cert, client_key, cloudevents, cloudevents_source)");
    }
    using T = outbox::nats::publisher;
    return f(transport_maker<T>{[o] { return T(o); }, [](T& t) { t.connect(); }, true});
  }
};

}  // namespace outbox_tool::adapters
