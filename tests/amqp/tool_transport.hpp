#pragma once
// The relay tool's test over AMQP (outbox_relay_test.cpp, drains_the_outbox_through_each_
// transport): an exchange and a queue of the test's own on the broker at OUTBOX_TEST_AMQP (the
// queue bound before the relay publishes), consumed by the fixture's receiver.

#include <string>

#include <outbox/amqp/amqp.hpp>

#include "fixture.hpp"

namespace outbox_tool_test::transports {

struct amqp {
  static constexpr const char* name = "amqp";
  static constexpr outbox::test::service_need service = outbox::test::amqp_fixture::service;

  /// The tool's transport URL.
  [[nodiscard]] std::string url() const {
    return outbox::test::amqp_fixture::url() + "?exchange=" + broker_.exchange();
  }
  /// The consumer of what the relay publishes.
  outbox::amqp::receiver& receiver() { return broker_.receiver(); }

 private:
  outbox::test::amqp_fixture broker_;
};

}  // namespace outbox_tool_test::transports
