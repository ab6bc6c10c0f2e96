#pragma once
// NATS JetStream: a stream and a durable consumer of the run's own on the server at --nats; its
// confirm is the stream's PubAck, so the drain waits for the consumer. Its outage restarts the
// server of scripts/services.sh (DIR/restart nats), the stream kept on its store.

#include <chrono>
#include <string>

#include <outbox/nats/nats.hpp>

#include "../args.hpp"
#include "../concepts.hpp"

namespace fault_harness {

struct nats_kind {
  static constexpr const char* name = "nats";
  /// Its server: --nats URL (nats://), default OUTBOX_TEST_NATS.
  static constexpr const char* server_flag = "nats";
  static constexpr const char* server_env = "OUTBOX_TEST_NATS";
  static constexpr const char* server_form = "URL";
  /// The confirm is the stream's: published is not applied, the drain waits for the consumer.
  static constexpr bool confirm_is_applied = false;
  /// What --broker-outages can do: the server stopped, kept down, started again.
  static constexpr const char* outages = "server-restart";
  /// The scripts/services.sh server that server-restart restarts (DIR/restart nats).
  static constexpr const char* services_server = "nats";
  static const char* missing(const args& a) {
    return a.address(server_flag).empty() ? "NATS (--nats or OUTBOX_TEST_NATS)" : nullptr;
  }
  /// One consumer (several would share the consumer's messages out of order).
  static int consumers(const args&) { return 1; }
  /// A header name NATS headers cannot carry (a ':' in it): the publisher fails it
  /// `permanent` before anything is sent, and the relay dead-letters it.
  static void make_uncarriable(outbox::event& e) { e.headers.emplace("bad:name", "x"); }
  static std::string prefix(const args& a) { return "outbox-faults-" + a.run; }
  /// The run's stream, on file storage: it survives the server's restarts.
  static outbox::nats::stream_options stream(const args& a) {
    return {.name = "OUTBOX-FAULTS-" + a.run, .subjects = {prefix(a) + ".>"}};
  }
  static outbox::nats::publisher publisher(const args& a) {
    return outbox::nats::publisher({.connection = {.url = a.address(server_flag)},
                                    .stream = stream(a),
                                    .subject_pattern = prefix(a) + ".{event_type}"});
  }
  /// One message pending at a time (max ack pending 1, as AMQP's prefetch 1): strict
  /// per-aggregate order. A killed consumer's message comes again only after the ack wait
  /// (JetStream knows no client's end), and none other is delivered meanwhile: 5 s, not 30.
  static outbox::nats::receiver receiver(const args& a) {
    return outbox::nats::receiver({.connection = {.url = a.address(server_flag)},
                                   .stream = stream(a),
                                   .durable = "faults",
                                   .ack_wait = std::chrono::seconds(5),
                                   .max_ack_pending = 1});
  }
  /// Deletes the run's stream (with its consumer; best effort: the caller reports a failure).
  static void drop(const args& a) {
    outbox::nats::connection conn(outbox::nats::connection_options{.url = a.address(server_flag)});
    conn.ensure();
    jsOptions o;
    jsOptions_Init(&o);
    auto js = conn.jetstream(o);
    jsErrCode code{};
    conn.check(js_DeleteStream(js.get(), stream(a).name.c_str(), nullptr, &code), "delete stream",
               code);
  }
};
static_assert(transport_kind<nats_kind>);

}  // namespace fault_harness
