#pragma once
// Store conformance, second part: what the store kit (issue 10) made the same on every store.
// Included after store_conformance.hpp by each SQL store's test file. Fixture interface beyond
// the first part: the concept conformance::kit_store_fixture (fixtures.hpp).

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <outbox/concepts/store.hpp>
#include <outbox/relay.hpp>
#include <outbox/testing/manual_clock.hpp>
#include <outbox/testing/memory_transport.hpp>
#include <outbox/writer.hpp>

#include "fixtures.hpp"

BOOST_AUTO_TEST_SUITE(store_kit_conformance)

namespace kit {
/// Expects `f` to throw an outbox::error of class `kind`.
template <class F>
void expect_error(outbox::errc kind, F&& f, const char* what) {
  try {
    f();
    BOOST_ERROR(what << ": no error");
  } catch (const outbox::error& e) {
    BOOST_TEST((e.kind() == kind), what << ": " << e.what());
  }
}
/// Expects a writer's enqueue on `sql` (in the application's transaction) to be refused as
/// `misconfigured`.
template <class Fixture>
void expect_enqueue_misconfigured(typename Fixture::session_type& sql) {
  outbox::writer<typename Fixture::store_type> w;
  expect_error(
      outbox::errc::misconfigured,
      [&] {
        auto tx = Fixture::begin(sql);
        (void)w.enqueue(sql, conformance::make_event("a"));
      },
      "enqueue");
}
}  // namespace kit

BOOST_AUTO_TEST_CASE_TEMPLATE(payload_bytes_and_content_type_arrive_exactly, Fixture,
                              store_fixtures) {
  static_assert(conformance::kit_store_fixture<Fixture>);
  Fixture fx;
  // JSON the way an application wrote it (spaces, key order, escapes): not normalized.
  const std::string json = "{ \"zeta\" : 1,\n  \"alpha\":[ 2.50, \"caf\\u00e9\" ] }";
  // Bytes no JSON column could hold: NUL, 0xFF, invalid UTF-8.
  const std::string avro("\0\x01\xff\xfe{not json\xc3\x28\0", 16);
  std::vector<outbox::event> events{conformance::make_event("a", "json", json),
                                    conformance::make_event("b", "avro", avro),
                                    conformance::make_event("c", "empty", "")};
  events[0].content_type = "application/cloudevents+json; charset=utf-8";
  events[1].content_type = "application/avro";
  events[2].content_type = "application/octet-stream";
  conformance::commit_events(fx, events);
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::manual_clock clock;
  auto b = st->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(b.size() == 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    BOOST_TEST(b.messages[i].payload == events[i].payload, "event " << i);
    BOOST_TEST(b.messages[i].payload.size() == events[i].payload.size());
    BOOST_TEST(b.messages[i].content_type == events[i].content_type);
  }
  // A dead letter keeps them too.
  auto fates = conformance::all(3, outbox::settlement::kind::dead);
  BOOST_TEST(st->settle(b, fates, clock.now()).dead == 3u);
  const auto dead = st->dead_letters(10);
  BOOST_TEST_REQUIRE(dead.size() == 3u);
  BOOST_TEST(dead[1].msg.payload == avro);
  BOOST_TEST(dead[1].msg.content_type == "application/avro");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(the_relay_clock_stamps_published_and_dead_rows, Fixture,
                              store_fixtures) {
  Fixture fx;
  conformance::commit_events(fx, {conformance::make_event("a"), conformance::make_event("b")});
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::manual_clock clock;
  clock.advance(std::chrono::hours(24 * 365 * 3));  // far from the system clock's now
  const auto settled_at = std::chrono::time_point_cast<std::chrono::milliseconds>(clock.now());
  auto b = st->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(b.size() == 2u);
  std::vector<outbox::settlement> fates(2);
  fates[0].what = outbox::settlement::kind::published;
  fates[1].what = outbox::settlement::kind::dead;
  fates[1].error = "refused";
  const auto r = st->settle(b, fates, settled_at);
  BOOST_TEST(r.published == 1u);
  BOOST_TEST(r.dead == 1u);
  const auto dead = st->dead_letters(10);
  BOOST_TEST_REQUIRE(dead.size() == 1u);
  BOOST_TEST((dead[0].dead_at == settled_at));
  // published_at is the relay clock's time: a purge just before it keeps the row (with the
  // system clock's stamp, three years earlier, it would go), one just after removes it.
  BOOST_TEST(st->purge_published(settled_at, 10) == 0u);
  BOOST_TEST(st->purge_published(settled_at + std::chrono::milliseconds(1), 10) == 1u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(an_unmigrated_database_is_misconfigured_on_every_store, Fixture,
                              store_fixtures) {
  Fixture fx;
  auto bare = fx.open_unmigrated_session();
  auto st = fx.make_store(*bare);
  outbox::testing::manual_clock clock;
  kit::expect_error(
      outbox::errc::misconfigured, [&] { (void)st->claim(conformance::req(clock)); }, "claim");
  kit::expect_error(
      outbox::errc::misconfigured, [&] { (void)st->stats(clock.now()); }, "stats");
  kit::expect_error(
      outbox::errc::misconfigured, [&] { (void)st->stats_by_aggregate_type(clock.now()); },
      "stats_by_aggregate_type");
  kit::expect_error(
      outbox::errc::misconfigured,
      [&] {
        auto tx = st->begin();
        (void)st->record_delivery("billing", outbox::make_uuid_v7(), clock.now());
      },
      "record_delivery");
  kit::expect_enqueue_misconfigured<Fixture>(*bare);
  // Migrating it makes the same store usable.
  BOOST_TEST(Fixture::store_type::migrate(*bare) == Fixture::store_type::schema_version);
  BOOST_TEST(st->claim(conformance::req(clock)).empty());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(migration_runner_is_idempotent_and_refuses_a_newer_database, Fixture,
                              store_fixtures) {
  Fixture fx;
  using store_type = typename Fixture::store_type;
  auto bare = fx.open_unmigrated_session();
  BOOST_TEST(store_type::migrate(*bare, 1) == 1);
  BOOST_TEST(store_type::migrate(*bare, 1) == 1);
  BOOST_TEST(store_type::migrate(*bare) == store_type::schema_version);
  BOOST_TEST(store_type::migrate(*bare) == store_type::schema_version);
  kit::expect_error(
      outbox::errc::misconfigured,
      [&] { store_type::migrate(*bare, store_type::schema_version + 1); },
      "a version the library does not have");
  // A database a newer library migrated: refused, nothing applied.
  *bare << "INSERT INTO outbox_schema_migrations (version, name, applied_at) VALUES (" +
               std::to_string(store_type::schema_version + 1) + ", 'from_the_future', " +
               Fixture::now_literal + ")";
  kit::expect_error(
      outbox::errc::misconfigured, [&] { store_type::migrate(*bare); }, "a newer database");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(rows_of_the_previous_schema_are_readable_after_the_migration, Fixture,
                              store_fixtures) {
  Fixture fx;
  using store_type = typename Fixture::store_type;
  auto bare = fx.open_unmigrated_session();
  // The schema as the previous release left it, with a row in it (written as another program
  // or the previous release would: no content type column yet).
  store_type::migrate(*bare, Fixture::previous_schema_version);
  const auto id = outbox::make_uuid_v7();
  Fixture::insert_raw_previous_schema(*bare, id.to_string(), "old", "{\"k\":\"v\"}");
  BOOST_TEST(store_type::migrate(*bare) == store_type::schema_version);
  auto st = fx.make_store(*bare);
  outbox::testing::manual_clock clock;
  auto b = st->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(b.size() == 1u);
  BOOST_TEST(b.messages[0].id == id);
  // What the previous release's column held: jsonb normalized `{"total": 42}` to this text.
  BOOST_TEST(b.messages[0].payload == "{\"total\": 42}");
  BOOST_TEST(b.messages[0].content_type == "application/json");
  BOOST_TEST(b.messages[0].headers.at("k") == "v");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_database_behind_the_library_is_misconfigured_and_run_stops, Fixture,
                              store_fixtures) {
  Fixture fx;
  using store_type = typename Fixture::store_type;
  auto bare = fx.open_unmigrated_session();
  store_type::migrate(*bare, Fixture::previous_schema_version);  // a release behind
  auto st = fx.make_store(*bare);
  outbox::testing::manual_clock clock;
  kit::expect_error(
      outbox::errc::misconfigured, [&] { (void)st->claim(conformance::req(clock)); }, "claim");
  kit::expect_enqueue_misconfigured<Fixture>(*bare);
  // The relay's run loop stops on it (it backs off from everything else).
  outbox::testing::memory_transport t;
  outbox::relay relay(*st, t);
  std::stop_source stop;  // a watchdog ends the run if it spins instead of stopping (60 s)
  std::jthread watchdog([&](std::stop_token done) {
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lock(m);
    (void)cv.wait_for(lock, done, std::chrono::seconds(60), [] { return false; });
    stop.request_stop();
  });
  kit::expect_error(
      outbox::errc::misconfigured, [&] { relay.run(stop.get_token()); }, "relay.run");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(migrate_refuses_a_session_inside_a_transaction_and_changes_nothing,
                              Fixture, store_fixtures) {
  Fixture fx;
  using store_type = typename Fixture::store_type;
  auto bare = fx.open_unmigrated_session();
  {
    auto tx = Fixture::begin(*bare);
    // A temporary table: MySQL commits the transaction before a CREATE TABLE (implicitly), and
    // the caller's transaction must still be open when migrate looks at it.
    *bare << "CREATE TEMPORARY TABLE app_rows (id INTEGER)";
    kit::expect_error(
        outbox::errc::misconfigured, [&] { store_type::migrate(*bare); },
        "migrate in a transaction");
    tx->rollback();  // the caller's transaction is still the caller's
  }
  // Nothing was committed by the refused call, and the session is usable.
  kit::expect_error(
      outbox::errc::misconfigured,
      [&] { (void)fx.make_store(*bare)->stats(std::chrono::system_clock::now()); },
      "still unmigrated");
  BOOST_TEST(store_type::migrate(*bare) == store_type::schema_version);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_store_moves_with_its_claim_and_its_transactions, Fixture,
                              store_fixtures) {
  static_assert(std::is_nothrow_move_constructible_v<typename Fixture::store_type>);
  static_assert(!std::is_copy_constructible_v<typename Fixture::store_type>);
  Fixture fx;
  conformance::commit_events(fx, {conformance::make_event("a"), conformance::make_event("b")});
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::manual_clock clock;
  auto b = st->claim(conformance::req(clock));  // under locking, an open claim transaction
  BOOST_TEST_REQUIRE(b.size() == 2u);
  std::vector<typename Fixture::store_type> stores;
  stores.push_back(std::move(*st));  // moved while the claim is open
  auto r = stores.front().settle(b, conformance::all(2, outbox::settlement::kind::published),
                                 clock.now());
  BOOST_TEST(r.published == 2u);
  BOOST_TEST(r.fenced == 0u);
  {
    auto tx = stores.front().begin();
    BOOST_TEST(stores.front().record_delivery("billing", b.messages[0].id, clock.now()));
    typename Fixture::store_type again(std::move(stores.front()));  // with a transaction open
    tx.commit();
    BOOST_TEST(!again.record_delivery("billing", b.messages[0].id, clock.now()));
  }
}

BOOST_AUTO_TEST_SUITE_END()
