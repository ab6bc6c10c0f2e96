// End-to-end: the SQLite store with the ZeroMQ transport (relay and consumer on real sockets),
// plus a consumer that dies between its commit and its ack.
#define BOOST_TEST_MODULE zeromq end to end
#include <boost/test/unit_test.hpp>

#include <tuple>

#include "../support/combo.hpp"
#include "../support/sqlite_fixture.hpp"
#include "../support/zeromq_fixture.hpp"

using e2e_combinations =
    std::tuple<e2e::combo<outbox::test::sqlite_fixture, outbox::test::zeromq_tcp_fixture>,
               e2e::combo<outbox::test::sqlite_fixture, outbox::test::zeromq_ipc_fixture>>;

#include "../conformance/end_to_end.hpp"

namespace {

/// A receiver of a consumer process that is killed right after its transaction committed:
/// `ack` never reaches the wire, and the receiver (its socket) is gone.
struct dying_receiver {
  outbox::test::zeromq_tcp_fixture* net;
  bool dead = false;
  std::optional<outbox::delivery> receive(std::chrono::milliseconds t) {
    if (dead) return std::nullopt;
    return net->receiver().receive(t);
  }
  void ack(const outbox::delivery&) {
    dead = true;
    net->restart_receiver();  // the old socket closes with the ack unsent; a new process starts
  }
  void nack(const outbox::delivery& d, bool requeue) { net->receiver().nack(d, requeue); }
};
static_assert(outbox::concepts::receiver<dying_receiver>);
static_assert(!outbox::concepts::receiver<outbox::zeromq::publisher>);  // publishes only

}  // namespace

BOOST_AUTO_TEST_SUITE(zeromq_end_to_end)

BOOST_AUTO_TEST_CASE(
    a_consumer_killed_between_commit_and_ack_gets_the_event_again_and_applies_it_once) {
  using combo = e2e::combo<outbox::test::sqlite_fixture, outbox::test::zeromq_tcp_fixture>;
  e2e::world<combo> w;
  const auto id = w.place("killed");
  auto relay = w.make_relay({.lease = 20s, .publish_timeout = 1s});

  // First consumer: commits (inbox + effect), then dies before its ack leaves.
  dying_receiver dying{&w.net};
  outbox::consumer<outbox::sqlite::store, dying_receiver, outbox::exponential_backoff,
                   outbox::testing::manual_clock>
      first(
          *w.consumer_store, dying,
          [](soci::session& sql, const outbox::message& m) {
            outbox::test::sqlite_fixture::record_applied(sql, "billing", m.id.to_string(),
                                                         m.aggregate_id);
          },
          {.name = "billing", .poll_timeout = 200ms}, outbox::consumer_retry, w.clock);
  {
    std::jthread t([&](std::stop_token st) {
      while (!st.stop_requested() && !dying.dead) first.poll_once();
    });
    BOOST_TEST(relay.run_once() == 1u);  // no ack by the deadline
  }
  BOOST_TEST(dying.dead);
  BOOST_TEST(relay.stats().published == 0u);
  BOOST_TEST(relay.stats().retried == 1u);
  BOOST_TEST(w.applied() == 1);  // committed once already

  // The restarted consumer gets it again; the inbox skips the effect; the ack confirms it.
  w.net.wait_for_consumers(1);
  auto second = w.make_consumer();
  w.clock.advance(5s);
  BOOST_TEST(w.with_consumer(second, [&] { return relay.run_once(); }) == 1u);
  w.consume_all(second);
  BOOST_TEST(relay.stats().published == 1u);
  BOOST_TEST(second.stats().applied == 0u);
  BOOST_TEST(second.stats().duplicates_skipped == 1u);
  BOOST_TEST(w.applied() == 1);
  BOOST_TEST(w.count("SELECT count(*) FROM applied WHERE event_id = '" + id.to_string() + "'") ==
             1);
  BOOST_TEST(w.app_store->stats(w.clock.now()).pending == 0);
}

BOOST_AUTO_TEST_SUITE_END()
