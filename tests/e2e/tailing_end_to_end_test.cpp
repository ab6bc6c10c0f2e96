// The log-tailing relay (postgresql::tailing_store) end to end with one transport: this file is
// compiled once per transport the build found (tests/meson.build: e2e_postgresql-tail_<name>).
// The writer (both modes) and the consumer's inbox are on one PostgreSQL database; the relay
// reads the WAL through a slot of the test's own. What the matrix checks for the polling
// stores, here for the stream: commit publishes and rollback does not, a failure retried
// through the table keeps its aggregate's order at the consumer, a dead letter lets the rest
// flow, a relay that died before settling is replayed and every event is applied once.
#define BOOST_TEST_MODULE tailing end to end
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <outbox/consumer.hpp>
#include <outbox/postgresql/store.hpp>
#include <outbox/postgresql/tailing_store.hpp>
#include <outbox/relay.hpp>
#include <outbox/testing/faulty_transport.hpp>
#include <outbox/testing/manual_clock.hpp>

#include OUTBOX_E2E_TRANSPORT_HEADER
#include "../conformance/end_to_end_world.hpp"
#include "../support/combo.hpp"
#include "../support/postgresql_tailing_fixture.hpp"
#include "../support/server_store_helpers.hpp"
#include "../support/services.hpp"

using namespace std::chrono_literals;
namespace pg = outbox::postgresql;

namespace {

using combos = e2e::pairs_t<std::tuple<outbox::test::postgresql_tailing_fixture>,
                            OUTBOX_E2E_TRANSPORT_FIXTURES>;

/// The tailing relay's world: e2e::world's parts, with the relay on the stream.
template <class Combo>
struct tail_world {
  using DB = typename Combo::store_fixture;
  using TF = typename Combo::transport_fixture;
  using publisher_type = std::remove_reference_t<decltype(std::declval<TF&>().publisher())>;
  using receiver_type = std::remove_reference_t<decltype(std::declval<TF&>().receiver())>;
  using tap_type = e2e::tap<publisher_type, !TF::thread_safe_publisher>;
  using faulty = outbox::testing::faulty_transport<tap_type>;
  using relay_type = outbox::relay<pg::tailing_store, faulty, outbox::exponential_backoff,
                                   outbox::testing::manual_clock>;
  using consumer_type = outbox::consumer<pg::store, receiver_type, outbox::exponential_backoff,
                                         outbox::testing::manual_clock>;

  DB db;
  TF net;
  tap_type wiretap{net.publisher()};
  faulty wire{wiretap};
  outbox::testing::manual_clock clock;
  std::unique_ptr<soci::session> app_sql = db.open_session();
  std::unique_ptr<soci::session> relay_sql = db.open_session();
  std::unique_ptr<pg::tailing_store> relay_store = db.make_tailing(*relay_sql);
  std::unique_ptr<soci::session> consumer_sql = db.open_session();
  std::unique_ptr<pg::store> consumer_store = db.make_store(*consumer_sql);

  static constexpr outbox::exponential_backoff retry{
      .initial = 1000ms, .multiplier = 2.0, .max_delay = 60s, .jitter = 0, .max_attempts = 3};

  relay_type make_relay() {
    return relay_type(*relay_store, wire, {.owner = "tail"}, retry, clock);
  }

  consumer_type make_consumer() {
    return consumer_type(
        *consumer_store, net.receiver(),
        [](soci::session& sql, const outbox::message& m) {
          DB::record_applied(sql, "billing", m.id.to_string(), m.aggregate_id);
        },
        {.name = "billing", .poll_timeout = 200ms},
        outbox::exponential_backoff{
            .initial = 1ms, .max_delay = 5ms, .jitter = 0, .max_attempts = 3},
        clock);
  }

  /// An order and its event in one transaction, written by `Mode`'s writer.
  template <class Mode = pg::tailing_store>
  outbox::uuid place(const std::string& order_id, const std::string& type = "order_placed",
                     bool commit = true) {
    outbox::writer<Mode> w;
    auto tx = DB::begin(*app_sql);
    DB::insert_order(*app_sql, order_id + "-" + type, 1);
    auto id = w.enqueue(*app_sql,
                        outbox::event{"order", order_id, type, R"({"order":")" + order_id + "\"}"});
    if (commit)
      tx->commit();
    else
      tx->rollback();
    return id;
  }

  /// Runs the relay (and, when confirms are the consumer's acks, the consumer beside it) until
  /// `n` events were published in all, bounded. `retries_due`: a step that claims nothing moves
  /// the clock past the retry policy's delays, so that a publish a slow broker failed is tried
  /// again (the clock moves only when told); false where a test holds a retry back itself.
  bool relay_until(relay_type& r, consumer_type& c, std::uint64_t n, bool retries_due = true) {
    const auto body = [&] {
      return outbox::test::eventually(
          [&] {
            if (r.run_once() == 0 && retries_due) clock.advance(retry.max_delay);
            return r.stats().published >= n;
          },
          60s);
    };
    if constexpr (TF::confirms_on_consumer_ack) {
      std::jthread t([&c](std::stop_token st) { c.run(st); });
      return body();
    } else {
      return body();
    }
  }

  /// Consumes until `n` distinct events were applied (bounded).
  bool applied_until(consumer_type& c, std::int64_t n) {
    return outbox::test::eventually(
        [&] {
          c.poll_once();
          return DB::applied_events(*app_sql) >= n;
        },
        60s);
  }

  /// The applied events of aggregate `agg`, in the order the consumer applied them.
  std::vector<std::string> applied_of(const std::string& agg) {
    soci::rowset<std::string> rs = (app_sql->prepare << "SELECT event_id FROM applied WHERE "
                                                        "aggregate_id = :a ORDER BY seq",
                                    soci::use(agg));
    return {rs.begin(), rs.end()};
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(tailing_end_to_end,
                      *boost::unit_test::precondition(e2e::services_for<combos>))

BOOST_AUTO_TEST_CASE_TEMPLATE(both_writer_modes_publish_on_commit_and_never_on_rollback, Combo,
                              combos) {
  tail_world<Combo> w;
  auto relay = w.make_relay();
  auto consumer = w.make_consumer();
  w.place("1");
  w.template place<pg::tailing_store::table_mode>("2");
  w.place("3", "rolled_back", false);
  w.template place<pg::tailing_store::table_mode>("4", "rolled_back", false);
  w.place("5");
  w.place("sentinel");  // committed last: once it is through, everything before it is
  BOOST_TEST_REQUIRE(w.relay_until(relay, consumer, 4));
  BOOST_TEST_REQUIRE(w.applied_until(consumer, 4));
  BOOST_TEST(w.wiretap.sent().size() == 4u);
  BOOST_TEST(w.wiretap.sent().back().aggregate_id == "sentinel");
  BOOST_TEST(Combo::store_fixture::applied_rows(*w.app_sql) == 4);
  BOOST_TEST(w.db.count(*w.app_sql, "SELECT count(*) FROM outbox") == 0);  // streamed row gone
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_failure_retried_through_the_table_keeps_the_order_at_the_consumer,
                              Combo, combos) {
  tail_world<Combo> w;
  auto relay = w.make_relay();
  auto consumer = w.make_consumer();
  const auto a1 = w.place("A", "first");
  const auto a2 = w.template place<pg::tailing_store::table_mode>("A", "second");
  const auto b1 = w.place("B", "other");
  w.wire.fail_when([](const outbox::message& m) { return m.event_type == "first"; },
                   outbox::errc::transient);
  // B's event: A waits for its retry (the clock held)
  BOOST_TEST_REQUIRE(w.relay_until(relay, consumer, 1, false));
  BOOST_TEST(w.db.count(*w.app_sql, "SELECT count(*) FROM outbox WHERE state = 0") == 2);
  const auto a3 = w.place("A", "third");  // behind the two in the table
  w.wire.heal();
  w.clock.advance(2s);
  BOOST_TEST_REQUIRE(w.relay_until(relay, consumer, 4));
  BOOST_TEST_REQUIRE(w.applied_until(consumer, 4));
  const std::vector<std::string> expected{a1.to_string(), a2.to_string(), a3.to_string()};
  BOOST_TEST(w.applied_of("A") == expected, boost::test_tools::per_element());
  BOOST_TEST(w.applied_of("B") == std::vector<std::string>{b1.to_string()},
             boost::test_tools::per_element());
  BOOST_TEST(Combo::store_fixture::applied_rows(*w.app_sql) == 4);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_failing_event_is_dead_lettered_while_the_others_flow, Combo,
                              combos) {
  tail_world<Combo> w;
  auto relay = w.make_relay();
  auto consumer = w.make_consumer();
  w.wire.fail_when([](const outbox::message& m) { return m.event_type == "poison"; });
  w.place("A", "poison");
  w.place("A", "after");
  w.place("B", "fine");
  BOOST_TEST_REQUIRE(w.relay_until(relay, consumer, 2));
  BOOST_TEST_REQUIRE(w.applied_until(consumer, 2));
  const auto dead = w.relay_store->dead_letters(10);
  BOOST_TEST_REQUIRE(dead.size() == 1u);
  BOOST_TEST(dead.front().msg.event_type == "poison");
  BOOST_TEST(relay.stats().dead_lettered == 1u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_relay_that_died_before_settling_is_replayed_and_applied_once, Combo,
                              combos) {
  tail_world<Combo> w;
  auto consumer = w.make_consumer();
  for (int i = 0; i < 5; ++i) w.place(std::to_string(i));
  {
    // Claimed and sent, never settled: the process died after the broker took the events.
    // The five come in one batch once the stream has them all; a claim that found fewer is
    // given back (kept, it would count as a relay that died on its head batch: attempts).
    std::optional<outbox::claimed_batch> b;
    BOOST_TEST_REQUIRE(outbox::test::eventually([&] {
      b = w.relay_store->claim(
          {.owner = "dying", .limit = 100, .now = w.clock.now(), .lease = 30s});
      if (b->size() == 5u) return true;
      if (!b->empty()) w.relay_store->release(*b);
      return false;
    }));
    const auto send = [&] {
      (void)w.wire.publish(b->messages, std::chrono::steady_clock::now() + 10s);
    };
    if constexpr (Combo::transport_fixture::confirms_on_consumer_ack) {
      std::jthread t([&consumer](std::stop_token st) { consumer.run(st); });
      send();
    } else {
      send();
    }
    w.relay_store.reset();
  }
  w.relay_store = w.db.make_tailing(*w.relay_sql);
  auto relay = w.make_relay();
  BOOST_TEST_REQUIRE(w.relay_until(relay, consumer, 5));
  BOOST_TEST(relay.stats().dead_lettered == 0u);
  BOOST_TEST_REQUIRE(w.applied_until(consumer, 5));
  // Every copy on the wire came to the consumer: five applied, five skipped as duplicates.
  BOOST_TEST_REQUIRE(outbox::test::eventually(
      [&] {
        consumer.poll_once();
        const auto s = consumer.stats();
        return s.applied + s.duplicates_skipped >= 10u;
      },
      60s));
  BOOST_TEST(w.wiretap.sent().size() == 10u);                       // each event twice on the wire
  BOOST_TEST(Combo::store_fixture::applied_rows(*w.app_sql) == 5);  // and applied once
}

BOOST_AUTO_TEST_SUITE_END()

OUTBOX_TEST_MAIN()
