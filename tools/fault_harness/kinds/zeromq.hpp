#pragma once
// ZeroMQ: ipc:// in the run's directory, an endpoint per relay; its consumer is the other end
// of the wire, so its confirm is the consumer's ack.

#include <unistd.h>

#include <cstddef>
#include <string>

#include <outbox/zeromq/zeromq.hpp>

#include "../args.hpp"
#include "../concepts.hpp"

namespace fault_harness {

struct zeromq_kind {
  static constexpr const char* name = "zeromq";
  /// The confirm is the consumer's ack (after its commit): published means applied.
  static constexpr bool confirm_is_applied = true;
  /// The frames a consumer takes; an uncarriable event's payload is larger.
  static constexpr std::size_t max_frame_bytes = 256 * 1024;
  /// What --broker-outages can do: the other end of the wire is the consumer.
  static constexpr const char* outages = "consumer-away";
  static const char* missing(const args&) { return nullptr; }
  /// Relay `index`'s endpoint (it binds; its consumer connects).
  static std::string endpoint(const args& a) {
    return "ipc://" + a.dir + "/relay-" + std::to_string(a.index) + ".sock";
  }
  /// One consumer per relay (each relay binds its own endpoint). Order per aggregate holds
  /// across them: the confirm is the consumer's commit, and a row is not claimed while an
  /// earlier one of its aggregate is in flight.
  static int consumers(const args& a) { return a.relays; }
  static outbox::zeromq::publisher publisher(const args& a) {
    return outbox::zeromq::publisher({.endpoint = endpoint(a)});
  }
  static outbox::zeromq::receiver receiver(const args& a) {
    return outbox::zeromq::receiver({.endpoint = endpoint(a),
                                     .name = "harness-" + std::to_string(::getpid()),
                                     .max_frame_bytes = max_frame_bytes});
  }
  /// A payload over what the consumer announced it takes: the publisher refuses it `permanent`
  /// (or the consumer rejects it, when it connected later), and the relay dead-letters it.
  static void make_uncarriable(outbox::event& e) {
    e.payload.pop_back();  // the closing brace of the JSON object
    e.payload += R"(,"pad":")" + std::string(max_frame_bytes + 1024, 'x') + R"("})";
  }
  static void drop(const args&) {}
};
static_assert(transport_kind<zeromq_kind>);

}  // namespace fault_harness
