#pragma once
// The `outbox` tool's ZeroMQ transport: zmq+tcp://127.0.0.1:5557 (?connect=true to connect
// instead of binding), zmq+ipc:///run/outbox.sock.

#include <string>
#include <string_view>

#include <outbox/zeromq/zeromq.hpp>

#include "../transport_maker.hpp"

namespace outbox_tool::adapters {

struct zeromq {
  static constexpr std::string_view schemes = "zmq+tcp zmq+ipc";
  static constexpr std::string_view file_schemes = "zmq+ipc";
  /// Its URL forms, for `outbox --help`.
  static constexpr std::string_view help = "zmq+tcp://127.0.0.1:5557, zmq+ipc:///path";

  template <class R, class F>
  static R with_maker(const store_url& u, F& f) {
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
        if (cloudevents_value(k, v, o.cloudevents)) continue;
        if (k == "connect")
          o.bind = !flag_value(k, v);
        else if (k == "max_frame_bytes")
          o.max_frame_bytes = size_value(k, v);
        else
          throw usage_error("unknown zmq URL parameter '" + k +
                            "' (connect, max_frame_bytes, "
                            "cloudevents, cloudevents_source)");
      }
    }
    using T = outbox::zeromq::publisher;
    // A bound endpoint has one owner: one relay thread.
    return f(transport_maker<T>{[o] { return T(o); }, [](T&) {}, !o.bind});
  }
};

}  // namespace outbox_tool::adapters
