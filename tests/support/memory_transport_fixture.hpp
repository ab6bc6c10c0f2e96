#pragma once
// The in-memory transport fixture of the transport conformance suite and the end-to-end tests.
#include <string>
#include <string_view>
#include <tuple>

#include <outbox/testing/memory_transport.hpp>
#include "services.hpp"

namespace outbox::test {
struct memory_transport_fixture {
  static constexpr const char* name = "memory";
  /// What it needs to run (services.hpp).
  static constexpr service_need service{};
  static constexpr bool redelivers_on_nack = true;
  /// Capability: confirms when the broker (here: the queue) took the message, before any
  /// consumer ran; tests may publish first and consume afterwards.
  static constexpr bool confirms_on_consumer_ack = false;
  /// Capability: one publisher may be shared by concurrent relays.
  static constexpr bool thread_safe_publisher = true;
  /// Capability: one queue, so the whole batch arrives in publish order.
  static constexpr bool keeps_batch_order = true;
  /// Capability: a requeued delivery comes again before anything later.
  static constexpr bool redelivers_in_place = true;
  /// The in-memory CloudEvents layout: attributes as `ce-<name>` headers.
  static constexpr std::string_view cloudevents_prefix = outbox::testing::memory_cloudevents_prefix;
  memory_transport_fixture() = default;
  /// A transport publishing CloudEvents as `pub` says, reading them when `rcv` is not off.
  memory_transport_fixture(const outbox::cloudevents_options& pub,
                           const outbox::cloudevents_options& rcv)
      : transport{{.record = true,
                   .cloudevents = pub,
                   .read_cloudevents = rcv.mode != outbox::cloudevents_mode::off}} {}
  outbox::testing::memory_transport transport{{.record = true}};
  /// Why the receiver last dropped a delivery as not an event.
  [[nodiscard]] std::string last_malformed() const { return transport.last_malformed(); }
  outbox::testing::memory_transport& publisher() { return transport; }
  outbox::testing::memory_transport& receiver() { return transport; }

  /// Delivers an already published message once more (a duplicate delivery).
  bool redeliver(const outbox::message& m) { return transport.redeliver(m.id); }
  /// Deliveries queued or handed out and not yet acked.
  [[nodiscard]] std::size_t outstanding() const { return transport.unacked() + transport.queued(); }
};

/// The memory transport fixtures of the end-to-end matrix.
using memory_transport_fixtures = std::tuple<memory_transport_fixture>;

}  // namespace outbox::test
