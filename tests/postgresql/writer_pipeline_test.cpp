// The writer's transaction on PostgreSQL (writer::begin): its events and COMMIT travel as one
// libpq pipeline, and it wakes the relay itself, instead of the wake-up trigger, which still
// wakes it for rows written any other way. What the store conformance suite cannot see: the
// wake-up, a backend that dies inside the event INSERT, prepared statements dropped behind the
// writer's back, a refused prepare, a transaction committed behind it, a large batch (the
// store conformance suite has the rolled back and the aborted transaction).
#define BOOST_TEST_MODULE postgresql writer pipeline
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <string>
#include <vector>

#include <outbox/outbox.hpp>

#include "../support/errors.hpp"
#include "../support/server_store_helpers.hpp"
#include "fixture.hpp"
#include "listening_relay.hpp"

using namespace std::chrono_literals;
using fixture = outbox::test::postgresql_locking_fixture;
using outbox::test::eventually;

namespace {

outbox::event placed(const std::string& id) {
  return outbox::event{"order", id, "order_placed", R"({"total":42})", {}};
}

/// The wake-up trigger's function replaced by one that only counts its calls (in
/// trigger_calls): a NOTIFY then comes from the writer or from nowhere.
void count_trigger_calls(soci::session& sql) {
  sql << "CREATE TABLE trigger_calls (n integer NOT NULL)";
  sql << "CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS "
         "$$ BEGIN INSERT INTO trigger_calls VALUES (1); RETURN NULL; END $$";
}

}  // namespace

// A relay idle-polling every 30 s publishes within the wait only if a NOTIFY woke it: the
// trigger no longer notifies here (it only counts), so the writer's own wake-up did. The
// trigger is skipped for the writer's transaction and still runs for a plain enqueue.
BOOST_AUTO_TEST_CASE(the_writer_transaction_wakes_the_relay_and_the_trigger_stays_out) {
  fixture fx;
  auto sql = fx.open_session();
  count_trigger_calls(*sql);
  outbox::test::listening_relay r(fx);
  BOOST_TEST_REQUIRE(r.asleep());
  outbox::writer<outbox::postgresql::store> w;
  {
    auto tx = w.begin(*sql);
    fixture::insert_order(tx.session(), "o-1", 10);
    tx.enqueue(placed("o-1"));
    tx.commit();
  }
  BOOST_TEST(eventually([&] { return r.transport.published_count() == 1; }, 10s));
  BOOST_TEST(fixture::count(*sql, "SELECT count(*) FROM trigger_calls") == 0);
  {
    soci::transaction tx(*sql);
    w.enqueue(*sql, placed("o-2"));
    tx.commit();
  }
  BOOST_TEST(fixture::count(*sql, "SELECT count(*) FROM trigger_calls") == 1);
  // Without events, no wake-up: the relay sleeps on (nothing to check but that it published
  // nothing more, and it never sees o-2 before its poll either).
  r.runner.request_stop();
  r.runner.join();
  BOOST_TEST(r.relay.stats().published == 1u);
}

// The backend dies inside the event INSERT (it terminates itself from a trigger, between the
// business statements and COMMIT in the pipeline): the server answered the INSERT with 57P01,
// so COMMIT never ran. That is transient, not in doubt, and nothing is committed.
BOOST_AUTO_TEST_CASE(a_backend_that_dies_inside_the_event_insert_commits_nothing) {
  fixture fx;
  auto sql = fx.open_session();
  *sql << "CREATE FUNCTION die() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
          "PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(30); RETURN NEW; "
          "END $$";
  *sql << "CREATE TRIGGER die BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION die()";
  outbox::writer<outbox::postgresql::store> w;
  auto tx = w.begin(*sql);
  fixture::insert_order(tx.session(), "o-1", 10);
  tx.enqueue(placed("o-1"));
  const auto e = outbox::test::error_of([&] { tx.commit(); });
  BOOST_REQUIRE(e.has_value());
  BOOST_TEST((e->kind() == outbox::errc::transient), e->what());
  BOOST_TEST(e->native_code() == "57P01");
  auto check = fx.open_session();
  BOOST_TEST(fixture::count(*check, "SELECT count(*) FROM orders") == 0);
  BOOST_TEST(fixture::count(*check, "SELECT count(*) FROM outbox") == 0);
}

// DEALLOCATE ALL (a pooler's reset, an application's cleanup) drops the writer's prepared
// statements: that commit fails (26000, nothing committed) and the next prepares them again.
BOOST_AUTO_TEST_CASE(statements_dropped_behind_the_writer_fail_one_commit_then_come_back) {
  fixture fx;
  auto sql = fx.open_session();
  outbox::writer<outbox::postgresql::store> w;
  const auto one = [&](const std::string& id, bool drop) {
    auto tx = w.begin(*sql);
    fixture::insert_order(tx.session(), id, 10);
    if (drop) *sql << "DEALLOCATE ALL";
    tx.enqueue(placed(id));
    return outbox::test::error_of([&] { tx.commit(); });
  };
  BOOST_TEST(!one("o-1", false));
  const auto e = one("o-2", true);
  BOOST_REQUIRE(e.has_value());
  BOOST_TEST(e->native_code() == "26000");
  BOOST_TEST(!one("o-3", false));
  BOOST_TEST(fixture::count(*sql, "SELECT count(*) FROM orders") == 2);
  BOOST_TEST(fixture::count(*sql, "SELECT count(*) FROM outbox") == 2);
}

// The first commit on a connection prepares its statements (one round trip each) before the
// pipeline. A prepare the server refuses (the outbox table renamed away: 42P01) aborts the
// transaction: the writer rolls it back, so the error is the prepare's and the session is
// usable at once, without a ROLLBACK of the caller's.
BOOST_AUTO_TEST_CASE(a_refused_prepare_leaves_the_session_usable) {
  fixture fx;
  auto sql = fx.open_session();
  auto admin = fx.open_session();
  outbox::writer<outbox::postgresql::store> w;
  const auto one = [&](const std::string& id) {
    auto tx = w.begin(*sql);
    fixture::insert_order(tx.session(), id, 10);
    tx.enqueue(placed(id));
    return outbox::test::error_of([&] { tx.commit(); });
  };
  *admin << "ALTER TABLE outbox RENAME TO outbox_away";
  const auto e = one("o-1");
  BOOST_REQUIRE(e.has_value());
  BOOST_TEST((e->kind() == outbox::errc::misconfigured), e->what());
  BOOST_TEST(e->native_code() == "42P01");
  BOOST_TEST(PQtransactionStatus(outbox::postgresql::detail::handle(*sql)) == PQTRANS_IDLE);
  BOOST_TEST(fixture::count(*sql, "SELECT count(*) FROM orders") == 0);
  *admin << "ALTER TABLE outbox_away RENAME TO outbox";
  BOOST_TEST(!one("o-2"));
  BOOST_TEST(fixture::count(*admin, "SELECT count(*) FROM orders") == 1);
  BOOST_TEST(fixture::count(*admin, "SELECT count(*) FROM outbox") == 1);
}

// The caller ended the transaction itself between its statements and the writer's commit (its
// own COMMIT): the writer refuses, sends no event, and says the session's earlier work stays.
BOOST_AUTO_TEST_CASE(a_transaction_committed_behind_the_writer_is_refused) {
  fixture fx;
  auto sql = fx.open_session();
  outbox::writer<outbox::postgresql::store> w;
  auto tx = w.begin(*sql);
  fixture::insert_order(tx.session(), "o-1", 10);
  tx.enqueue(placed("o-1"));
  sql->commit();
  const auto e = outbox::test::error_of([&] { tx.commit(); });
  BOOST_REQUIRE(e.has_value());
  BOOST_TEST((e->kind() == outbox::errc::permanent), e->what());
  BOOST_TEST(std::string(e->what()).find("the events were not committed") != std::string::npos,
             e->what());
  BOOST_TEST(fixture::count(*sql, "SELECT count(*) FROM orders") == 1);
  BOOST_TEST(fixture::count(*sql, "SELECT count(*) FROM outbox") == 0);
}

// 1,201 events: three multi-row INSERTs (500 rows each at most) in the same pipeline, one
// wake-up, one COMMIT; and with prepare_statements off, the one-row form as text.
BOOST_AUTO_TEST_CASE(many_events_and_unprepared_statements_ride_on_one_commit) {
  fixture fx;
  auto sql = fx.open_session();
  std::vector<outbox::event> events;
  events.reserve(1201);
  for (int i = 0; i < 1201; ++i) events.push_back(placed(std::to_string(i)));
  outbox::writer<outbox::postgresql::store> w;
  {
    auto tx = w.begin(*sql);
    BOOST_TEST(tx.enqueue(events).size() == 1201u);
    tx.commit();
  }
  outbox::writer<outbox::postgresql::store> unprepared({.prepare_statements = false});
  {
    auto tx = unprepared.begin(*sql);
    tx.enqueue(placed("one"));
    tx.commit();
  }
  BOOST_TEST(fixture::count(*sql, "SELECT count(*) FROM outbox") == 1202);
  // Neither prepared the one-row INSERT (the first had no single row, the second may not).
  BOOST_TEST(fixture::count(*sql,
                            "SELECT count(*) FROM pg_prepared_statements WHERE name = "
                            "'outbox_append'") == 0);
}

OUTBOX_TEST_MAIN_REQUIRING("OUTBOX_TEST_POSTGRESQL")
