// The in-memory store's own behaviour, beyond the conformance suite: its sessions (transactions,
// business tables, on-commit callbacks, aborted transactions, conflicting commits), exact bytes,
// the store clock, waking, and fault injection as a user unit-testing a service uses it with the
// writer, the relay and the consumer.
#define BOOST_TEST_MODULE memory store
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <outbox/outbox.hpp>
#include <outbox/testing/faulty_transport.hpp>
#include <outbox/testing/manual_clock.hpp>
#include <outbox/testing/memory_store.hpp>
#include <outbox/testing/memory_transport.hpp>

#include "../support/errors.hpp"

using namespace std::chrono_literals;
using outbox::test::kind_of;
using outbox::testing::memory_database;
using outbox::testing::memory_operation;
using outbox::testing::memory_session;
using outbox::testing::memory_statement_error;
using outbox::testing::memory_store;

namespace {

outbox::event order_event(std::string id, std::string payload = R"({"total":1})") {
  return outbox::event{"order", std::move(id), "order_placed", std::move(payload), {}};
}

outbox::claim_request req(outbox::time_point now, std::size_t n = 100) {
  return outbox::claim_request{"test", n, now, 30s};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(memory_sessions)

BOOST_AUTO_TEST_CASE(business_rows_events_and_callbacks_commit_together_or_not_at_all) {
  memory_database db;
  memory_session app(db);
  memory_store store(app);
  outbox::writer writer(store);
  int applied = 0;
  {
    memory_session::transaction tx(app);
    app.insert("orders", "1", "10");
    writer.enqueue(app, order_event("1"));
    app.on_commit([&] { ++applied; });
    BOOST_TEST(app.find("orders", "1").value_or("") == "10");  // its own writes
    BOOST_TEST(db.table("orders").empty());                    // nobody else's yet
    BOOST_TEST(db.outbox().empty());
    BOOST_TEST(applied == 0);
  }  // rolled back
  BOOST_TEST(db.table("orders").empty());
  BOOST_TEST(db.outbox().empty());
  BOOST_TEST(applied == 0);
  {
    memory_session::transaction tx(app);
    app.insert("orders", "1", "10");
    writer.enqueue(app, order_event("1"));
    app.on_commit([&] { ++applied; });
    tx.commit();
  }
  BOOST_TEST(db.table("orders").at("1") == "10");
  BOOST_TEST(db.outbox().size() == 1u);
  BOOST_TEST(applied == 1);
  // Outside a transaction a statement commits on its own.
  app.put("orders", "2", "20");
  BOOST_TEST(db.table("orders").size() == 2u);
  BOOST_TEST(app.erase("orders", "2"));
  BOOST_TEST(!app.erase("orders", "2"));
  BOOST_TEST(db.table("orders").size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_failed_statement_aborts_the_transaction_like_postgresql) {
  memory_database db;
  memory_session app(db);
  app.put("orders", "1", "10");
  memory_session::transaction tx(app);
  app.put("orders", "2", "20");
  try {
    app.insert("orders", "1", "11");
    BOOST_ERROR("duplicate key accepted");
  } catch (const memory_statement_error& e) {
    BOOST_TEST((e.kind() == outbox::errc::duplicate));
    BOOST_TEST(e.code() == "duplicate_key");
  }
  BOOST_CHECK_THROW(app.put("orders", "3", "30"), memory_statement_error);  // aborted
  BOOST_TEST((kind_of([&] { tx.commit(); }) == outbox::errc::permanent));
  BOOST_TEST(db.table("orders").size() == 1u);  // "2" rolled back with it
  app.put("orders", "3", "30");                 // the session is usable again
  BOOST_TEST(db.table("orders").size() == 2u);
}

BOOST_AUTO_TEST_CASE(the_second_of_two_commits_recording_one_delivery_fails_transient) {
  memory_database db;
  memory_session s1(db), s2(db);
  memory_store c1(s1), c2(s2);
  const auto id = outbox::make_uuid_v7();
  const auto now = std::chrono::system_clock::now();
  auto t1 = c1.begin();
  auto t2 = c2.begin();
  BOOST_TEST(c1.record_delivery("billing", id, now));
  BOOST_TEST(c2.record_delivery("billing", id, now));  // neither sees the other yet
  s1.insert("applied", "by-1", id.to_string());
  s2.insert("applied", "by-2", id.to_string());
  t1.commit();
  BOOST_TEST((kind_of([&] { t2.commit(); }) == outbox::errc::transient));
  BOOST_TEST(db.inbox().size() == 1u);
  BOOST_TEST(db.table("applied").size() == 1u);  // the effect applied once
  auto t3 = c2.begin();
  BOOST_TEST(!c2.record_delivery("billing", id, now));  // the retry sees the duplicate
}

BOOST_AUTO_TEST_CASE(an_event_id_appended_twice_is_a_duplicate_and_aborts) {
  memory_database db;
  memory_session app(db), other_app(db);
  memory_store store(app);
  outbox::event e = order_event("1");
  const outbox::outgoing row{outbox::make_uuid_v7(), &e, "{}", std::chrono::system_clock::now()};
  store.append(app, std::span(&row, 1));  // autocommit
  memory_session::transaction tx(app);
  BOOST_TEST((kind_of([&] { store.append(app, std::span(&row, 1)); }) == outbox::errc::duplicate));
  BOOST_TEST((kind_of([&] { tx.commit(); }) == outbox::errc::permanent));
  memory_database elsewhere;
  memory_session foreign(elsewhere);
  BOOST_TEST(
      (kind_of([&] { store.append(foreign, std::span(&row, 1)); }) == outbox::errc::misconfigured));
  BOOST_TEST(db.outbox().size() == 1u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(memory_rows)

BOOST_AUTO_TEST_CASE(payload_bytes_and_content_type_are_kept_exactly) {
  memory_database db;
  memory_session app(db);
  memory_store store(app);
  outbox::writer writer(store);
  outbox::event json = order_event("1", "{ \"b\" : 1,  \"a\":[ ] }");  // spaces, key order
  outbox::event avro = order_event("2", std::string("\x00\x01\xff avro", 8));
  avro.content_type = "application/avro";
  writer.enqueue(app, json);
  writer.enqueue(app, avro);
  const auto batch = store.claim(req(std::chrono::system_clock::now()));
  BOOST_TEST_REQUIRE(batch.size() == 2u);
  BOOST_TEST(batch.messages[0].payload == json.payload);
  BOOST_TEST(batch.messages[0].content_type == "application/json");
  BOOST_TEST(batch.messages[1].payload == avro.payload);
  BOOST_TEST(batch.messages[1].payload.size() == 8u);
  BOOST_TEST(batch.messages[1].content_type == "application/avro");
}

BOOST_AUTO_TEST_CASE(a_raw_row_with_a_bad_content_type_is_dead_lettered_on_the_claim) {
  memory_database db;
  memory_session app(db);
  memory_store store(app);
  outbox::testing::memory_row row;
  row.id = outbox::make_uuid_v7();
  row.aggregate_type = "order";
  row.aggregate_id = "1";
  row.event_type = "raw";
  row.content_type = "not a media type";
  db.insert_raw(row);
  const auto now = std::chrono::system_clock::now();
  const auto batch = store.claim(req(now));
  BOOST_TEST(batch.empty());
  BOOST_TEST(batch.unreadable == 1u);
  const auto dead = store.dead_letters(10);
  BOOST_TEST_REQUIRE(dead.size() == 1u);
  BOOST_TEST(dead[0].last_error.find("content_type") != std::string::npos, dead[0].last_error);
  BOOST_TEST((dead[0].dead_at == now));  // the claim's time, not the system clock's
}

BOOST_AUTO_TEST_CASE(settle_stamps_the_stores_clock) {
  // A clock far from the real time: published_at and dead_at follow it, and so do purges.
  const outbox::time_point t0{std::chrono::sys_days{std::chrono::year{2001} / 1 / 1}};
  outbox::testing::manual_clock clock(t0);
  memory_database db;
  memory_session app(db);
  memory_store<outbox::testing::manual_clock> store(app, {}, clock);
  outbox::writer writer(store, {}, clock);
  writer.enqueue(app, std::vector{order_event("1"), order_event("2")});
  auto b = store.claim(req(clock.now()));
  BOOST_TEST_REQUIRE(b.size() == 2u);
  clock.advance(5s);
  std::vector<outbox::settlement> f(2);
  f[0].what = outbox::settlement::kind::published;
  f[1].what = outbox::settlement::kind::dead;
  store.settle(b, f);
  const auto rows = db.outbox();
  BOOST_TEST_REQUIRE(rows.size() == 2u);
  BOOST_TEST((rows[0].published_at == t0 + 5s));
  BOOST_TEST((rows[1].dead_at == t0 + 5s));
  BOOST_TEST((store.dead_letters(1).at(0).dead_at == t0 + 5s));
  BOOST_TEST(store.purge_published(t0 + 5s, 10) == 0u);
  BOOST_TEST(store.purge_published(t0 + 6s, 10) == 1u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(memory_waking)

BOOST_AUTO_TEST_CASE(wait_for_work_ends_on_a_commit_an_interrupt_or_the_timeout) {
  memory_database db;
  memory_session app(db), relay_sql(db);
  memory_store app_store(app), relay_store(relay_sql);
  outbox::writer writer(app_store);
  auto start = std::chrono::steady_clock::now();
  BOOST_TEST(!relay_store.wait_for_work(30ms));
  BOOST_TEST((std::chrono::steady_clock::now() - start >= 30ms));

  std::jthread committer([&] {
    std::this_thread::sleep_for(20ms);
    memory_session::transaction tx(app);
    writer.enqueue(app, order_event("1"));
    tx.commit();
  });
  start = std::chrono::steady_clock::now();
  BOOST_TEST(relay_store.wait_for_work(10s));
  BOOST_TEST((std::chrono::steady_clock::now() - start < 5s));
  committer.join();

  std::jthread interrupter([&] {
    std::this_thread::sleep_for(20ms);
    relay_store.interrupt();
  });
  start = std::chrono::steady_clock::now();
  BOOST_TEST(relay_store.wait_for_work(10s));
  BOOST_TEST((std::chrono::steady_clock::now() - start < 5s));
  interrupter.join();
  relay_store.interrupt();  // before the wait: ends the next one
  BOOST_TEST(relay_store.wait_for_work(10s));
}

BOOST_AUTO_TEST_CASE(an_idle_relay_is_woken_by_a_commit_not_by_its_poll) {
  memory_database db;
  memory_session app(db), relay_sql(db);
  memory_store app_store(app), relay_store(relay_sql);
  outbox::writer writer(app_store);
  outbox::testing::memory_transport broker;
  outbox::relay relay(relay_store, broker,
                      {.idle_poll_min = std::chrono::milliseconds(10'000),
                       .idle_poll_max = std::chrono::milliseconds(10'000)});
  std::jthread t([&](std::stop_token st) { relay.run(st); });
  // The relay found nothing and sleeps (10 s).
  while (relay.stats().steps == 0) std::this_thread::sleep_for(1ms);
  const auto start = std::chrono::steady_clock::now();
  {
    memory_session::transaction tx(app);
    writer.enqueue(app, order_event("1"));
    tx.commit();
  }
  while (broker.published_count() == 0 && std::chrono::steady_clock::now() - start < 5s)
    std::this_thread::sleep_for(1ms);
  BOOST_TEST(broker.published_count() == 1u);
  BOOST_TEST((std::chrono::steady_clock::now() - start < 5s));
  t.request_stop();  // the stop callback interrupts the wait
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(memory_faults)

BOOST_AUTO_TEST_CASE(a_transient_claim_failure_fails_one_run_and_the_next_publishes) {
  memory_database db;
  memory_session app(db), relay_sql(db);
  memory_store app_store(app), relay_store(relay_sql);
  outbox::writer writer(app_store);
  outbox::testing::memory_transport broker;
  outbox::relay relay(relay_store, broker);
  writer.enqueue(app, order_event("1"));
  db.fail_next(1, outbox::errc::transient, memory_operation::claim);
  BOOST_TEST((kind_of([&] { relay.run_once(); }) == outbox::errc::transient));
  BOOST_TEST(db.failures_injected() == 1u);
  BOOST_TEST(relay.run_once() == 1u);
  BOOST_TEST(broker.published_count() == 1u);
  BOOST_TEST(relay_store.stats(std::chrono::system_clock::now()).pending == 0);
}

BOOST_AUTO_TEST_CASE(a_settle_that_keeps_failing_leaves_the_batch_to_its_lease) {
  outbox::testing::manual_clock clock;
  memory_database db;
  memory_session app(db), relay_sql(db);
  memory_store app_store(app), relay_store(relay_sql);
  outbox::writer writer(app_store);
  outbox::testing::memory_transport broker;
  outbox::relay relay(relay_store, broker, {.lease = 30s}, outbox::exponential_backoff{}, clock);
  writer.enqueue(app, order_event("1"));
  db.fail_next(1, outbox::errc::transient, memory_operation::settle);
  BOOST_TEST(relay.run_once() == 1u);  // one failed settle is retried by the relay
  BOOST_TEST(relay.stats().published == 1u);

  writer.enqueue(app, order_event("2"));
  db.fail_next(3, outbox::errc::transient, memory_operation::settle);
  BOOST_TEST((kind_of([&] { relay.run_once(); }) == outbox::errc::transient));
  BOOST_TEST(broker.published_count() == 2u);  // it was sent, but could not be marked
  BOOST_TEST(relay.run_once() == 0u);          // held by the lease
  clock.advance(31s);
  BOOST_TEST(relay.run_once() == 1u);  // taken over, sent again (at least once)
  const auto rows = db.outbox();
  BOOST_TEST_REQUIRE(rows.size() == 2u);
  BOOST_TEST(rows[1].attempts == 2);
  BOOST_TEST(rows[1].published_at.has_value());
}

BOOST_AUTO_TEST_CASE(an_in_doubt_commit_is_applied_and_reported) {
  memory_database db;
  memory_session app(db);
  db.fail_next(1, outbox::errc::in_doubt, memory_operation::commit);
  memory_session::transaction tx(app);
  app.put("orders", "1", "10");
  BOOST_TEST((kind_of([&] { tx.commit(); }) == outbox::errc::in_doubt));
  BOOST_TEST(db.table("orders").size() == 1u);
  db.fail_next(1, outbox::errc::transient, memory_operation::commit);
  memory_session::transaction tx2(app);
  app.put("orders", "2", "20");
  BOOST_TEST((kind_of([&] { tx2.commit(); }) == outbox::errc::transient));
  BOOST_TEST(db.table("orders").size() == 1u);  // rolled back
}

BOOST_AUTO_TEST_CASE(the_consumer_classifies_a_handlers_failed_statement_by_the_store) {
  memory_database db;
  memory_session consumer_sql(db);
  memory_store store(consumer_sql);
  outbox::testing::memory_transport broker;
  using consumer_type = outbox::consumer<memory_store<>, outbox::testing::memory_transport>;
  consumer_type consumer(
      store, broker,
      [](memory_session& sql, const outbox::message& m) {
        sql.insert("applied", m.id.to_string(), m.aggregate_id);
      },
      {.name = "billing", .poll_timeout = 100ms},
      outbox::exponential_backoff{.initial = 1ms, .max_delay = 1ms, .max_attempts = 1});
  outbox::message m;
  m.id = outbox::make_uuid_v7();
  m.aggregate_type = "order";
  m.aggregate_id = "1";
  m.event_type = "placed";
  m.payload = "{}";
  (void)broker.publish(std::span(&m, 1), std::chrono::steady_clock::now() + 1s);
  // A transient statement failure (a busy database) spends no attempt, even with one allowed.
  db.fail_next(2, outbox::errc::transient, memory_operation::statement);
  BOOST_TEST((consumer.poll_once() == consumer_type::outcome::retrying));
  BOOST_TEST((consumer.poll_once() == consumer_type::outcome::retrying));
  BOOST_TEST(db.inbox().empty());  // rolled back with the failed effect
  BOOST_TEST((consumer.poll_once() == consumer_type::outcome::applied));
  BOOST_TEST(db.table("applied").size() == 1u);
  BOOST_TEST(db.inbox().size() == 1u);
  // A permanent one spends the only attempt: dead-lettered with its reason.
  m.id = outbox::make_uuid_v7();
  (void)broker.publish(std::span(&m, 1), std::chrono::steady_clock::now() + 1s);
  db.fail_next(1, outbox::errc::permanent, memory_operation::statement);
  BOOST_TEST((consumer.poll_once() == consumer_type::outcome::dead_lettered));
  const auto dead = db.inbox_dead();
  BOOST_TEST_REQUIRE(dead.size() == 1u);
  BOOST_TEST(dead[0].error.find("injected") != std::string::npos, dead[0].error);
  BOOST_TEST(db.table("applied").size() == 1u);
}

BOOST_AUTO_TEST_CASE(faults_hit_only_the_operations_named_until_healed) {
  memory_database db;
  memory_session app(db);
  memory_store store(app);
  const auto now = std::chrono::system_clock::now();
  db.fail_next(2, outbox::errc::misconfigured, memory_operation::operations);
  BOOST_TEST(store.claim(req(now)).empty());  // not named: unaffected
  BOOST_TEST(db.failures_injected() == 0u);
  BOOST_TEST((kind_of([&] { (void)store.stats(now); }) == outbox::errc::misconfigured));
  db.heal();
  BOOST_CHECK_NO_THROW((void)store.stats(now));
  BOOST_TEST(db.failures_injected() == 1u);
  db.fail_next(1, outbox::errc::transient, memory_operation::claim | memory_operation::settle);
  BOOST_TEST((kind_of([&] { (void)store.claim(req(now)); }) == outbox::errc::transient));
  BOOST_TEST(store.claim(req(now)).empty());  // one failure, as asked
}

BOOST_AUTO_TEST_CASE(a_fault_keyed_to_a_count_lets_that_many_through_first) {
  memory_database db;
  memory_session app(db);
  memory_store store(app);
  const auto now = std::chrono::system_clock::now();
  db.fail_after(2, 2, outbox::errc::transient, memory_operation::claim);
  db.fail_next(1, outbox::errc::permanent, memory_operation::operations);
  BOOST_TEST((kind_of([&] { (void)store.stats(now); }) == outbox::errc::permanent));
  BOOST_TEST(store.claim(req(now)).empty());  // 1 and 2 go through
  BOOST_TEST(store.claim(req(now)).empty());
  BOOST_TEST((kind_of([&] { (void)store.claim(req(now)); }) == outbox::errc::transient));
  BOOST_TEST((kind_of([&] { (void)store.claim(req(now)); }) == outbox::errc::transient));
  BOOST_TEST(store.claim(req(now)).empty());  // the rule is spent
  BOOST_CHECK_NO_THROW((void)store.stats(now));
  BOOST_TEST(db.failures_injected() == 3u);
}

BOOST_AUTO_TEST_SUITE_END()

// ---- an aggregate's run in one call, on a transport that keeps publish order ------------------

namespace {

/// Counts publish calls; declares keeps_publish_order as told.
template <bool KeepsOrder, class Inner = outbox::testing::memory_transport>
struct counting_transport {
  static constexpr bool keeps_publish_order = KeepsOrder;
  Inner* inner;
  int calls = 0;
  std::vector<outbox::publish_result> publish(std::span<const outbox::message> batch,
                                              std::chrono::steady_clock::time_point until) {
    ++calls;
    return inner->publish(batch, until);
  }
};
static_assert(outbox::concepts::order_keeping_transport<counting_transport<true>>);
static_assert(!outbox::concepts::order_keeping_transport<counting_transport<false>>);
static_assert(outbox::concepts::order_keeping_transport<outbox::testing::memory_transport>);

/// `n` events in one transaction, the i-th on the aggregate `aggregate_of(i)`; their ids in
/// commit order.
template <class AggregateOf>
std::vector<outbox::uuid> enqueue(memory_database& db, int n, AggregateOf aggregate_of) {
  memory_session app(db);
  memory_store store(app);
  outbox::writer writer(store);
  std::vector<outbox::uuid> ids;
  ids.reserve(static_cast<std::size_t>(n));
  memory_session::transaction tx(app);
  for (int i = 0; i < n; ++i) ids.push_back(writer.enqueue(app, order_event(aggregate_of(i))));
  tx.commit();
  return ids;
}

/// 300 events, every third of one aggregate ("hot"), the rest over 17 others; ids in commit order.
std::vector<outbox::uuid> enqueue_hot_among_many(memory_database& db) {
  return enqueue(db, 300, [](int i) {
    return i % 3 == 0 ? std::string("hot") : "a" + std::to_string(i % 17);
  });
}

/// 200 events of one aggregate ("hot"), their ids in commit order.
std::vector<outbox::uuid> enqueue_hot(memory_database& db, int n = 200) {
  return enqueue(db, n, [](int) { return std::string("hot"); });
}

/// Runs `relay` until `store` has nothing pending (bounded: 10 s), waiting out retry delays.
template <class Relay>
void drain(Relay& relay, memory_store<>& store) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (store.stats(std::chrono::system_clock::now()).pending > 0 &&
         std::chrono::steady_clock::now() < until) {
    relay.run_once();
    std::this_thread::sleep_for(2ms);
  }
  BOOST_TEST(store.stats(std::chrono::system_clock::now()).pending == 0);
}

std::vector<outbox::uuid> ids_of(const std::vector<outbox::message>& wire) {
  std::vector<outbox::uuid> ids;
  ids.reserve(wire.size());
  for (const auto& m : wire) ids.push_back(m.id);
  return ids;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(aggregate_runs)

BOOST_AUTO_TEST_CASE(a_hot_aggregates_batch_is_one_call_where_the_transport_keeps_order) {
  for (const bool keeps : {true, false}) {
    memory_database db;
    const auto ids = enqueue_hot(db);
    memory_session relay_sql(db);
    memory_store store(relay_sql);
    outbox::testing::memory_transport broker({.record = true});
    int calls = 0;
    if (keeps) {
      counting_transport<true> t{&broker};
      outbox::relay relay(store, t, {.batch_size = 500});
      BOOST_TEST(relay.run_once() == 200u);
      calls = t.calls;
    } else {
      counting_transport<false> t{&broker};
      outbox::relay relay(store, t, {.batch_size = 500});
      BOOST_TEST(relay.run_once() == 200u);
      calls = t.calls;
    }
    // One confirm round trip for the batch, or one per message (waves).
    BOOST_TEST(calls == (keeps ? 1 : 200));
    BOOST_TEST((ids_of(broker.wire()) == ids));
    BOOST_TEST(store.stats(std::chrono::system_clock::now()).pending == 0);
  }
}

namespace {

/// Waves (no order promise) over a memory transport whose first call confirms only once 60 %
/// of the time to its deadline has passed: a broker whose confirms are slow.
struct slow_first_wave_transport {
  static constexpr bool keeps_publish_order = false;
  outbox::testing::memory_transport* inner;
  int calls = 0;
  std::vector<outbox::publish_result> publish(std::span<const outbox::message> batch,
                                              std::chrono::steady_clock::time_point until) {
    if (calls++ == 0) {
      const auto now = std::chrono::steady_clock::now();
      std::this_thread::sleep_until(now + (until - now) * 6 / 10);
    }
    return inner->publish(batch, until);
  }
};

}  // namespace

// A wave is not started with less time left than the last one took: its confirms would come
// after the deadline, charging an attempt and sending it twice (a 4 s broker under a 10 s
// publish timeout: the third wave of each batch went out twice). The rest is released, no
// attempt spent, and goes out with the next claim, in order.
BOOST_AUTO_TEST_CASE(a_wave_the_deadline_cannot_cover_is_released_not_sent) {
  memory_database db;
  const auto ids = enqueue(db, 4, [](int i) { return "a" + std::to_string(i % 2); });
  memory_session relay_sql(db);
  memory_store store(relay_sql);
  outbox::testing::memory_transport broker({.record = true});
  slow_first_wave_transport t{&broker};
  outbox::relay relay(store, t, {.batch_size = 10, .publish_timeout = 500ms});
  BOOST_TEST(relay.run_once() == 4u);
  BOOST_TEST(t.calls == 1);  // the second wave was not sent
  BOOST_TEST((ids_of(broker.wire()) == std::vector<outbox::uuid>{ids[0], ids[1]}));
  BOOST_TEST(relay.stats().released == 2u);
  BOOST_TEST(relay.stats().retried == 0u);
  drain(relay, store);
  BOOST_TEST((ids_of(broker.wire()) == ids));  // each once, in order
  BOOST_TEST(relay.stats().retried == 0u);
}

// A transport that promises to keep order and then fails one message in the middle of a run
// while confirming the later ones (a broker that nacks one message and takes the next): the
// later ones are on the wire ahead of the failed one, which follows after its retry. The relay
// cannot take them back; it settles each by its own confirm and counts them (reordered). With
// waves (no promise) the rest of the run is held back instead, and the order holds.
BOOST_AUTO_TEST_CASE(a_failure_in_the_middle_of_a_run_is_counted_or_holds_the_rest_back) {
  // 200 events of one aggregate, the 50th failing once; the relay's stats and the wire.
  const auto run = []<bool KeepsOrder>(std::vector<outbox::uuid>& ids) {
    memory_database db;
    ids = enqueue_hot(db);
    memory_session relay_sql(db);
    memory_store store(relay_sql);
    outbox::testing::memory_transport broker({.record = true});
    outbox::testing::faulty_transport<outbox::testing::memory_transport, KeepsOrder> faulty(broker);
    const auto failing = ids[49];
    faulty.fail_when([&](const outbox::message& m) { return m.id == failing; },
                     outbox::errc::transient);
    outbox::relay relay(store, faulty, {.batch_size = 500},
                        outbox::exponential_backoff{.initial = 1ms, .max_delay = 1ms});
    BOOST_TEST(relay.run_once() == 200u);
    faulty.heal();
    drain(relay, store);
    BOOST_TEST(relay.stats().retried == 1u);
    return std::pair{relay.stats(), ids_of(broker.wire())};
  };
  std::vector<outbox::uuid> ids;
  {
    const auto [stats, wire] = run.operator()<true>(ids);
    BOOST_TEST(stats.reordered == 150u);
    BOOST_TEST(stats.released == 0u);
    auto expected = ids;
    expected.erase(expected.begin() + 49);
    expected.push_back(ids[49]);  // after its retry
    BOOST_TEST((wire == expected));
  }
  {
    const auto [stats, wire] = run.operator()<false>(ids);
    BOOST_TEST(stats.reordered == 0u);
    BOOST_TEST(stats.released == 150u);
    BOOST_TEST((wire == ids));  // the order holds
  }
}

// A transport that keeps its promise fails the rest of an aggregate's run after a failure
// (here: everything from the 50th on, the first time): the relay releases the rest, their
// attempts given back (they did not fail on their own), and they follow after the retry, in
// order; only the first failure is charged an attempt.
BOOST_AUTO_TEST_CASE(after_a_failure_the_rest_of_a_run_is_released_not_charged) {
  memory_database db;
  const auto ids = enqueue_hot(db);
  memory_session relay_sql(db);
  memory_store store(relay_sql);
  outbox::testing::memory_transport broker({.record = true});
  outbox::testing::faulty_transport<outbox::testing::memory_transport, true> faulty(broker);
  std::set<outbox::uuid> from_50th(ids.begin() + 49, ids.end());
  faulty.fail_when([&](const outbox::message& m) { return from_50th.contains(m.id); },
                   outbox::errc::transient);
  outbox::relay relay(store, faulty, {.batch_size = 500},
                      outbox::exponential_backoff{.initial = 1ms, .max_delay = 1ms});
  BOOST_TEST(relay.run_once() == 200u);
  BOOST_TEST(relay.stats().retried == 1u);
  BOOST_TEST(relay.stats().released == 150u);
  BOOST_TEST(relay.stats().reordered == 0u);
  faulty.heal();
  drain(relay, store);
  BOOST_TEST((ids_of(broker.wire()) == ids));  // the order holds
  // Attempts: the 50th was charged twice (the failure, the publish), the others once.
  for (const auto& row : db.outbox()) BOOST_TEST(row.attempts == (row.id == ids[49] ? 2 : 1));
}

BOOST_AUTO_TEST_SUITE_END()

// ---- a pipelined run: the next batch claimed, the last one settled, while one is in flight -----

namespace {

/// `n` events over `aggregates` aggregates ("a0", "a1", ...) in one transaction; their ids.
std::vector<outbox::uuid> enqueue_spread(memory_database& db, int n, int aggregates) {
  return enqueue(db, n, [&](int i) { return "a" + std::to_string(i % aggregates); });
}

/// Waits (bounded: 60 s, a safety net) until `pred()`; returns it.
template <class Pred>
bool eventually(Pred pred) {
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (!pred() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  return pred();
}

/// Runs `relay.run` on its own thread until `done()` (bounded: 60 s), then stops it.
template <class Relay, class Done>
void run_until(Relay& relay, Done done) {
  std::jthread runner([&](std::stop_token stop) { relay.run(stop); });
  (void)eventually(done);
  runner.request_stop();
  runner.join();
  BOOST_TEST(done());
}

/// The outbox's ids per aggregate id, in commit order (what the wire must show).
std::map<std::string, std::vector<outbox::uuid>> commit_order(const memory_database& db) {
  std::map<std::string, std::vector<outbox::uuid>> out;
  for (const auto& row : db.outbox()) out[row.aggregate_id].push_back(row.id);
  return out;
}

/// Each publish waits (up to `patience`) until rows are leased that are neither its own nor
/// on the wire already (the batch before, maybe not settled yet), i.e. the next batch was
/// claimed while this one awaits its confirms, and counts the calls that saw it.
struct overlap_watching_transport {
  outbox::testing::memory_transport* inner;
  memory_database* db;
  std::chrono::milliseconds patience;
  int calls = 0;
  int overlapped = 0;
  std::vector<outbox::publish_result> publish(std::span<const outbox::message> batch,
                                              std::chrono::steady_clock::time_point until) {
    ++calls;
    std::set<outbox::uuid> known;
    for (const auto& m : batch) known.insert(m.id);
    for (const auto& m : inner->wire()) known.insert(m.id);
    // 1: a row we do not know is claimed (ahead); 0: none yet; -1: none left to claim.
    const auto claimed_ahead = [&] {
      bool unknown = false;
      for (const auto& row : db->outbox()) {
        if (known.contains(row.id)) continue;
        unknown = true;
        if (row.state == outbox::testing::memory_row::state_type::pending && row.lease_token)
          return 1;
      }
      return unknown ? 0 : -1;
    };
    // Waits on the claim, up to `patience` (short of the publish deadline).
    const auto give_up =
        std::min(std::chrono::steady_clock::now() + patience, until - std::chrono::seconds(1));
    for (;;) {
      const int seen = claimed_ahead();
      if (seen != 0) {
        overlapped += seen > 0 ? 1 : 0;
        break;
      }
      if (std::chrono::steady_clock::now() >= give_up) break;
      std::this_thread::sleep_for(1ms);
    }
    return inner->publish(batch, until);
  }
};

/// A claiming store over a memory store that counts its claims and holds one batch at a time,
/// as a locking store does (its claim is a transaction until the settle): a claim while its
/// batch is open, or a settle or release of a batch it does not hold, is an error. It does not
/// declare claims_overlap.
struct counting_store {
  explicit counting_store(memory_store<>* s) : inner(s) {}
  memory_store<>* inner;
  int claims = 0;
  int misuses = 0;
  std::optional<std::int64_t> open;
  outbox::claimed_batch claim(const outbox::claim_request& r) {
    ++claims;
    if (open) ++misuses;
    auto b = inner->claim(r);
    if (!b.empty()) open = b.token;
    return b;
  }
  outbox::settle_result settle(const outbox::claimed_batch& b,
                               std::span<const outbox::settlement> f, outbox::time_point now) {
    if (open != b.token) ++misuses;
    open.reset();
    return inner->settle(b, f, now);
  }
  void release(const outbox::claimed_batch& b) {
    if (open != b.token) ++misuses;
    open.reset();
    inner->release(b);
  }
};
static_assert(outbox::concepts::overlapping_claims_store<memory_store<>>);
static_assert(!outbox::concepts::overlapping_claims_store<counting_store>);

/// A transport whose `throw_on`-th publish call throws `transient` (a broker connection lost).
struct throwing_transport {
  static constexpr bool keeps_publish_order = true;
  outbox::testing::memory_transport* inner;
  int throw_on;
  int calls = 0;
  std::vector<outbox::publish_result> publish(std::span<const outbox::message> batch,
                                              std::chrono::steady_clock::time_point until) {
    if (++calls == throw_on)
      throw outbox::error(outbox::errc::transient, "test", {}, "connection lost");
    return inner->publish(batch, until);
  }
};

/// The wire's ids per aggregate id, in wire order.
std::map<std::string, std::vector<outbox::uuid>> by_aggregate(
    const std::vector<outbox::message>& wire) {
  std::map<std::string, std::vector<outbox::uuid>> out;
  for (const auto& m : wire) out[m.aggregate_id].push_back(m.id);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(pipelined_runs)

BOOST_AUTO_TEST_CASE(the_next_batch_is_claimed_while_one_awaits_its_confirms) {
  for (const bool pipeline : {true, false}) {
    BOOST_TEST_CONTEXT("pipeline " << pipeline) {
      memory_database db;
      enqueue_spread(db, 400, 400);
      memory_session relay_sql(db);
      memory_store store(relay_sql);
      outbox::testing::memory_transport broker({.record = true});
      // Pipelined, the claim ahead comes (the wait ends on it); not, nothing comes in 30 ms.
      overlap_watching_transport t{&broker, &db, pipeline ? 30s : 30ms};
      outbox::relay relay(store, t, {.batch_size = 100, .pipeline = pipeline});
      BOOST_TEST(relay.pipelines() == pipeline);
      run_until(relay, [&] { return broker.published_count() == 400u; });
      BOOST_TEST(t.calls == 4);
      // Each batch but the last saw the next one claimed during its publish.
      BOOST_TEST(t.overlapped == (pipeline ? 3 : 0));
      const auto s = store.stats(std::chrono::system_clock::now());
      BOOST_TEST(s.pending == 0);
      BOOST_TEST(s.in_flight == 0);
      BOOST_TEST(relay.stats().published == 400u);
      BOOST_TEST(relay.stats().batches == 4u);
    }
  }
}

// A claim made while a batch is in flight must not take a later message of an aggregate whose
// earlier message is in that batch; and a message that fails is settled (waiting for its retry)
// before the next claim looks. One hot aggregate among many, batches of 30, one message in the
// middle failing twice: every aggregate's messages reach the wire in commit order.
BOOST_AUTO_TEST_CASE(order_holds_across_batches_in_flight_and_a_failure) {
  for (const bool keeps : {true, false}) {
    BOOST_TEST_CONTEXT("keeps_publish_order " << keeps) {
      memory_database db;
      const auto ids = enqueue_hot_among_many(db);
      memory_session relay_sql(db);
      memory_store store(relay_sql);
      outbox::testing::memory_transport broker({.record = true});
      const auto failing = ids[60];  // the hot aggregate's 21st
      int failures = 0;
      // It fails twice. An order-keeping transport also fails the later messages of its
      // aggregate in the same call (its promise); they can be in no other call, as no claim
      // takes them while it is unpublished (if one did, they would fail and be retried, and
      // `retried` would say so).
      bool passed = false;  // the failing message went through
      const auto fail = [&](const outbox::message& m) {
        if (m.id == failing) {
          passed = failures++ >= 2;
          return !passed;
        }
        return keeps && m.aggregate_id == "hot" && failing < m.id && !passed;
      };
      const auto check = [&](auto& faulty) {
        faulty.fail_when(fail, outbox::errc::transient);
        outbox::relay relay(store, faulty, {.batch_size = 30, .idle_poll_min = 1ms},
                            outbox::exponential_backoff{.initial = 1ms, .max_delay = 2ms});
        BOOST_TEST(relay.pipelines());
        run_until(relay, [&] { return broker.published_count() == 300u; });
        BOOST_TEST(relay.stats().retried == 2u);
        BOOST_TEST(relay.stats().reordered == 0u);
      };
      if (keeps) {
        // Keeping its promise: the rest of the run fails with the failing message.
        outbox::testing::faulty_transport<outbox::testing::memory_transport, true> faulty(broker);
        check(faulty);
      } else {
        outbox::testing::faulty_transport<outbox::testing::memory_transport, false> faulty(broker);
        check(faulty);
      }
      BOOST_TEST((by_aggregate(broker.wire()) == commit_order(db)));
      BOOST_TEST(store.stats(std::chrono::system_clock::now()).in_flight == 0);
    }
  }
}

// With two stores (two sessions), batches alternate between them: a store that cannot claim
// ahead on its own session (locking) claims on the other one. Order holds the same way.
BOOST_AUTO_TEST_CASE(two_stores_take_turns) {
  memory_database db;
  enqueue_spread(db, 500, 7);
  memory_session s1(db), s2(db);
  memory_store m1(s1), m2(s2);
  counting_store c1(&m1), c2(&m2);
  outbox::testing::memory_transport broker({.record = true});
  outbox::relay one(c1, broker, {.batch_size = 50});
  BOOST_TEST(!one.pipelines());  // one store that cannot claim ahead: a batch at a time
  outbox::relay relay(c1, c2, broker, {.batch_size = 50, .idle_poll_min = 1ms});
  BOOST_TEST(relay.pipelines());
  run_until(relay, [&] { return broker.published_count() == 500u; });
  BOOST_TEST(c1.claims >= 5);
  BOOST_TEST(c2.claims >= 5);
  BOOST_TEST(c1.misuses == 0);  // never a claim on a session whose batch is open
  BOOST_TEST(c2.misuses == 0);
  BOOST_TEST((by_aggregate(broker.wire()) == commit_order(db)));
  BOOST_CHECK_THROW(outbox::relay(c1, c1, broker), outbox::error);  // the same store twice
}

// What the worker does can fail (the claim ahead, the settle of the batch before), and so can
// the transport while a batch is claimed ahead: `run` backs off and carries on; a batch whose
// settle failed is left to its lease and taken over; a batch claimed ahead of a transport
// failure is released (its attempt given back). Nothing is lost and nothing stays held.
BOOST_AUTO_TEST_CASE(failures_on_either_side_lose_nothing_and_hold_nothing) {
  outbox::testing::manual_clock clock;
  memory_database db;
  enqueue_spread(db, 300, 300);
  memory_session relay_sql(db);
  memory_store store(relay_sql);
  outbox::testing::memory_transport broker({.record = true});
  throwing_transport t{&broker, 3};
  int errors = 0;
  outbox::relay relay(store, t,
                      {.batch_size = 50,
                       .lease = 30s,
                       .idle_poll_min = 1ms,
                       .idle_poll_max = 2ms,
                       .on_error = [&](const outbox::error&) { ++errors; }},
                      outbox::exponential_backoff{.initial = 1ms, .max_delay = 2ms}, clock);
  // Armed before the relay starts, keyed to counts (armed later, they raced the relay, which
  // could drain all 300 first): the first claim fails; after the settles of the first two
  // batches, a settle that keeps failing (3 tries, the release of the batch the transport
  // failed): its batch stays leased until the lease runs out.
  db.fail_next(1, outbox::errc::transient, memory_operation::claim);
  db.fail_after(2, 3, outbox::errc::transient, memory_operation::settle);
  std::jthread runner([&](std::stop_token stop) { relay.run(stop); });
  BOOST_TEST(eventually([&] { return db.failures_injected() == 4u; }));
  BOOST_TEST(eventually([&] {
    const auto s = store.stats(clock.now());
    return s.pending == 0 && s.in_flight == 50;  // all published but the batch left to its lease
  }));
  clock.advance(31s);  // the lease runs out: the batch is taken over and published again
  BOOST_TEST(eventually([&] {
    const auto s = store.stats(clock.now());
    return s.pending == 0 && s.in_flight == 0;
  }));
  runner.request_stop();
  runner.join();
  BOOST_TEST(errors >= 3);  // the claim, the transport, the settle
  const auto rows = db.outbox();
  BOOST_TEST(rows.size() == 300u);
  std::set<outbox::uuid> on_wire;
  for (const auto& m : broker.wire()) on_wire.insert(m.id);
  for (const auto& row : rows) {
    BOOST_TEST(row.published_at.has_value());
    BOOST_TEST(on_wire.contains(row.id));
    BOOST_TEST(row.attempts <= 2);  // a release gives its attempt back
  }
  BOOST_TEST(store.stats(clock.now()).in_flight == 0);
}

// Stopping: the batch in flight is settled and the batch claimed ahead released before `run`
// returns, so another relay can take the rest at once, not after a lease.
BOOST_AUTO_TEST_CASE(stopping_leaves_nothing_held) {
  memory_database db;
  enqueue_spread(db, 1000, 1000);
  memory_session relay_sql(db);
  memory_store store(relay_sql);
  outbox::testing::memory_transport broker({.confirm_latency = 2ms});
  outbox::relay relay(store, broker, {.batch_size = 10});
  run_until(relay, [&] { return broker.published_count() >= 200u; });
  const auto s = store.stats(std::chrono::system_clock::now());
  BOOST_TEST(s.in_flight == 0);
  BOOST_TEST(s.pending == static_cast<std::int64_t>(1000 - relay.stats().published));
  for (const auto& row : db.outbox()) BOOST_TEST(row.attempts == (row.published_at ? 1 : 0));
}

// What a metrics exporter sees: one report per settled batch (from the relay's thread or the
// worker's), whose fates match its settle and add up to the relay's counters; and a run of
// errors counted in `consecutive_errors` until a step goes through again.
BOOST_AUTO_TEST_CASE(batch_reports_add_up_and_error_runs_are_counted) {
  memory_database db;
  enqueue_spread(db, 600, 600);
  memory_session relay_sql(db);
  memory_store store(relay_sql);
  outbox::testing::memory_transport broker({.confirm_latency = 1ms});
  std::mutex mutex;
  std::size_t reports = 0, published = 0, messages = 0, mismatched = 0, untimed = 0;
  std::vector<std::uint64_t> runs;  // consecutive_errors as each error is reported
  outbox::relay<memory_store<>, outbox::testing::memory_transport>* self = nullptr;
  outbox::relay relay(
      store, broker,
      {.batch_size = 50,
       .idle_poll_min = 1ms,
       .idle_poll_max = 2ms,
       .on_error = [&](const outbox::error&) { runs.push_back(self->stats().consecutive_errors); },
       .on_batch =
           [&](const outbox::batch_report& r) {
             std::lock_guard lock(mutex);
             ++reports;
             published += r.settled.published;
             messages += r.messages.size();
             const auto confirmed = std::count_if(r.fates.begin(), r.fates.end(), [](auto& f) {
               return f.what == outbox::settlement::kind::published;
             });
             if (r.fates.size() != r.messages.size() ||
                 static_cast<std::size_t>(confirmed) != r.settled.published)
               ++mismatched;
             if (r.publish <= 0ns || r.claim <= 0ns || r.settle <= 0ns) ++untimed;
           }},
      outbox::exponential_backoff{.initial = 1ms, .max_delay = 2ms});
  self = &relay;
  BOOST_TEST(relay.pipelines());
  db.fail_next(3, outbox::errc::transient, memory_operation::claim);
  run_until(relay, [&] { return relay.stats().published == 600u; });
  const auto st = relay.stats();
  std::lock_guard lock(mutex);
  BOOST_TEST(reports == st.batches);
  BOOST_TEST(published == 600u);
  BOOST_TEST(messages == 600u);
  BOOST_TEST(mismatched == 0u);
  BOOST_TEST(untimed == 0u);
  BOOST_TEST((runs == std::vector<std::uint64_t>{1, 2, 3}));
  BOOST_TEST(st.consecutive_errors == 0u);  // the steps after them went through
}

// The pauses of `run` while the database is away are the retry policy's delays, capped by
// error_backoff_max: with a policy whose delays are a minute, a relay still takes up its work
// at once after three failed claims. Its steps count what went through.
BOOST_AUTO_TEST_CASE(run_backs_off_at_most_error_backoff_max_and_counts_its_steps) {
  memory_database db;
  enqueue_spread(db, 100, 100);
  memory_session relay_sql(db);
  memory_store store(relay_sql);
  outbox::testing::memory_transport broker;
  outbox::relay relay(
      store, broker,
      {.batch_size = 50, .idle_poll_min = 1ms, .idle_poll_max = 2ms, .error_backoff_max = 2ms},
      outbox::exponential_backoff{.initial = 60s, .max_delay = 60s, .jitter = 0});
  db.fail_next(3, outbox::errc::transient, memory_operation::claim);
  run_until(relay, [&] { return relay.stats().published == 100u; });  // not after 3 minutes
  const auto st = relay.stats();
  BOOST_TEST(st.errors == 3u);
  BOOST_TEST(st.steps >= 2u);  // two batches of 50, at least
  BOOST_CHECK_THROW(outbox::relay(store, broker, {.error_backoff_max = 0ms}), outbox::error);
}

BOOST_AUTO_TEST_SUITE_END()

// ---- predecessor stamps: a run in one call on a transport that does not keep order -------------

namespace {

using stamped_consumer = outbox::consumer<memory_store<>, outbox::testing::memory_transport>;

/// A message of aggregate ("order", `aggregate`), stamped with `predecessor` when given.
outbox::message stamped(const std::string& aggregate, std::optional<outbox::uuid> predecessor) {
  outbox::message m;
  m.id = outbox::make_uuid_v7();
  m.aggregate_type = "order";
  m.aggregate_id = aggregate;
  m.event_type = "placed";
  m.payload = "{}";
  if (predecessor)
    m.headers.emplace(std::string(outbox::predecessor_header), predecessor->to_string());
  return m;
}

void put_on_wire(outbox::testing::memory_transport& broker, const outbox::message& m) {
  (void)broker.publish(std::span(&m, 1), std::chrono::steady_clock::now() + 1s);
}

/// A consumer recording what it applied, in order.
struct applying_consumer {
  memory_session sql;
  memory_store<> store;
  std::vector<outbox::uuid> applied;
  std::map<std::string, std::vector<outbox::uuid>> per_aggregate;
  stamped_consumer consumer;
  applying_consumer(memory_database& db, outbox::testing::memory_transport& broker,
                    outbox::consumer_options options,
                    std::function<void(const outbox::message&)> fail = {})
      : sql(db),
        store(sql),
        consumer(
            store, broker,
            [this, fail](memory_session&, const outbox::message& m) {
              if (fail) fail(m);
              applied.push_back(m.id);
              per_aggregate[m.aggregate_id].push_back(m.id);
            },
            std::move(options),
            outbox::exponential_backoff{.initial = 1ms, .max_delay = 1ms, .max_attempts = 2}) {}
};

}  // namespace

BOOST_AUTO_TEST_SUITE(predecessor_stamps)

// The relay sends a batch in one call on a transport that does not keep publish order, each
// message behind an earlier one of its aggregate stamped with that one's id. A message in the
// middle of the hot aggregate's run fails twice while the rest of its run is taken (a broker
// that nacks one message and accepts the next): the wire is out of order, and the consumer
// puts every aggregate back in commit order, holding the early ones until their predecessor.
BOOST_AUTO_TEST_CASE(a_failure_mid_run_reorders_the_wire_and_the_consumer_restores_the_order) {
  memory_database db;
  const auto ids = enqueue_hot_among_many(db);
  memory_session relay_sql(db);
  memory_store store(relay_sql);
  outbox::testing::memory_transport broker({.record = true});
  outbox::testing::faulty_transport<outbox::testing::memory_transport, false> faulty(broker);
  const auto failing = ids[60];  // the hot aggregate's 21st
  int failures = 0;
  faulty.fail_when([&](const outbox::message& m) { return m.id == failing && failures++ < 2; },
                   outbox::errc::transient);
  counting_transport<false, decltype(faulty)> counted{&faulty};
  outbox::relay relay(store, counted,
                      {.batch_size = 30, .idle_poll_min = 1ms, .stamp_predecessors = true},
                      outbox::exponential_backoff{.initial = 1ms, .max_delay = 2ms});
  run_until(relay, [&] { return broker.published_count() == 300u; });
  BOOST_TEST(relay.stats().retried == 2u);
  BOOST_TEST(relay.stats().reordered > 0u);  // the rest of the run went ahead of the failure
  // One call per batch, not one wave per message of the hot aggregate's run.
  BOOST_TEST(counted.calls == static_cast<int>(relay.stats().batches));
  const auto wire = broker.wire();
  BOOST_TEST((by_aggregate(wire) != commit_order(db)));
  // Stamps: each message behind an earlier one of its aggregate in its call names that one
  // (the one just before it, unless that went out in an earlier call, as around the failure).
  const auto committed = commit_order(db);
  std::size_t stamps = 0, adjacent = 0;
  for (const auto& m : wire) {
    const auto h = m.headers.find(outbox::predecessor_header);
    if (h == m.headers.end()) continue;
    ++stamps;
    const auto p = outbox::uuid::parse(h->second);
    BOOST_TEST_REQUIRE(p.has_value());
    const auto& order = committed.at(m.aggregate_id);
    const auto at = std::find(order.begin(), order.end(), m.id);
    const auto before = std::find(order.begin(), order.end(), *p);
    BOOST_TEST_REQUIRE((at != order.end() && before != order.end()));
    BOOST_TEST((before < at));
    adjacent += std::next(before) == at ? 1 : 0;
  }
  BOOST_TEST(stamps > 50u);
  BOOST_TEST(adjacent + 2 >= stamps);

  applying_consumer c(db, broker, {.name = "billing", .poll_timeout = 10ms});
  for (int i = 0; i < 2000 && c.applied.size() < 300; ++i) (void)c.consumer.poll_once();
  BOOST_TEST(c.applied.size() == 300u);
  BOOST_TEST((c.per_aggregate == commit_order(db)));
  BOOST_TEST(c.consumer.stats().deferred > 0u);
  BOOST_TEST(c.consumer.stats().out_of_order == 0u);
  BOOST_TEST(c.consumer.held() == 0u);
  BOOST_TEST(broker.unacked() == 0u);
}

// A delivery whose predecessor never comes (dead-lettered by the relay, routed elsewhere) is
// held for `predecessor_wait`, then applied; meanwhile other deliveries go on.
BOOST_AUTO_TEST_CASE(a_held_delivery_is_applied_when_its_wait_runs_out) {
  memory_database db;
  outbox::testing::memory_transport broker;
  // A wait far longer than two polls, however loaded the machine: `other` comes before it ends.
  applying_consumer c(db, broker,
                      {.name = "billing", .poll_timeout = 10ms, .predecessor_wait = 2s});
  const auto lost = outbox::make_uuid_v7();
  const auto late = stamped("1", lost);
  const auto other = stamped("2", std::nullopt);
  put_on_wire(broker, late);
  put_on_wire(broker, other);
  BOOST_TEST((c.consumer.poll_once() == stamped_consumer::outcome::deferred));
  BOOST_TEST(c.consumer.held() == 1u);
  BOOST_TEST(db.inbox().empty());  // not recorded while held
  BOOST_TEST((c.consumer.poll_once() == stamped_consumer::outcome::applied));
  BOOST_TEST(eventually([&] {
    (void)c.consumer.poll_once();
    return c.applied.size() >= 2;
  }));
  BOOST_TEST((c.applied == std::vector<outbox::uuid>{other.id, late.id}));
  BOOST_TEST(c.consumer.stats().out_of_order == 1u);
  BOOST_TEST(broker.unacked() == 0u);
  // A stamp whose predecessor is applied does not hold; 0 turns stamps off.
  const auto next = stamped("1", late.id);
  put_on_wire(broker, next);
  BOOST_TEST((c.consumer.poll_once() == stamped_consumer::outcome::applied));
  applying_consumer off(db, broker,
                        {.name = "audit", .poll_timeout = 10ms, .predecessor_wait = 0ms});
  put_on_wire(broker, stamped("3", lost));
  BOOST_TEST((off.consumer.poll_once() == stamped_consumer::outcome::applied));
  BOOST_TEST(off.consumer.stats().out_of_order == 0u);
}

// Held deliveries are released in a chain as soon as the predecessor was applied, or
// dead-lettered (its effect will never come: it does not hold its aggregate back); at most
// `max_deferred` are held, the oldest beyond that applied at once.
BOOST_AUTO_TEST_CASE(held_deliveries_follow_their_predecessor_in_a_chain) {
  memory_database db;
  outbox::testing::memory_transport broker;
  outbox::uuid poison{};
  applying_consumer c(db, broker, {.name = "billing", .poll_timeout = 10ms},
                      [&](const outbox::message& m) {
                        if (m.id == poison) throw std::runtime_error("handler failed");
                      });
  std::vector<outbox::message> run{stamped("1", std::nullopt)};
  for (int i = 0; i < 4; ++i) run.push_back(stamped("1", run.back().id));
  poison = run[0].id;
  for (std::size_t i = 1; i < run.size(); ++i) put_on_wire(broker, run[i]);
  put_on_wire(broker, run[0]);
  for (int i = 0; i < 4; ++i)
    BOOST_TEST((c.consumer.poll_once() == stamped_consumer::outcome::deferred));
  BOOST_TEST(c.consumer.held() == 4u);
  BOOST_TEST((c.consumer.poll_once() == stamped_consumer::outcome::retrying));  // attempt 1
  BOOST_TEST(c.consumer.held() == 4u);
  BOOST_TEST((c.consumer.poll_once() == stamped_consumer::outcome::dead_lettered));
  BOOST_TEST(c.consumer.held() == 0u);
  BOOST_TEST((c.applied == std::vector<outbox::uuid>{run[1].id, run[2].id, run[3].id, run[4].id}));
  BOOST_TEST(c.consumer.stats().out_of_order == 0u);
  BOOST_TEST(broker.unacked() == 0u);

  applying_consumer small(db, broker,
                          {.name = "shipping", .poll_timeout = 10ms, .max_deferred = 2});
  const auto a = stamped("2", outbox::make_uuid_v7());
  const auto b = stamped("2", a.id);
  const auto d = stamped("2", b.id);
  for (const auto* m : {&a, &b, &d}) put_on_wire(broker, *m);
  BOOST_TEST((small.consumer.poll_once() == stamped_consumer::outcome::deferred));
  BOOST_TEST((small.consumer.poll_once() == stamped_consumer::outcome::deferred));
  // A third would leave no room: the oldest goes (out of order), and the others follow it.
  BOOST_TEST((small.consumer.poll_once() == stamped_consumer::outcome::deferred));
  BOOST_TEST((small.applied == std::vector<outbox::uuid>{a.id, b.id, d.id}));
  BOOST_TEST(small.consumer.stats().out_of_order == 1u);
  BOOST_TEST(small.consumer.held() == 0u);
}

// Two held deliveries may name one predecessor: the relay stamps a retried message's successor in
// the next batch with it, as it stamped the successors sent beside it in the first batch. They
// go in the order of their ids (UUIDv7: enqueue order), each followed by what it makes ready,
// whatever order they arrived in.
BOOST_AUTO_TEST_CASE(deliveries_naming_one_predecessor_go_in_the_order_of_their_ids) {
  memory_database db;
  outbox::testing::memory_transport broker;
  applying_consumer c(db, broker, {.name = "billing", .poll_timeout = 10ms});
  const auto x1 = stamped("x", std::nullopt);
  const auto x2 = stamped("x", x1.id);
  const auto x3 = stamped("x", x2.id);
  const auto x4 = stamped("x", x1.id);  // the next batch's, behind the retried x1
  for (const auto* m : {&x2, &x3, &x4, &x1}) put_on_wire(broker, *m);
  for (int i = 0; i < 4; ++i) (void)c.consumer.poll_once();
  BOOST_TEST((c.applied == std::vector<outbox::uuid>{x1.id, x2.id, x3.id, x4.id}));
  const auto y1 = stamped("y", std::nullopt);
  const auto y2 = stamped("y", y1.id);
  const auto y3 = stamped("y", y1.id);
  for (const auto* m : {&y3, &y2, &y1}) put_on_wire(broker, *m);
  for (int i = 0; i < 3; ++i) (void)c.consumer.poll_once();
  BOOST_TEST((std::vector<outbox::uuid>(c.applied.begin() + 4, c.applied.end()) ==
              std::vector<outbox::uuid>{y1.id, y2.id, y3.id}));
  BOOST_TEST(c.consumer.stats().out_of_order == 0u);
  BOOST_TEST(broker.unacked() == 0u);
}

// A released delivery whose handler fails is retried, and the ready ones of its aggregate wait
// for it; other aggregates go on.
BOOST_AUTO_TEST_CASE(a_released_delivery_that_fails_holds_back_its_aggregate) {
  memory_database db;
  outbox::testing::memory_transport broker;
  const auto x1 = stamped("x", std::nullopt);
  const auto x2 = stamped("x", x1.id);
  const auto x3 = stamped("x", x1.id);
  int x2_failures = 0;
  applying_consumer c(db, broker, {.name = "billing", .poll_timeout = 10ms},
                      [&](const outbox::message& m) {
                        if (m.id == x2.id && x2_failures++ == 0)
                          throw std::runtime_error("handler failed once");
                      });
  for (const auto* m : {&x2, &x3, &x1}) put_on_wire(broker, *m);
  BOOST_TEST((c.consumer.poll_once() == stamped_consumer::outcome::deferred));
  BOOST_TEST((c.consumer.poll_once() == stamped_consumer::outcome::deferred));
  BOOST_TEST((c.consumer.poll_once() == stamped_consumer::outcome::applied));  // x1; x2 fails
  BOOST_TEST(c.consumer.held() == 1u);                                         // x3 waits for x2
  BOOST_TEST((c.applied == std::vector<outbox::uuid>{x1.id}));
  BOOST_TEST((c.consumer.poll_once() == stamped_consumer::outcome::applied));  // x2 again
  BOOST_TEST((c.applied == std::vector<outbox::uuid>{x1.id, x2.id, x3.id}));
  BOOST_TEST(c.consumer.held() == 0u);
  BOOST_TEST(c.consumer.stats().out_of_order == 0u);
}

/// A receiver that requeues at the back of the queue (a broker with the next deliveries already
/// prefetched to the consumer: they come before the requeued one).
struct requeue_at_back {
  outbox::testing::memory_transport* inner;
  std::optional<outbox::delivery> receive(std::chrono::milliseconds timeout) {
    return inner->receive(timeout);
  }
  void ack(const outbox::delivery& d) { inner->ack(d); }
  void nack(const outbox::delivery& d, bool requeue) {
    inner->ack(d);
    if (requeue) put_on_wire(*inner, d.msg);
  }
};

// A delivery that arrives while an earlier event of its aggregate is held, or was released and
// is being retried, goes behind it, whatever its stamp: here x4 (stamped x1, the retried message
// of the next batch) arrives after x1 was applied, while x2, released, failed and went back
// behind it.
BOOST_AUTO_TEST_CASE(a_delivery_goes_behind_an_earlier_one_of_its_aggregate_held_or_retried) {
  memory_database db;
  outbox::testing::memory_transport broker;
  requeue_at_back rcv{&broker};
  const auto x1 = stamped("x", std::nullopt);
  const auto x2 = stamped("x", x1.id);
  const auto x3 = stamped("x", x2.id);
  const auto x4 = stamped("x", x1.id);
  memory_session sql(db);
  memory_store store(sql);
  std::vector<outbox::uuid> applied;
  int x2_failures = 0;
  outbox::consumer<memory_store<>, requeue_at_back> c(
      store, rcv,
      [&](memory_session&, const outbox::message& m) {
        if (m.id == x2.id && x2_failures++ == 0) throw std::runtime_error("handler failed once");
        applied.push_back(m.id);
      },
      {.name = "billing", .poll_timeout = 10ms},
      outbox::exponential_backoff{.initial = 1ms, .max_delay = 1ms, .max_attempts = 3});
  for (const auto* m : {&x2, &x3, &x1, &x4}) put_on_wire(broker, *m);
  for (int i = 0; i < 20 && applied.size() < 4; ++i) (void)c.poll_once();
  BOOST_TEST((applied == std::vector<outbox::uuid>{x1.id, x2.id, x3.id, x4.id}));
  BOOST_TEST(c.stats().out_of_order == 0u);
  BOOST_TEST(c.held() == 0u);
  BOOST_TEST(broker.unacked() == 0u);
}

// A stamped delivery that fails on its first try, never held, goes back for a retry; the next
// event of its aggregate, unstamped (the first of a later batch) and already prefetched, waits
// for it.
BOOST_AUTO_TEST_CASE(a_stamped_delivery_that_fails_holds_back_the_next_of_its_aggregate) {
  memory_database db;
  outbox::testing::memory_transport broker;
  requeue_at_back rcv{&broker};
  const auto x1 = stamped("x", std::nullopt);
  const auto x2 = stamped("x", x1.id);
  const auto x3 = stamped("x", std::nullopt);
  const auto y1 = stamped("y", std::nullopt);
  memory_session sql(db);
  memory_store store(sql);
  std::vector<outbox::uuid> applied;
  int x2_failures = 0;
  outbox::consumer<memory_store<>, requeue_at_back> c(
      store, rcv,
      [&](memory_session&, const outbox::message& m) {
        if (m.id == x2.id && x2_failures++ == 0) throw std::runtime_error("handler failed once");
        applied.push_back(m.id);
      },
      {.name = "billing", .poll_timeout = 10ms},
      outbox::exponential_backoff{.initial = 1ms, .max_delay = 1ms, .max_attempts = 3});
  for (const auto* m : {&x1, &x2, &x3, &y1}) put_on_wire(broker, *m);
  for (int i = 0; i < 20 && applied.size() < 4; ++i) (void)c.poll_once();
  BOOST_TEST((applied == std::vector<outbox::uuid>{x1.id, y1.id, x2.id, x3.id}));
  BOOST_TEST(c.stats().out_of_order == 0u);
  BOOST_TEST(c.held() == 0u);
}

// Unstamped (a relay without stamp_predecessors, the default): a delivery that fails goes back
// for a retry, and the next event of its aggregate, already prefetched, waits for it; other
// aggregates go on. With hold_behind_retry = false (unordered consumers) it goes first.
BOOST_AUTO_TEST_CASE(an_unstamped_delivery_that_fails_holds_back_the_next_of_its_aggregate) {
  for (const bool hold : {true, false}) {
    BOOST_TEST_CONTEXT("hold_behind_retry " << hold) {
      memory_database db;
      outbox::testing::memory_transport broker;
      requeue_at_back rcv{&broker};
      const auto x1 = stamped("x", std::nullopt);
      const auto x2 = stamped("x", std::nullopt);
      const auto y1 = stamped("y", std::nullopt);
      memory_session sql(db);
      memory_store store(sql);
      std::vector<outbox::uuid> applied;
      int x1_failures = 0;
      outbox::consumer<memory_store<>, requeue_at_back> c(
          store, rcv,
          [&](memory_session&, const outbox::message& m) {
            if (m.id == x1.id && x1_failures++ == 0)
              throw std::runtime_error("handler failed once");
            applied.push_back(m.id);
          },
          {.name = "billing", .poll_timeout = 10ms, .hold_behind_retry = hold},
          outbox::exponential_backoff{.initial = 1ms, .max_delay = 1ms, .max_attempts = 3});
      for (const auto* m : {&x1, &x2, &y1}) put_on_wire(broker, *m);
      for (int i = 0; i < 20 && applied.size() < 3; ++i) (void)c.poll_once();
      if (hold)
        BOOST_TEST((applied == std::vector<outbox::uuid>{y1.id, x1.id, x2.id}));
      else
        BOOST_TEST((applied == std::vector<outbox::uuid>{x2.id, y1.id, x1.id}));
      BOOST_TEST(c.stats().deferred == (hold ? 1u : 0u));
      BOOST_TEST(c.stats().out_of_order == 0u);
      BOOST_TEST(c.held() == 0u);
      BOOST_TEST(broker.unacked() == 0u);
    }
  }
}

// A retry that outlasts predecessor_wait (the handler reports a service it calls down, for
// longer than the wait) keeps its aggregate's later events held: each failure here shows the
// delivery did not go to another consumer. Before, they went first once the wait ran out.
BOOST_AUTO_TEST_CASE(a_retry_outlasting_the_predecessor_wait_still_holds_its_aggregate_back) {
  memory_database db;
  outbox::testing::memory_transport broker;
  requeue_at_back rcv{&broker};
  const auto x1 = stamped("x", std::nullopt);
  const auto x2 = stamped("x", std::nullopt);
  const auto x3 = stamped("x", std::nullopt);
  const auto y1 = stamped("y", std::nullopt);
  memory_session sql(db);
  memory_store store(sql);
  std::vector<outbox::uuid> applied;
  constexpr auto wait = 1s;  // far above the retry delays (5 ms)
  std::optional<std::chrono::steady_clock::time_point> first_failure;
  int x1_failures = 0;
  outbox::consumer<memory_store<>, requeue_at_back> c(
      store, rcv,
      [&](memory_session&, const outbox::message& m) {
        if (m.id == x1.id) {
          const auto now = std::chrono::steady_clock::now();
          if (!first_failure) first_failure = now;
          if (now - *first_failure < 3 * wait) {
            ++x1_failures;
            throw outbox::error(outbox::errc::transient, "test", {}, "a service is down");
          }
        }
        applied.push_back(m.id);
      },
      {.name = "billing", .poll_timeout = 10ms, .predecessor_wait = wait},
      outbox::exponential_backoff{.initial = 1ms, .max_delay = 5ms, .max_attempts = 3});
  for (const auto* m : {&x1, &x2, &x3, &y1}) put_on_wire(broker, *m);
  BOOST_TEST(eventually([&] {
    (void)c.poll_once();
    return applied.size() >= 4;
  }));
  BOOST_TEST((applied == std::vector<outbox::uuid>{y1.id, x1.id, x2.id, x3.id}));
  BOOST_TEST(x1_failures > 1);
  BOOST_TEST(c.stats().out_of_order == 0u);
  BOOST_TEST(c.held() == 0u);
  BOOST_TEST(broker.unacked() == 0u);
}

// When the oldest held delivery's wait runs out and its own predecessor is held too, the
// first of the chain goes first.
BOOST_AUTO_TEST_CASE(when_a_wait_runs_out_the_first_of_the_chain_goes_first) {
  memory_database db;
  outbox::testing::memory_transport broker;
  // Both are held before the first wait ends (2 s, far longer than two polls).
  applying_consumer c(db, broker,
                      {.name = "billing", .poll_timeout = 10ms, .predecessor_wait = 2s});
  const auto a1 = stamped("a", std::nullopt);  // never delivered
  const auto a2 = stamped("a", a1.id);
  const auto a3 = stamped("a", a2.id);
  put_on_wire(broker, a3);
  put_on_wire(broker, a2);
  BOOST_TEST(eventually([&] {
    (void)c.consumer.poll_once();
    return c.applied.size() >= 2;
  }));
  BOOST_TEST((c.applied == std::vector<outbox::uuid>{a2.id, a3.id}));
  BOOST_TEST(c.consumer.stats().out_of_order == 1u);
}

// A copy of a held delivery (redelivered after a reconnect, or sent again) takes the held one's
// place: the older is acknowledged, the copy applied once its predecessor came.
BOOST_AUTO_TEST_CASE(a_copy_of_a_held_delivery_takes_its_place) {
  memory_database db;
  outbox::testing::memory_transport broker;
  applying_consumer c(db, broker, {.name = "billing", .poll_timeout = 10ms});
  const auto first = stamped("1", std::nullopt);
  const auto second = stamped("1", first.id);
  put_on_wire(broker, second);
  put_on_wire(broker, second);
  BOOST_TEST((c.consumer.poll_once() == stamped_consumer::outcome::deferred));
  BOOST_TEST((c.consumer.poll_once() == stamped_consumer::outcome::deferred));
  BOOST_TEST(c.consumer.held() == 1u);
  BOOST_TEST(broker.unacked() == 1u);  // the older copy was acknowledged
  BOOST_TEST(c.consumer.stats().deferred == 1u);
  put_on_wire(broker, first);
  BOOST_TEST((c.consumer.poll_once() == stamped_consumer::outcome::applied));
  BOOST_TEST((c.applied == std::vector<outbox::uuid>{first.id, second.id}));
  BOOST_TEST(broker.unacked() == 0u);
}

// `run` gives what it holds back to the receiver when it stops.
BOOST_AUTO_TEST_CASE(stopping_gives_held_deliveries_back) {
  memory_database db;
  outbox::testing::memory_transport broker;
  applying_consumer c(db, broker, {.name = "billing", .poll_timeout = 10ms});
  put_on_wire(broker, stamped("1", outbox::make_uuid_v7()));
  {
    std::jthread runner([&](std::stop_token stop) { c.consumer.run(stop); });
    BOOST_TEST(eventually([&] { return c.consumer.stats().deferred == 1u; }));
  }
  BOOST_TEST(c.consumer.held() == 0u);
  BOOST_TEST(broker.unacked() == 0u);
  BOOST_TEST(broker.queued() == 1u);
  BOOST_TEST(c.applied.empty());
}

BOOST_AUTO_TEST_SUITE_END()
