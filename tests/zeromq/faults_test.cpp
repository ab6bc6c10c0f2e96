// ZeroMQ end-to-end faults, beyond the matrix (tests/e2e): with the SQLite store, a consumer
// that dies between its commit and its ack, and a relay running while no consumer is connected.
#define BOOST_TEST_MODULE zeromq faults
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>
#include <tuple>

#include "../sqlite/fixture.hpp"
#include "../support/combo.hpp"
#include "fixture.hpp"

#include "../conformance/end_to_end_world.hpp"

using namespace std::chrono_literals;

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
  [[nodiscard]] std::size_t max_held() const { return net->receiver().max_held(); }  // its window
};
static_assert(outbox::concepts::receiver<dying_receiver>);
static_assert(!outbox::concepts::receiver<outbox::zeromq::publisher>);  // publishes only

}  // namespace

BOOST_AUTO_TEST_SUITE(zeromq_faults)

BOOST_AUTO_TEST_CASE(
    a_consumer_killed_between_commit_and_ack_gets_the_event_again_and_applies_it_once) {
  using combo = e2e::combo<outbox::test::sqlite_fixture, outbox::test::zeromq_tcp_fixture>;
  e2e::world<combo> w;
  const auto id = w.place("killed");
  // A publish ends once its consumer acked or was found gone (the publisher's probe), never by
  // this deadline: how fast a consumer gets to its commit does not matter.
  auto relay = w.make_relay({.lease = 90s, .publish_timeout = 30s});

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
    // Runs until the consumer died (its commit made), not until the relay is done.
    std::jthread t([&] {
      const auto until = std::chrono::steady_clock::now() + 60s;
      while (!dying.dead && std::chrono::steady_clock::now() < until) first.poll_once();
    });
    BOOST_TEST(relay.run_once() == 1u);  // no ack: the consumer is gone
  }
  BOOST_TEST(dying.dead);
  BOOST_TEST(relay.stats().published == 0u);
  BOOST_TEST(relay.stats().retried == 1u);
  BOOST_TEST(w.applied() == 1);  // committed once already

  // The restarted consumer gets it again; the inbox skips the effect; the ack confirms it. (The
  // publish drops the dead consumer if it still knows it, and waits for the new one's hello.)
  auto second = w.make_consumer();
  w.clock.advance(5s);
  BOOST_TEST(w.with_consumer(second, [&] { return relay.run_once(); }) == 1u);
  w.consume_all(second);
  BOOST_TEST(relay.stats().published == 1u);
  BOOST_TEST(relay.stats().retried == 1u);
  BOOST_TEST(second.stats().applied == 0u);
  BOOST_TEST(second.stats().duplicates_skipped == 1u);
  BOOST_TEST(w.applied() == 1);
  BOOST_TEST(w.count("SELECT count(*) FROM applied WHERE event_id = '" + id.to_string() + "'") ==
             1);
  BOOST_TEST(w.app_store->stats(w.clock.now()).pending == 0);
}

BOOST_AUTO_TEST_CASE(a_consumer_outage_spends_no_attempts_and_everything_is_applied_after_it) {
  outbox::test::sqlite_fixture db;
  auto app_sql = db.open_session();
  auto app_store = db.make_store(*app_sql);
  auto relay_sql = db.open_session();
  auto relay_store = db.make_store(*relay_sql);
  auto consumer_sql = db.open_session();
  auto consumer_store = db.make_store(*consumer_sql);
  outbox::writer<outbox::sqlite::store> writer(*app_store);
  constexpr int events = 5;
  for (int i = 0; i < events; ++i) {
    auto tx = outbox::test::sqlite_fixture::begin(*app_sql);
    writer.enqueue(*app_sql,
                   outbox::event{"order", "outage-" + std::to_string(i), "order_placed", "{}", {}});
    tx->commit();
  }

  outbox::zeromq::publisher pub({.endpoint = "tcp://127.0.0.1:*"});
  // Four attempts and an event is dead: a relay that spent one per publish with nobody there
  // would dead-letter everything by its fourth publish.
  constexpr outbox::exponential_backoff retry{
      .initial = 20ms, .multiplier = 2.0, .max_delay = 100ms, .jitter = 0, .max_attempts = 4};
  // The publish timeout is also what the consumer has, once back, to apply and ack the five
  // events: a loaded machine must not make it miss three times (an event dead-lettered).
  outbox::relay relay(
      *relay_store, pub,
      {.lease = 8s, .publish_timeout = 2s, .idle_poll_min = 5ms, .idle_poll_max = 50ms}, retry);
  std::optional<outbox::zeromq::receiver> rcv;
  std::optional<outbox::consumer<outbox::sqlite::store, outbox::zeromq::receiver>> shipping;
  std::jthread relay_thread([&](std::stop_token st) { relay.run(st); });

  // The outage: no consumer for more publishes than max_attempts (each gives up at its deadline).
  const std::uint64_t outage_publishes = retry.max_attempts + 1;
  const auto outage_until = std::chrono::steady_clock::now() + 60s;
  while (relay.stats().errors < outage_publishes && std::chrono::steady_clock::now() < outage_until)
    std::this_thread::sleep_for(10ms);
  BOOST_TEST(relay.stats().errors >= outage_publishes);  // publish gave up, transiently
  BOOST_TEST(relay.stats().retried == 0u);
  BOOST_TEST(relay.stats().dead_lettered == 0u);
  BOOST_TEST(app_store->stats(outbox::system_clock{}.now()).dead == 0);

  // The consumer comes (back): everything is applied, once, and nothing was dead-lettered.
  rcv.emplace(outbox::zeromq::receiver_options{.endpoint = pub.endpoint(), .name = "back"});
  shipping.emplace(
      *consumer_store, *rcv,
      [](soci::session& sql, const outbox::message& m) {
        outbox::test::sqlite_fixture::record_applied(sql, "shipping", m.id.to_string(),
                                                     m.aggregate_id);
      },
      outbox::consumer_options{.name = "shipping", .poll_timeout = 50ms});
  {
    std::jthread consumer_thread([&](std::stop_token st) { shipping->run(st); });
    const auto applied = [&] {
      return outbox::test::sqlite_fixture::count(*app_sql, "SELECT count(*) FROM applied");
    };
    const auto until = std::chrono::steady_clock::now() + 60s;
    while ((applied() < events || relay.stats().published < events) &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(10ms);
    relay_thread.request_stop();
    relay_thread.join();
  }
  BOOST_TEST(outbox::test::sqlite_fixture::count(*app_sql, "SELECT count(*) FROM applied") ==
             events);
  BOOST_TEST(outbox::test::sqlite_fixture::count(
                 *app_sql, "SELECT count(DISTINCT event_id) FROM applied") == events);
  BOOST_TEST(relay.stats().published == static_cast<std::uint64_t>(events));
  BOOST_TEST(relay.stats().dead_lettered == 0u);
  const auto s = app_store->stats(outbox::system_clock{}.now());
  BOOST_TEST(s.pending == 0);
  BOOST_TEST(s.dead == 0);
  BOOST_TEST(app_store->dead_letters(10).empty());
  BOOST_TEST(outbox::test::sqlite_fixture::count(*app_sql, "SELECT max(attempts) FROM outbox") <
             retry.max_attempts);
}

BOOST_AUTO_TEST_SUITE_END()
