#pragma once
// The `outbox` tool's Kafka transport:
//   kafka://host:9092,host:9092?topic_pattern=outbox.event.{aggregate_type}&linger.ms=5
// (other parameters are librdkafka properties).

#include <chrono>
#include <string_view>

#include <outbox/kafka/kafka.hpp>

#include "../transport_maker.hpp"

namespace outbox_tool::adapters {

struct kafka {
  static constexpr std::string_view schemes = "kafka";
  static constexpr std::string_view host_list_schemes = "kafka";
  /// Its URL forms, for `outbox --help`.
  static constexpr std::string_view help = "kafka://host:9092?topic_pattern=...";

  template <class R, class F>
  static R with_maker(const store_url& u, F& f) {
    outbox::kafka::publisher_options o;
    if (u.host.empty())
      throw usage_error("a kafka URL names its bootstrap servers: kafka://host:9092,host:9092");
    if (!u.user.empty() || !u.password.empty())
      throw usage_error(
          "a kafka URL takes credentials as parameters (sasl.username, sasl.password), not "
          "user:password@");
    o.bootstrap_servers = u.host;
    for (const auto& [k, v] : u.query) {
      if (cloudevents_value(k, v, o.cloudevents)) continue;
      if (k == "topic_pattern")
        o.topic_pattern = v;
      else if (k == "delivery_timeout_ms")
        o.delivery_timeout = std::chrono::milliseconds(size_value(k, v));
      else
        o.config[k] = v;  // a librdkafka property (its value is never printed)
    }
    using T = outbox::kafka::publisher;
    return f(transport_maker<T>{[o] { return T(o); },
                                [](T& t) { t.connect(std::chrono::seconds(10)); }, true});
  }
};

}  // namespace outbox_tool::adapters
