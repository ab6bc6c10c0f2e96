#pragma once
// The in-memory transport fixture of the transport conformance suite and the end-to-end tests.
#include <outbox/testing/memory_transport.hpp>

namespace outbox::test {
struct memory_transport_fixture {
  static constexpr const char* name = "memory";
  static constexpr bool redelivers_on_nack = true;
  outbox::testing::memory_transport transport;
  outbox::testing::memory_transport& publisher() { return transport; }
  outbox::testing::memory_transport& receiver() { return transport; }
};
}  // namespace outbox::test
