// The relay's storm guard on librdkafka's mock cluster, with the SQLite store: 1,000 events to a
// topic the cluster refuses (every produce request answered TOPIC_EXCEPTION, a `permanent`
// failure of each record, tried alone again by the publisher before it counts; the topic's
// metadata cannot be made to refuse it: librdkafka 2.0.2 then waits for the partitions and times
// out, `transient`); at most storm_guard.max_dead dead letters, the rest pending; once the
// cluster takes the topic again the route resumes and drains, and nothing is lost
// (tests/conformance/storm_route.hpp). Needs the in-process mock (OUTBOX_TEST_KAFKA empty).
#define BOOST_TEST_MODULE kafka storm guard
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "../sqlite/fixture.hpp"
#include "../support/combo.hpp"
#include "fixture.hpp"

#include "../conformance/storm_route.hpp"

using outbox::test::kafka_cluster;

BOOST_AUTO_TEST_SUITE(kafka_storm_guard)

BOOST_AUTO_TEST_CASE(a_topic_the_cluster_refuses_is_paused_then_drained_once_taken) {
  auto* mock = kafka_cluster::instance().mock();
  BOOST_TEST_REQUIRE(mock != nullptr, "needs the mock cluster (OUTBOX_TEST_KAFKA empty)");
  using world = e2e::world<e2e::combo<outbox::test::sqlite_fixture, outbox::test::kafka_fixture>>;
  world w;
  const std::string topic = w.net.topic();
  // Enough refusals for every request of the test (the relay produces to this topic only).
  const std::vector<rd_kafka_resp_err_t> refusals(20'000, RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION);
  rd_kafka_mock_push_request_errors_array(mock->handle(), outbox::kafka::mock_cluster::produce_api,
                                          refusals.size(), refusals.data());
  outbox::kafka::publisher pub({.bootstrap_servers = world::TF::bootstrap(),
                                .topic = [topic](const outbox::message&) { return topic; },
                                .delivery_timeout = std::chrono::seconds(5)});
  outbox::relay<outbox::sqlite::store, outbox::kafka::publisher, outbox::exponential_backoff,
                outbox::testing::manual_clock>
      relay(*w.relay_store, pub, {.publish_timeout = std::chrono::seconds(8), .owner = "storm"},
            world::fast_retry, w.clock);
  e2e::a_broken_route_is_paused_and_drains_once_fixed(
      w, relay, "kafka:" + topic,
      [&] { mock->clear_request_errors(outbox::kafka::mock_cluster::produce_api); },
      [&]() -> std::size_t { return w.net.outstanding(); });
}

BOOST_AUTO_TEST_SUITE_END()
