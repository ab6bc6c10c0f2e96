// The in-memory store's own behaviour, beyond the conformance suite: its sessions (transactions,
// business tables, on-commit callbacks, aborted transactions, conflicting commits), exact bytes,
// the store clock, waking, and fault injection as a user unit-testing a service uses it with the
// writer, the relay and the consumer. The relay's runs on it (aggregate runs, pipelining,
// predecessor stamps) are in memory_store/*_test.cpp, the same executable.
#define BOOST_TEST_MODULE memory store
#include <boost/test/unit_test.hpp>

#include "memory_store/common.hpp"

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
