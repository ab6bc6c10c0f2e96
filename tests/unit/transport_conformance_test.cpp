// The transport conformance suite against the in-memory transport, plus the behaviour of the
// in-memory transport's own controls and of the fault-injecting doubles.
#define BOOST_TEST_MODULE memory transport conformance
#include <boost/test/unit_test.hpp>

#include <stdexcept>
#include <string>
#include <tuple>

#include <outbox/testing/faulty_transport.hpp>
#include <outbox/testing/memory_transport.hpp>

#include "../support/memory_transport_fixture.hpp"

using transport_fixtures = std::tuple<outbox::test::memory_transport_fixture>;

#include "../conformance/transport_conformance.hpp"

using namespace std::chrono_literals;
using transport_conformance::deadline;
using transport_conformance::make_messages;

BOOST_AUTO_TEST_SUITE(memory_transport)

BOOST_AUTO_TEST_CASE(pays_the_simulated_confirm_latency_once_per_batch) {
  outbox::testing::memory_transport t({.confirm_latency = 20ms});
  // One round trip per message would take 20 s: no stall of a loaded machine comes near it.
  const auto batch = make_messages(1000);
  const auto start = std::chrono::steady_clock::now();
  const auto results = t.publish(batch, deadline());
  const auto took = std::chrono::steady_clock::now() - start;
  BOOST_TEST(results.size() == batch.size());
  BOOST_TEST((took >= 20ms));
  BOOST_TEST((took < batch.size() * 20ms));  // pipelined, not one round trip per message
}

BOOST_AUTO_TEST_CASE(confirms_past_the_deadline_are_not_reported) {
  outbox::testing::memory_transport t({.confirm_latency = 200ms});
  const auto results = t.publish(make_messages(3), deadline(20ms));
  BOOST_TEST(results.empty());
}

BOOST_AUTO_TEST_CASE(a_crashed_consumer_gets_its_unacked_deliveries_again_in_order) {
  outbox::testing::memory_transport t;
  const auto batch = make_messages(3);
  (void)t.publish(batch, deadline());
  auto got = transport_conformance::receive_n(t, 3);
  BOOST_TEST_REQUIRE(got.size() == 3u);
  t.ack(got[0]);
  t.crash_consumer();
  auto again = transport_conformance::receive_n(t, 2);
  BOOST_TEST_REQUIRE(again.size() == 2u);
  BOOST_TEST(again[0].msg.id == batch[1].id);
  BOOST_TEST(again[1].msg.id == batch[2].id);
  BOOST_TEST(again[0].redelivered);
}

// Without `record` the transport keeps no copy; wire() answered an empty list and redeliver()
// false, which users read as "nothing was published" (and chased stalls that did not exist).
BOOST_AUTO_TEST_CASE(without_record_the_lookups_throw_and_say_how_to_record) {
  outbox::testing::memory_transport t;  // the embedding default: no copy kept
  const auto batch = make_messages(3);
  (void)t.publish(batch, deadline());
  BOOST_TEST(t.published_count() == 3u);
  const auto says_how = [](const std::logic_error& e) {
    return std::string(e.what()).find("{.record = true}") != std::string::npos;
  };
  BOOST_CHECK_EXCEPTION((void)t.wire(), std::logic_error, says_how);
  BOOST_CHECK_EXCEPTION((void)t.redeliver(batch[0].id), std::logic_error, says_how);
  BOOST_TEST(t.queued() == 3u);  // the refused redeliver queued nothing
}

BOOST_AUTO_TEST_CASE(redeliver_injects_a_duplicate) {
  outbox::testing::memory_transport t({.record = true});
  const auto batch = make_messages(1);
  (void)t.publish(batch, deadline());
  BOOST_TEST(t.redeliver(batch[0].id));
  BOOST_TEST(!t.redeliver(outbox::make_uuid_v7()));
  auto got = transport_conformance::receive_n(t, 2);
  BOOST_TEST_REQUIRE(got.size() == 2u);
  BOOST_TEST(got[0].msg.id == got[1].msg.id);
  BOOST_TEST(got[1].redelivered);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(faulty_transport)

using faulty = outbox::testing::faulty_transport<outbox::testing::memory_transport>;

BOOST_AUTO_TEST_CASE(fails_the_next_n_messages_then_recovers_and_failures_never_reach_the_wire) {
  outbox::testing::memory_transport inner;
  faulty t(inner);
  t.fail_next(2);
  const auto batch = make_messages(5);
  const auto results = t.publish(batch, deadline());
  BOOST_TEST_REQUIRE(results.size() == 5u);
  std::size_t failed = 0;
  for (const auto& r : results)
    if (!r.confirmed) {
      ++failed;
      BOOST_TEST((r.error_class == outbox::errc::transient));
    }
  BOOST_TEST(failed == 2u);
  BOOST_TEST(inner.published_count() == 3u);
  for (const auto& r : t.publish(batch, deadline())) BOOST_TEST(r.confirmed);
  BOOST_TEST(t.failures_injected() == 2u);
}

BOOST_AUTO_TEST_CASE(fails_matching_messages_permanently) {
  outbox::testing::memory_transport inner;
  faulty t(inner);
  t.fail_when([](const outbox::message& m) { return m.aggregate_id == "a1"; });
  const auto batch = make_messages(6);  // aggregates a0 a1 a2 a0 a1 a2
  for (int round = 0; round < 3; ++round) {
    for (const auto& r : t.publish(batch, deadline())) {
      const bool poison = std::find_if(batch.begin(), batch.end(), [&](const auto& m) {
                            return m.id == r.id && m.aggregate_id == "a1";
                          }) != batch.end();
      BOOST_TEST(r.confirmed == !poison);
      if (poison) BOOST_TEST((r.error_class == outbox::errc::permanent));
    }
  }
}

BOOST_AUTO_TEST_CASE(confirms_out_of_order_and_never_confirms_on_request) {
  outbox::testing::memory_transport inner;
  faulty t(inner);
  t.confirm_out_of_order(true);
  const auto batch = make_messages(4);
  const auto results = t.publish(batch, deadline());
  BOOST_TEST_REQUIRE(results.size() == 4u);
  BOOST_TEST(results.front().id == batch.back().id);
  t.heal();
  t.never_confirm(true);
  const auto start = std::chrono::steady_clock::now();
  BOOST_TEST(t.publish(batch, deadline(30ms)).empty());
  BOOST_TEST((std::chrono::steady_clock::now() - start >= 25ms));
  BOOST_TEST(inner.published_count() == 8u);  // sent, just never confirmed
}

BOOST_AUTO_TEST_SUITE_END()
