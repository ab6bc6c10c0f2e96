#pragma once
// The relay tool's test over Kafka (outbox_relay_test.cpp, drains_the_outbox_through_each_
// transport): a topic of the test's own on the cluster at OUTBOX_TEST_KAFKA, or on the mock
// cluster this test process starts (the tool connects to it over TCP), consumed by a receiver
// whose consumer group joined it before the relay runs.

#include <string>

#include <outbox/kafka/kafka.hpp>

#include "fixture.hpp"

namespace outbox_tool_test::transports {

struct kafka {
  static constexpr const char* name = "kafka";
  static constexpr outbox::test::service_need service = outbox::test::kafka_fixture::service;

  /// The tool's transport URL: every event to the test's topic.
  [[nodiscard]] std::string url() const {
    return "kafka://" + outbox::test::kafka_fixture::bootstrap() +
           "?topic_pattern=" + cluster_.topic();
  }
  /// The consumer of what the relay publishes.
  outbox::kafka::receiver& receiver() { return cluster_.receiver(); }

 private:
  outbox::test::kafka_fixture cluster_;
};

}  // namespace outbox_tool_test::transports
