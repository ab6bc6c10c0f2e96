#pragma once
// The relay tool's test over NATS JetStream (outbox_relay_test.cpp, drains_the_outbox_through_
// each_transport): a stream of the test's own on the server at OUTBOX_TEST_NATS (created, with
// its consumer, before the relay publishes), consumed by the fixture's receiver.

#include <string>

#include <outbox/nats/nats.hpp>

#include "fixture.hpp"

namespace outbox_tool_test::transports {

struct nats {
  static constexpr const char* name = "nats";
  static constexpr outbox::test::service_need service = outbox::test::nats_fixture::service;

  /// The tool's transport URL: the test's stream and subjects.
  [[nodiscard]] std::string url() const {
    return outbox::test::nats_fixture::url() + "?stream=" + server_.stream().name +
           "&subject_pattern=" + server_.prefix() + ".{event_type}";
  }
  /// The consumer of what the relay publishes.
  outbox::nats::receiver& receiver() { return server_.receiver(); }

 private:
  outbox::test::nats_fixture server_;
};

}  // namespace outbox_tool_test::transports
