// The log-tailing relay (postgresql::tailing_store) against a real server with
// wal_level = logical: the table-free writer, commit order, the slot's position and replays,
// retries and dead letters through the outbox table, unreadable WAL messages, setup errors.
#define BOOST_TEST_MODULE postgresql_tailing
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <outbox/outbox.hpp>
#include <outbox/postgresql/tailing_store.hpp>
#include <outbox/testing/faulty_transport.hpp>
#include <outbox/testing/manual_clock.hpp>
#include <outbox/testing/memory_transport.hpp>

#include "../support/errors.hpp"
#include "../support/server_store_helpers.hpp"
#include "../support/tcp_proxy.hpp"
#include "tailing_fixture.hpp"

using namespace std::chrono_literals;
using outbox::postgresql::tailing_options;
using outbox::postgresql::tailing_store;
using outbox::test::eventually;

namespace {

using tailing_fixture = outbox::test::postgresql_tailing_fixture;

std::vector<std::string> names(const std::vector<outbox::message>& wire) {
  std::vector<std::string> out;
  for (const auto& m : wire) out.push_back(m.event_type);
  return out;
}

/// Runs the relay until `n` messages are on the wire (bounded).
template <class Relay, class Transport>
bool relay_until(Relay& r, Transport& t, std::size_t n, std::chrono::seconds limit = 30s) {
  return eventually(
      [&] {
        r.run_once();
        return t.wire().size() >= n;
      },
      limit);
}

const outbox::exponential_backoff quick_retry{.initial = 50ms, .jitter = 0, .max_attempts = 3};

/// The outbox table as `sql`'s search_path resolves it, schema-qualified.
std::string outbox_table(soci::session& sql) {
  std::string schema;
  sql << "SELECT current_schema()", soci::into(schema);
  return schema + ".outbox";
}

/// Whether `e` refuses a publication as misconfigured, naming it and `table`.
bool names_publication_and_table(const outbox::error& e, const std::string& table) {
  const std::string what = e.what();
  return e.code() == outbox::errc::misconfigured &&
         what.find("publication \"") != std::string::npos && what.find(table) != std::string::npos;
}

/// How `relay::run` ended.
struct run_end {
  bool ended = false;  // by itself, within 60 s
  bool misconfigured = false;
  std::string what;
};

/// Runs `r` on a thread until it stops by itself (bounded: 60 s, then it is stopped).
template <class Relay>
run_end run_until_it_stops(Relay& r) {
  run_end end;
  std::atomic<bool> done{false};
  std::jthread runner([&](std::stop_token stop) {
    try {
      r.run(stop);
    } catch (const outbox::error& e) {
      end.misconfigured = e.code() == outbox::errc::misconfigured;
      end.what = e.what();
    }
    done = true;
  });
  const bool ended = eventually([&] { return done.load(); });
  runner.request_stop();
  runner.join();
  end.ended = ended;
  return end;
}

/// The events a store hands out, in order, each batch settled as published at once.
struct order_log {
  std::vector<std::string> handed_out;

  /// One claim at `at` (table or stream), recorded and settled.
  void hand_out(tailing_store& st, outbox::time_point at) {
    const auto b = st.claim({.owner = "t", .limit = 10, .now = at, .lease = 30s});
    if (b.empty()) return;
    std::vector<outbox::settlement> fates(b.size());
    for (auto& f : fates) f.what = outbox::settlement::kind::published;
    for (const auto& m : b.messages) handed_out.push_back(m.event_type);
    (void)st.settle(b, fates, at);
  }
  /// Claims, `ahead` of the clock, until `name` was handed out (bounded).
  bool hand_out_until(tailing_store& st, const std::string& name,
                      std::chrono::hours ahead = std::chrono::hours(0)) {
    return eventually([&] {
      hand_out(st, outbox::system_clock{}.now() + ahead);
      return std::find(handed_out.begin(), handed_out.end(), name) != handed_out.end();
    });
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(postgresql_tailing,
                      *boost::unit_test::precondition(
                          outbox::test::services_of<outbox::test::postgresql_leasing_fixture>))

BOOST_FIXTURE_TEST_CASE(setup_is_idempotent_and_checks_names, tailing_fixture) {
  BOOST_TEST(created);
  auto sql = open_session();
  BOOST_TEST(!tailing_store::setup(*sql, opts));  // already there
  tailing_options bad = opts;
  bad.slot = "Bad-Name";
  try {
    (void)tailing_store::setup(*sql, bad);
    BOOST_FAIL("a bad slot name was accepted");
  } catch (const outbox::error& e) {
    BOOST_TEST(e.code() == outbox::errc::misconfigured);
    BOOST_TEST(std::string(e.what()).find("tailing_options.slot") != std::string::npos);
  }
  BOOST_CHECK_THROW((void)tailing_store(connect_string(), *sql, bad), outbox::error);
}

BOOST_FIXTURE_TEST_CASE(committed_events_go_out_in_commit_order_and_rolled_back_ones_never,
                        tailing_fixture) {
  auto table = open_session();
  auto store = make_tailing(*table);
  outbox::testing::memory_transport transport({.record = true});
  outbox::relay r(*store, transport);

  write({{"1", "a1"}, {"2", "b1"}});
  {
    auto sql = open_session();
    outbox::writer<tailing_store> w;
    soci::transaction tx(*sql);
    w.enqueue(*sql, outbox::event{"order", "1", "rolled_back", "{}"});
    tx.rollback();
  }
  // Two transactions that commit in the opposite order of their first write.
  auto first = open_session();
  auto second = open_session();
  outbox::writer<tailing_store> w;
  soci::transaction t1(*first);
  w.enqueue(*first, outbox::event{"order", "3", "c_first_written", "{}"});
  soci::transaction t2(*second);
  w.enqueue(*second, outbox::event{"order", "4", "d_second_written", "{}"});
  t2.commit();
  w.enqueue(*first, outbox::event{"order", "3", "c_again", "{}"});
  t1.commit();
  write({{"1", "a2"}});

  BOOST_TEST_REQUIRE(relay_until(r, transport, 6));
  BOOST_TEST_REQUIRE(relay_through_sentinel(r, transport));  // and nothing else came
  const std::vector<std::string> expected{"a1",      "b1", "d_second_written", "c_first_written",
                                          "c_again", "a2", "sentinel"};
  BOOST_TEST(names(transport.wire()) == expected, boost::test_tools::per_element());
  BOOST_TEST(table_rows(*table) == 0u);  // table-free: nothing was written to the table
  const auto wire = transport.wire();
  const auto& m = wire.front();
  BOOST_TEST(m.payload == "{\"n\":\"a1\"}");
  BOOST_TEST(m.aggregate_type == "order");
  BOOST_TEST(m.id.version() == 7);
}

BOOST_FIXTURE_TEST_CASE(table_mode_rows_go_out_in_commit_order_and_are_deleted_once_confirmed,
                        tailing_fixture) {
  using table_mode = tailing_store::table_mode;
  auto table = open_session();
  auto store = make_tailing(*table);
  outbox::testing::memory_transport transport({.record = true});
  outbox::relay r(*store, transport);
  write<table_mode>({{"1", "t1"}, {"2", "t2"}});
  {
    // Both writers in one transaction: the WAL keeps their order.
    auto sql = open_session();
    outbox::writer<table_mode> rows;
    outbox::writer<tailing_store> messages;
    soci::transaction tx(*sql);
    rows.enqueue(*sql, outbox::event{"order", "1", "row", "{}"});
    messages.enqueue(*sql, outbox::event{"order", "1", "message", "{}"});
    rows.enqueue(*sql, outbox::event{"order", "1", "row_again", "{}", {{"k", "v"}}});
    tx.commit();
  }
  {
    auto sql = open_session();
    outbox::writer<table_mode> rows;
    soci::transaction tx(*sql);
    rows.enqueue(*sql, outbox::event{"order", "1", "rolled_back", "{}"});
    tx.rollback();
  }
  BOOST_TEST(table_rows(*table, "state = 3") == 4u);  // the message is no row
  BOOST_TEST(table_rows(*table, "state = 0") == 0u);  // nothing a polling claim would take
  BOOST_TEST_REQUIRE(relay_until(r, transport, 5));
  const auto wire = transport.wire();
  BOOST_TEST(names(wire) == (std::vector<std::string>{"t1", "t2", "row", "message", "row_again"}),
             boost::test_tools::per_element());
  BOOST_TEST(wire.back().headers.at("k") == "v");
  BOOST_TEST(wire.front().payload == "{\"n\":\"t1\"}");
  BOOST_TEST(table_rows(*table) == 0u);  // deleted once confirmed

  // A failed one becomes a pending row (the streamed row takes the fate), and goes again.
  outbox::testing::faulty_transport<outbox::testing::memory_transport> faulty(transport);
  outbox::relay retrying(*store, faulty, outbox::relay_options{},
                         outbox::exponential_backoff{.initial = 50ms, .jitter = 0});
  faulty.fail_next(1);
  write<table_mode>({{"3", "failed_once"}});
  BOOST_TEST_REQUIRE(eventually([&] {
    retrying.run_once();
    return table_rows(*table, "state = 0 AND attempts = 1") == 1u;
  }));
  BOOST_TEST(table_rows(*table, "state = 3") == 0u);
  BOOST_TEST_REQUIRE(relay_until(retrying, transport, 6));
  BOOST_TEST(transport.wire().back().event_type == "failed_once");
}

// Table mode keeps commit order through the table too: a row inserted first and committed
// last goes after the other when both wait in the table (a parked row takes a new seq).
BOOST_FIXTURE_TEST_CASE(table_mode_retries_keep_commit_order_not_insert_order, tailing_fixture) {
  using table_mode = tailing_store::table_mode;
  auto table = open_session();
  auto store = make_tailing(*table);
  outbox::testing::memory_transport inner({.record = true});
  outbox::testing::faulty_transport<outbox::testing::memory_transport> transport(inner);
  outbox::testing::manual_clock clock;
  outbox::relay r(*store, transport, outbox::relay_options{},
                  outbox::exponential_backoff{.initial = 50ms, .jitter = 0}, clock);
  auto first = open_session();
  auto second = open_session();
  outbox::writer<table_mode> w;
  soci::transaction t1(*first);
  w.enqueue(*first, outbox::event{"order", "A", "inserted_first", "{}"});
  soci::transaction t2(*second);
  w.enqueue(*second, outbox::event{"order", "A", "committed_first", "{}"});
  t2.commit();
  t1.commit();
  transport.fail_next(1);  // committed_first fails; inserted_first is released behind it
  BOOST_TEST_REQUIRE(eventually([&] {
    r.run_once();
    return table_rows(*table, "state = 0") == 2u;
  }));
  clock.advance(100ms);
  BOOST_TEST_REQUIRE(relay_until(r, inner, 2));
  BOOST_TEST(names(inner.wire()) == (std::vector<std::string>{"committed_first", "inserted_first"}),
             boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(the_slot_advances_only_past_settled_events, tailing_fixture) {
  write({{"1", "e1"}, {"2", "e2"}});
  auto table = open_session();
  {
    // Claimed, never settled: a relay that died between the confirm and the settle.
    auto store = make_tailing(*table);
    auto b = claim_some(*store);
    BOOST_TEST_REQUIRE(!b.empty());
    BOOST_TEST(b.size() == 2u);
  }
  outbox::testing::memory_transport transport({.record = true});
  {
    auto store = make_tailing(*table);
    outbox::relay r(*store, transport);
    BOOST_TEST_REQUIRE(relay_until(r, transport, 2));
    BOOST_TEST(names(transport.wire()) == (std::vector<std::string>{"e1", "e2"}),
               boost::test_tools::per_element());
    BOOST_TEST(store->settled_position() > 0u);
  }
  write({{"1", "e3"}});
  {
    // Settled: a new store starts after them.
    auto store = make_tailing(*table);
    outbox::relay r(*store, transport);
    BOOST_TEST_REQUIRE(relay_until(r, transport, 3));
    BOOST_TEST_REQUIRE(relay_through_sentinel(r, transport));  // and no replay came
    BOOST_TEST(names(transport.wire()) == (std::vector<std::string>{"e1", "e2", "e3", "sentinel"}),
               boost::test_tools::per_element());
  }
  auto sql = open_session();
  BOOST_TEST(count(*sql, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '" +
                             opts.slot + "' AND confirmed_flush_lsn > '0/0'") == 1);
}

BOOST_FIXTURE_TEST_CASE(a_slot_set_back_by_a_server_restart_does_not_replay_what_was_settled,
                        tailing_fixture) {
  // PostgreSQL before 17 writes a logical slot's confirmed position to disk only now and then:
  // after a restart the slot can stand 15 s or more behind what its relay confirmed (seen in
  // the fault harness: events applied again 21 s later, past the consumer's dedup window). A
  // copy of the slot taken before the events stands where such a slot would.
  auto admin = open_session();
  tailing_options behind = opts;
  behind.slot = opts.slot + "_behind";
  *admin << "SELECT 1 FROM pg_copy_logical_replication_slot('" + opts.slot + "', '" + behind.slot +
                "')";
  struct drop_at_end {
    soci::session& sql;
    const tailing_options& o;
    ~drop_at_end() {
      for (int i = 0; i < 50; ++i) try {
          tailing_store::drop(sql, o);
          return;
        } catch (const outbox::error&) {
          std::this_thread::sleep_for(100ms);
        }
    }
  } dropped{*admin, behind};
  write({{"1", "e1"}, {"2", "e2"}});
  auto table = open_session();
  outbox::testing::memory_transport transport({.record = true});
  {
    auto store = make_tailing(*table);
    outbox::relay r(*store, transport);
    BOOST_TEST_REQUIRE(relay_until(r, transport, 2));
    BOOST_TEST(count(*admin, "SELECT count(*) FROM outbox_tail_positions WHERE slot = '" +
                                 opts.slot + "' AND settled > 0 AND settled <= " +
                                 std::to_string(store->settled_position())) == 1);
  }
  // The table holds what the relay settled; the slot (the copy) stands before e1 and e2.
  *admin << "UPDATE outbox_tail_positions SET slot = '" + behind.slot + "' WHERE slot = '" +
                opts.slot + "'";
  write({{"1", "e3"}});
  const auto names_of = [](const outbox::claimed_batch& b) { return names(b.messages); };
  {
    // The stream starts at the saved position: e3 alone (the slot alone would give e1 first).
    tailing_store store(connect_string(), *table, behind);
    BOOST_TEST(names_of(claim_some(store)) == (std::vector<std::string>{"e3"}),
               boost::test_tools::per_element());
    // And the server hears it at once: the copy's confirmed position moves up to it.
    BOOST_TEST(eventually([&] {
      (void)claim_now(store);
      return count(*admin,
                   "SELECT count(*) FROM pg_replication_slots s JOIN "
                   "outbox_tail_positions p ON p.slot = s.slot_name WHERE s.slot_name = '" +
                       behind.slot + "' AND s.confirmed_flush_lsn - '0/0'::pg_lsn >= p.settled") ==
             1;
    }));
    store.close();
  }
  // A slot made again under the same name starts afresh: a saved position left for it goes.
  BOOST_TEST_REQUIRE(eventually([&] {
    try {
      tailing_store::drop(*admin, behind);  // 55006 until the walsender has gone
      return true;
    } catch (const outbox::error& e) {
      BOOST_TEST_REQUIRE(e.code() == outbox::errc::transient);
      return false;
    }
  }));
  *admin << "INSERT INTO outbox_tail_positions (slot, settled) VALUES ('" + behind.slot + "', 1)";
  BOOST_TEST(tailing_store::setup(*admin, behind));
  BOOST_TEST(count(*admin, "SELECT count(*) FROM outbox_tail_positions WHERE slot = '" +
                               behind.slot + "'") == 0);
  // A saved position past the end of this server's WAL (a row from another server's history,
  // restored or replicated here) is not trusted: nothing is skipped.
  *admin << "INSERT INTO outbox_tail_positions (slot, settled) VALUES ('" + behind.slot +
                "', 4611686018427387904)";
  write({{"1", "e4"}});
  {
    tailing_store store(connect_string(), *table, behind);
    outbox::testing::memory_transport again({.record = true});
    outbox::relay r(store, again);
    BOOST_TEST_REQUIRE(relay_until(r, again, 1));
    BOOST_TEST(names(again.wire()) == (std::vector<std::string>{"e4"}),
               boost::test_tools::per_element());
    // ... and the relay's own position replaces it.
    BOOST_TEST(count(*admin, "SELECT count(*) FROM outbox_tail_positions WHERE slot = '" +
                                 behind.slot + "' AND settled > 0 AND settled <= " +
                                 std::to_string(store.settled_position())) == 1);
    store.close();
  }
}

BOOST_FIXTURE_TEST_CASE(a_position_that_cannot_be_saved_fails_the_claims_until_it_can,
                        tailing_fixture) {
  // A save that fails for good (a right revoked on outbox_tail_positions, a read-only server;
  // here a trigger that refuses every write) never fails the settle before it: those events
  // are confirmed and stay settled. The next claim meets the error where the stream opens
  // (the relay reports it and backs off), nothing is sent meanwhile, and once writes work
  // again the relay goes on after what it settled.
  auto admin = open_session();
  auto table = open_session();
  auto store = make_tailing(*table);
  write({{"1", "e1"}});
  auto first = claim_some(*store);
  BOOST_TEST_REQUIRE(first.size() == 1u);
  *admin << "CREATE FUNCTION refuse_position() RETURNS trigger LANGUAGE plpgsql AS "
            "$$BEGIN RAISE EXCEPTION 'positions are read-only here'; END$$";
  *admin << "CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON outbox_tail_positions "
            "FOR EACH ROW EXECUTE FUNCTION refuse_position()";
  std::vector<outbox::settlement> confirmed(1);
  confirmed[0].what = outbox::settlement::kind::published;
  const auto r = store->settle(first, confirmed, outbox::system_clock{}.now());
  BOOST_TEST(r.published == 1u);
  write({{"2", "e2"}});
  for (int i = 0; i < 3; ++i)
    BOOST_CHECK_EXCEPTION(claim_now(*store), outbox::error, [](const outbox::error& e) {
      BOOST_TEST_MESSAGE(e.what());
      return e.code() == outbox::errc::permanent &&
             std::string(e.what()).find("positions are read-only here") != std::string::npos &&
             std::string(e.what()).find("settled position") != std::string::npos;
    });
  // A relay's run loop reports it and keeps trying (a right can be granted again), sending
  // nothing meanwhile; once writes work again it goes on after what it settled: e2 alone.
  outbox::testing::memory_transport transport({.record = true});
  std::atomic<int> errors{0}, other_errors{0};  // counted on the relay's thread
  {
    outbox::relay relay(*store, transport,
                        {.error_backoff_max = 100ms, .on_error = [&](const outbox::error& e) {
                           ++(e.code() == outbox::errc::permanent ? errors : other_errors);
                         }});
    std::jthread running([&](std::stop_token stop) { relay.run(stop); });
    BOOST_TEST_REQUIRE(eventually([&] { return errors.load() >= 3; }));
    BOOST_TEST(transport.wire().empty());
    *admin << "DROP TRIGGER refuse ON outbox_tail_positions";
    BOOST_TEST_REQUIRE(eventually([&] { return transport.wire().size() >= 1u; }));
    // Then a sentinel through the running relay: nothing else came before it.
    write({{"sentinel", "sentinel"}});
    BOOST_TEST_REQUIRE(eventually([&] { return transport.wire().size() >= 2u; }));
  }
  BOOST_TEST(other_errors.load() == 0);
  BOOST_TEST(names(transport.wire()) == (std::vector<std::string>{"e2", "sentinel"}),
             boost::test_tools::per_element());
  BOOST_TEST(count(*admin, "SELECT count(*) FROM outbox_tail_positions WHERE slot = '" + opts.slot +
                               "' AND settled > 0 AND settled <= " +
                               std::to_string(store->settled_position())) == 1);
  store->close();
}

BOOST_FIXTURE_TEST_CASE(a_save_that_fails_for_a_moment_is_tried_again_when_the_position_moves,
                        tailing_fixture) {
  // A transient failure (here a trigger that counts each try on a sequence, which no rollback
  // undoes, and fails it as a serialization failure) leaves the saved position behind: more
  // replay after a restart, nothing lost, the settle done. It is tried again when the position
  // moves, not at every claim (a save that waits out a lock_timeout each time slowed a drain of
  // 5,000 events from under 1 s to 27 s).
  auto admin = open_session();
  *admin << "CREATE SEQUENCE save_tries";
  *admin << "CREATE FUNCTION refuse_for_now() RETURNS trigger LANGUAGE plpgsql AS "
            "$$BEGIN PERFORM nextval('save_tries'); "
            "RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = 'not now'; END$$";
  auto table = open_session();
  auto store = make_tailing(*table);
  write({{"1", "e1"}});
  (void)claim_some(*store);  // the stream is open: its position row written
  *admin << "CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON outbox_tail_positions "
            "FOR EACH ROW EXECUTE FUNCTION refuse_for_now()";
  const auto tries = [&] {
    return count(*admin, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM save_tries");
  };
  const auto settle_all = [&](const outbox::claimed_batch& b) {
    std::vector<outbox::settlement> f(b.size());
    for (auto& x : f) x.what = outbox::settlement::kind::published;
    return store->settle(b, f, outbox::system_clock{}.now()).published;
  };
  store->release(claim_some(*store));  // not settled: nothing to save yet
  // The stream opens again: its save at the open is refused, and the open goes on.
  auto b = claim_some(*store);
  BOOST_TEST_REQUIRE(b.size() == 1u);
  const auto at_open = tries();
  BOOST_TEST(at_open >= 1);
  BOOST_TEST(settle_all(b) == 1u);  // the settle holds
  BOOST_TEST(tries() == at_open + 1);
  for (int i = 0; i < 20; ++i) BOOST_TEST(claim_now(*store).empty());
  BOOST_TEST(tries() == at_open + 1);  // not tried again while the position stands
  write({{"2", "e2"}});
  BOOST_TEST(settle_all(claim_some(*store)) == 1u);
  BOOST_TEST(tries() == at_open + 2);
  // Saved once writes work again: with the next position.
  *admin << "DROP TRIGGER refuse ON outbox_tail_positions";
  write({{"3", "e3"}});
  BOOST_TEST(settle_all(claim_some(*store)) == 1u);
  BOOST_TEST(count(*admin, "SELECT count(*) FROM outbox_tail_positions WHERE slot = '" + opts.slot +
                               "' AND settled = " + std::to_string(store->settled_position())) ==
             1);
  store->close();
}

BOOST_FIXTURE_TEST_CASE(a_failed_event_waits_in_the_table_and_its_aggregate_keeps_order,
                        tailing_fixture) {
  auto table = open_session();
  auto store = make_tailing(*table);
  outbox::testing::memory_transport inner({.record = true});
  outbox::testing::faulty_transport<outbox::testing::memory_transport> transport(inner);
  // Retries far enough apart that a1 is still waiting when the broker heals.
  outbox::relay r(*store, transport, outbox::relay_options{},
                  outbox::exponential_backoff{.initial = 50ms, .jitter = 0, .max_attempts = 20});

  transport.fail_when([](const outbox::message& m) { return m.event_type == "a1"; },
                      outbox::errc::transient);
  write({{"A", "a1"}, {"B", "b1"}, {"A", "a2"}});
  BOOST_TEST_REQUIRE(relay_until(r, inner, 1));
  BOOST_TEST(names(inner.wire()) == (std::vector<std::string>{"b1"}),
             boost::test_tools::per_element());
  // a1 waits for its retry in the table, a2 behind it; a3, written later, goes behind them.
  BOOST_TEST(table_rows(*table, "state = 0") == 2u);
  write({{"A", "a3"}, {"B", "b2"}});
  BOOST_TEST_REQUIRE(relay_until(r, inner, 2));
  BOOST_TEST(inner.wire().back().event_type == "b2");
  BOOST_TEST(table_rows(*table, "state = 0") == 3u);

  transport.heal();
  BOOST_TEST_REQUIRE(relay_until(r, inner, 5));
  write({{"A", "a4"}});
  BOOST_TEST_REQUIRE(relay_until(r, inner, 6));
  std::vector<std::string> a;
  for (const auto& m : inner.wire())
    if (m.aggregate_id == "A") a.push_back(m.event_type);
  BOOST_TEST(a == (std::vector<std::string>{"a1", "a2", "a3", "a4"}),
             boost::test_tools::per_element());
  BOOST_TEST(table_rows(*table, "state = 0") == 0u);
  BOOST_TEST(table_rows(*table, "state = 1") == 3u);  // the three that went through the table
  BOOST_TEST(r.stats().retried >= 1u);
}

BOOST_FIXTURE_TEST_CASE(a_refused_event_is_dead_lettered_and_the_rest_flows, tailing_fixture) {
  auto table = open_session();
  auto store = make_tailing(*table);
  outbox::testing::memory_transport inner({.record = true});
  outbox::testing::faulty_transport<outbox::testing::memory_transport> transport(inner);
  transport.fail_when([](const outbox::message& m) { return m.event_type == "poison"; });
  outbox::relay r(*store, transport, outbox::relay_options{}, quick_retry);

  write({{"A", "poison"}, {"A", "a2"}, {"B", "b1"}});
  BOOST_TEST_REQUIRE(relay_until(r, inner, 2));
  BOOST_TEST(names(inner.wire()) == (std::vector<std::string>{"b1", "a2"}),
             boost::test_tools::per_element());
  const auto dead = store->dead_letters(10);
  BOOST_TEST_REQUIRE(dead.size() == 1u);
  BOOST_TEST(dead.front().msg.event_type == "poison");
  BOOST_TEST(dead.front().msg.payload == "{\"n\":\"poison\"}");
  BOOST_TEST(r.stats().dead_lettered == 1u);

  // Requeued by an operator, it is published from the table.
  transport.heal();
  BOOST_TEST(store->requeue(dead.front().msg.id));
  BOOST_TEST_REQUIRE(relay_until(r, inner, 3, 10s));
  BOOST_TEST(inner.wire().back().event_type == "poison");
}

BOOST_FIXTURE_TEST_CASE(an_unreadable_message_is_dead_lettered_with_the_reason, tailing_fixture) {
  {
    auto sql = open_session();
    soci::transaction tx(*sql);
    *sql << "SELECT pg_logical_emit_message(true, 'outbox', '\\x09aa'::bytea)";
    *sql << "SELECT pg_logical_emit_message(true, 'somebody_else', 'not ours')";
    tx.commit();
  }
  write({{"1", "fine"}});
  auto table = open_session();
  auto store = make_tailing(*table);
  outbox::testing::memory_transport transport({.record = true});
  outbox::relay r(*store, transport);
  BOOST_TEST_REQUIRE(relay_until(r, transport, 1));
  BOOST_TEST(names(transport.wire()) == (std::vector<std::string>{"fine"}),
             boost::test_tools::per_element());
  const auto dead = store->dead_letters(10);
  BOOST_TEST_REQUIRE(dead.size() == 1u);
  BOOST_TEST(dead.front().last_error.find("format 9") != std::string::npos);
  BOOST_TEST(r.stats().dead_lettered == 1u);
}

BOOST_FIXTURE_TEST_CASE(stats_and_slot_show_the_lag_and_who_streams, tailing_fixture) {
  auto table = open_session();
  auto store = make_tailing(*table);
  auto idle = tailing_store::slot(*table, opts);
  BOOST_TEST(idle.exists);
  BOOST_TEST(!idle.active);
  BOOST_TEST(idle.wal_status == "reserved");
  std::vector<std::pair<std::string, std::string>> events;
  for (int i = 0; i < 50; ++i) events.emplace_back(std::to_string(i % 5), "e" + std::to_string(i));
  write(events);
  const auto before = store->stats(outbox::system_clock{}.now());
  BOOST_TEST(before.log_lag_bytes > 1000);  // 50 events of WAL not confirmed
  BOOST_TEST(before.pending == 0);          // nothing in the table
  outbox::testing::memory_transport transport({.record = true});
  outbox::relay r(*store, transport);
  BOOST_TEST_REQUIRE(relay_until(r, transport, 50));
  BOOST_TEST(tailing_store::slot(*table, opts).active);
  BOOST_TEST(eventually(
      [&] {
        return store->stats(outbox::system_clock{}.now()).log_lag_bytes < before.log_lag_bytes;
      },
      10s));
  tailing_options missing = opts;
  missing.slot = opts.slot + "_none";
  BOOST_TEST(!tailing_store::slot(*table, missing).exists);
}

BOOST_FIXTURE_TEST_CASE(a_missing_slot_is_a_configuration_error, tailing_fixture) {
  auto table = open_session();
  tailing_options other = opts;
  other.slot = opts.slot + "_missing";
  tailing_store store(connect_string(), *table, other);
  try {
    (void)claim_now(store);
    BOOST_FAIL("a claim on a missing slot went through");
  } catch (const outbox::error& e) {
    BOOST_TEST(e.code() == outbox::errc::misconfigured);
    BOOST_TEST(std::string(e.what()).find("setup") != std::string::npos);
  }
}

BOOST_FIXTURE_TEST_CASE(a_slot_dropped_under_a_running_relay_stops_it_as_misconfigured,
                        tailing_fixture) {
  auto table = open_session();
  auto store = make_tailing(*table);
  outbox::testing::memory_transport transport({.record = true});
  outbox::relay r(*store, transport);
  write({{"1", "before"}});
  BOOST_TEST_REQUIRE(relay_until(r, transport, 1));
  auto admin = open_session();
  BOOST_TEST_REQUIRE(eventually([&] {
    *admin << "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE "
              "slot_name = '" +
                  opts.slot + "' AND active_pid IS NOT NULL";
    try {
      tailing_store::drop(*admin, opts);
      return true;
    } catch (const outbox::error&) {
      return false;
    }
  }));
  write({{"1", "after"}});
  // run() stops on a configuration error; run_once says what it is.
  std::optional<outbox::error> seen;
  BOOST_TEST_REQUIRE(eventually(
      [&] {
        try {
          r.run_once();
        } catch (const outbox::error& e) {
          if (e.code() == outbox::errc::misconfigured) seen = e;
        }
        return seen.has_value();
      },
      20s));
  BOOST_TEST(std::string(seen->what()).find(opts.slot) != std::string::npos, seen->what());
  BOOST_TEST(transport.wire().size() == 1u);
}

BOOST_FIXTURE_TEST_CASE(a_lost_stream_replays_and_loses_nothing, tailing_fixture) {
  auto table = open_session();
  auto store = make_tailing(*table);
  outbox::testing::memory_transport transport({.record = true});
  outbox::relay r(*store, transport);
  write({{"1", "x1"}});
  BOOST_TEST_REQUIRE(relay_until(r, transport, 1));
  auto admin = open_session();
  *admin
      << "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = '" +
             opts.slot + "'";
  write({{"1", "x2"}, {"2", "y1"}});
  // The next steps fail (transient) and reconnect; every event arrives, in order.
  BOOST_TEST_REQUIRE(eventually(
      [&] {
        try {
          r.run_once();
        } catch (const outbox::error& e) {
          BOOST_TEST(e.code() == outbox::errc::transient);
        }
        return transport.wire().size() >= 3;
      },
      30s));
  std::vector<std::string> got = names(transport.wire());
  BOOST_TEST(got.front() == "x1");
  BOOST_TEST(std::count(got.begin(), got.end(), "x2") >= 1);
  BOOST_TEST(std::count(got.begin(), got.end(), "y1") >= 1);
}

BOOST_FIXTURE_TEST_CASE(the_table_free_writer_prepares_once_and_survives_deallocate_all,
                        tailing_fixture) {
  auto sql = open_session();
  const auto prepared = [&] {
    return count(*sql, "SELECT count(*) FROM pg_prepared_statements WHERE name = 'outbox_emit'");
  };
  const auto enqueue = [&](outbox::writer<tailing_store>& w, int n, const std::string& name) {
    soci::transaction tx(*sql);
    std::vector<outbox::event> events(static_cast<std::size_t>(n),
                                      outbox::event{"order", "1", name, "{}"});
    w.enqueue(*sql, std::span<const outbox::event>(events));
    tx.commit();
  };
  outbox::writer<tailing_store> w;
  enqueue(w, 1, "one");
  BOOST_TEST(prepared() == 1);
  enqueue(w, 3, "three");  // one statement over a VALUES list, not prepared
  *sql << "DEALLOCATE ALL";
  try {
    enqueue(w, 1, "lost");
    BOOST_ERROR("an append through a deallocated statement succeeded");
  } catch (const outbox::error& e) {
    BOOST_TEST(e.native_code().find("26000") == 0u, e.what());
  }
  enqueue(w, 1, "again");
  BOOST_TEST(prepared() == 1);
  outbox::writer<tailing_store> plain({.prepare_statements = false});
  *sql << "DEALLOCATE ALL";
  enqueue(plain, 1, "plain");
  BOOST_TEST(prepared() == 0);

  auto table = open_session();
  auto store = make_tailing(*table);
  outbox::testing::memory_transport transport({.record = true});
  outbox::relay r(*store, transport);
  BOOST_TEST_REQUIRE(relay_until(r, transport, 6));
  BOOST_TEST(names(transport.wire()) ==
                 (std::vector<std::string>{"one", "three", "three", "three", "again", "plain"}),
             boost::test_tools::per_element());
}

// The writer transaction on both tailing writers: the events ride in one pipeline with COMMIT
// (one event through the prepared statement, three through one statement); the transaction
// ended behind the writer (the caller's rollback) is refused with nothing emitted; a dropped
// prepared statement fails one commit (26000) and the next prepares it again. Only what the
// committed transactions carried goes out, in commit order.
BOOST_FIXTURE_TEST_CASE(the_writer_transaction_commits_through_both_tailing_writers,
                        tailing_fixture) {
  using table_mode = tailing_store::table_mode;
  auto sql = open_session();
  const auto with = [&](auto& w, const std::string& name, std::size_t n, auto&& before_commit) {
    auto tx = w.begin(*sql);
    insert_order(tx.session(), name, 1);
    tx.enqueue(std::vector<outbox::event>(n, outbox::event{"order", "1", name, "{}"}));
    before_commit();
    return outbox::test::error_of([&] { tx.commit(); });
  };
  const auto nothing = [] {};
  outbox::writer<tailing_store> messages;
  outbox::writer<table_mode> rows;
  BOOST_TEST(!with(messages, "m1", 1, nothing));
  BOOST_TEST(!with(messages, "m3", 3, nothing));
  BOOST_TEST(!with(rows, "r1", 1, nothing));
  BOOST_TEST(!with(rows, "r3", 3, nothing));
  for (const std::string name : {"m-behind", "r-behind"}) {
    const auto e = name[0] == 'm' ? with(messages, name, 1, [&] { sql->rollback(); })
                                  : with(rows, name, 1, [&] { sql->rollback(); });
    BOOST_REQUIRE(e.has_value());
    BOOST_TEST((e->kind() == outbox::errc::permanent), e->what());
  }
  const auto dropped = with(messages, "m-dropped", 1, [&] { *sql << "DEALLOCATE ALL"; });
  BOOST_REQUIRE(dropped.has_value());
  BOOST_TEST(dropped->native_code().find("26000") == 0u, dropped->what());
  BOOST_TEST(!with(messages, "m-again", 1, nothing));
  BOOST_TEST(count(*sql, "SELECT count(*) FROM orders") == 5);

  auto table = open_session();
  auto store = make_tailing(*table);
  outbox::testing::memory_transport transport({.record = true});
  outbox::relay r(*store, transport);
  BOOST_TEST_REQUIRE(relay_until(r, transport, 9));
  BOOST_TEST_REQUIRE(relay_through_sentinel(r, transport));  // and nothing else came
  BOOST_TEST(
      names(transport.wire()) == (std::vector<std::string>{"m1", "m3", "m3", "m3", "r1", "r3", "r3",
                                                           "r3", "m-again", "sentinel"}),
      boost::test_tools::per_element());
}

// Break-it finding: a stream restarted (a release, a lost walsender) kept the end of a later
// transaction without events as a settled position, and moved the slot past an event that was
// claimed and never settled.
BOOST_FIXTURE_TEST_CASE(a_restarted_stream_never_moves_the_slot_past_an_unsettled_event,
                        tailing_fixture) {
  auto table = open_session();
  write({{"1", "e1"}});
  {
    auto store = make_tailing(*table);
    auto b = claim_some(*store);
    BOOST_TEST_REQUIRE(!b.empty());
    {
      auto sql = open_session();  // a transaction the relay reads, without events of ours
      *sql << "SELECT pg_logical_emit_message(true, 'somebody_else', 'x')";
    }
    const std::string after = wal_now();
    BOOST_TEST_REQUIRE(sent_up_to(after));
    store->release(b);  // the stream starts again
    for (int i = 0; i < 5; ++i) {
      (void)claim_now(*store);                // e1 again; never settled
      BOOST_TEST_REQUIRE(sent_up_to(after));  // the new stream has sent the later transaction
    }
  }
  auto store = make_tailing(*table);
  outbox::testing::memory_transport transport({.record = true});
  outbox::relay r(*store, transport);
  BOOST_TEST_REQUIRE(relay_until(r, transport, 1));
  BOOST_TEST(transport.wire().front().event_type == "e1");
}

// Break-it finding: a message that crashes the relay came back forever (a stream event's
// attempts were always 1). The claims of the batch read first after the stream opens are
// counted in the table; spent, the relay dead-letters it unsent, and what follows flows.
BOOST_FIXTURE_TEST_CASE(a_message_that_keeps_crashing_relays_is_dead_lettered_unsent,
                        tailing_fixture) {
  write({{"1", "poison"}});
  write({{"2", "fine"}});
  auto table = open_session();
  for (int crash = 0; crash < 3; ++crash) {
    auto store = make_tailing(*table);  // claims the poison, then "dies" before settling it
    auto b = claim_some(*store, 1);
    BOOST_TEST_REQUIRE(!b.empty());
    BOOST_TEST(b.messages.front().event_type == "poison");
    BOOST_TEST(b.messages.front().attempts == crash + 1);
  }
  auto store = make_tailing(*table);
  outbox::testing::memory_transport transport({.record = true});
  outbox::relay r(*store, transport, outbox::relay_options{.batch_size = 1},
                  outbox::exponential_backoff{.initial = 50ms, .jitter = 0, .max_attempts = 3});
  BOOST_TEST_REQUIRE(relay_until(r, transport, 1));
  BOOST_TEST(names(transport.wire()) == std::vector<std::string>{"fine"},
             boost::test_tools::per_element());
  const auto dead = store->dead_letters(10);
  BOOST_TEST_REQUIRE(dead.size() == 1u);
  BOOST_TEST(dead.front().msg.event_type == "poison");
  BOOST_TEST(dead.front().last_error.find("never settled") != std::string::npos);
}

// Break-it finding: a relay that died in a later batch of a transaction larger than a batch
// started again at the transaction's first event (the slot moves by whole transactions), sent
// its first batches again each time, and charged the claim to the first batch, which was
// dead-lettered after the retry policy's attempts though delivered each time, while the crash
// loop went on. The relay keeps how far into the transaction it settled (outbox_tail_positions),
// skips that much when the stream shows it again, and counts claims where the batch starts.
BOOST_FIXTURE_TEST_CASE(a_relay_dying_late_in_a_large_transaction_resumes_after_what_it_settled,
                        tailing_fixture) {
  std::vector<std::pair<std::string, std::string>> large;
  for (int i = 0; i < 40; ++i) large.push_back({std::to_string(i), "e" + std::to_string(i)});
  write(large);
  auto table = open_session();
  std::vector<outbox::settlement> published(10);
  for (auto& f : published) f.what = outbox::settlement::kind::published;
  const auto now = [] { return outbox::system_clock{}.now(); };
  {
    auto store = make_tailing(*table);
    auto first = claim_some(*store, 10);
    BOOST_TEST_REQUIRE(first.size() == 10u);
    BOOST_TEST(first.messages.front().event_type == "e0");
    BOOST_TEST(first.messages.front().attempts == 1);
    BOOST_TEST(store->settle(first, published, now()).published == 10u);
    // A stream started again in the same relay (a release, a lost connection) skips them too.
    store->release(claim_some(*store, 10));
    auto second = claim_some(*store, 10);
    BOOST_TEST_REQUIRE(second.size() == 10u);
    BOOST_TEST(second.messages.front().event_type == "e10");
    BOOST_TEST(second.messages.front().attempts == 1);
    BOOST_TEST(store->settle(second, published, now()).published == 10u);
    auto third = claim_some(*store, 10);  // then "dies" publishing the third, each time
    BOOST_TEST_REQUIRE(third.size() == 10u);
    BOOST_TEST(third.messages.front().event_type == "e20");
  }
  // The slot still stands before the transaction; the relays start at its 21st event, and the
  // claims there count (from the first relay that starts there: the one that died there first
  // had claimed it as a later batch), so the fourth is past the retry policy's three.
  for (int crash = 0; crash < 3; ++crash) {
    auto store = make_tailing(*table);
    auto b = claim_some(*store, 10);
    BOOST_TEST_REQUIRE(b.size() == 10u);
    BOOST_TEST(b.messages.front().event_type == "e20");
    BOOST_TEST(b.messages.front().attempts == crash + 1);
  }
  auto store = make_tailing(*table);
  outbox::testing::memory_transport transport({.record = true});
  outbox::relay r(*store, transport, outbox::relay_options{.batch_size = 10},
                  outbox::exponential_backoff{.initial = 50ms, .jitter = 0, .max_attempts = 3});
  BOOST_TEST_REQUIRE(relay_until(r, transport, 10));
  std::vector<std::string> rest;
  for (int i = 30; i < 40; ++i) rest.push_back("e" + std::to_string(i));
  BOOST_TEST(names(transport.wire()) == rest, boost::test_tools::per_element());
  const auto dead = store->dead_letters(20);
  BOOST_TEST_REQUIRE(dead.size() == 10u);  // e20..e29, unsent
  BOOST_TEST(dead.front().msg.event_type == "e20");
  BOOST_TEST(dead.front().last_error.find("never settled") != std::string::npos);
  // The whole transaction settled: the slot moves past it, and the row says so.
  BOOST_TEST(eventually([&] {
    r.run_once();
    return count(*table, "SELECT count(*) FROM outbox_tail_positions WHERE slot = '" + opts.slot +
                             "' AND within_end = 0 AND settled > 0 AND settled <= " +
                             std::to_string(store->settled_position())) == 1;
  }));
  store->close();
}

// Break-it finding: while the table had due rows, the stream was not read at all.
BOOST_FIXTURE_TEST_CASE(a_backlog_of_retries_does_not_hold_back_other_aggregates, tailing_fixture) {
  auto table = open_session();
  auto store = make_tailing(*table);
  outbox::testing::memory_transport inner({.record = true});
  outbox::testing::faulty_transport<outbox::testing::memory_transport> transport(inner);
  outbox::testing::manual_clock clock;
  outbox::relay r(*store, transport, outbox::relay_options{.batch_size = 20},
                  outbox::exponential_backoff{.initial = 50ms, .jitter = 0}, clock);
  transport.fail_next(1);
  std::vector<std::pair<std::string, std::string>> a;
  for (int i = 0; i < 200; ++i) a.emplace_back("A", "a" + std::to_string(i));
  write(a);  // the first fails: the other 199 go to the table behind it
  BOOST_TEST_REQUIRE(eventually([&] {
    r.run_once();
    return table_rows(*table, "state = 0") == 200u;
  }));
  write({{"B", "b1"}});
  // b1 waits in the relay's socket (its stream has sent it) before the retry falls due: the
  // stream and the table's 200 rows of A then take turns from the first claim.
  BOOST_TEST_REQUIRE(sent_up_to(wal_now()));
  clock.advance(100ms);  // the retry is due: 200 rows of A in the table
  BOOST_TEST_REQUIRE(relay_until(r, inner, 201));
  const auto wire = inner.wire();
  const auto b = std::find_if(wire.begin(), wire.end(),
                              [](const outbox::message& m) { return m.aggregate_id == "B"; });
  const auto at = b - wire.begin();
  BOOST_TEST_REQUIRE(at < static_cast<std::ptrdiff_t>(wire.size()));
  BOOST_TEST(at < 60, "b1 went out as message " << at);
}

// Break-it finding: a retry from the stream waited for the table's poll (1 s), not its time.
BOOST_FIXTURE_TEST_CASE(a_retry_is_looked_at_when_it_is_due, tailing_fixture) {
  auto table = open_session();
  auto store = make_tailing(*table);
  outbox::testing::memory_transport inner({.record = true});
  outbox::testing::faulty_transport<outbox::testing::memory_transport> transport(inner);
  outbox::testing::manual_clock clock;
  outbox::relay r(*store, transport, outbox::relay_options{},
                  outbox::exponential_backoff{.initial = 50ms, .jitter = 0}, clock);
  transport.fail_next(1);
  write({{"1", "once"}});
  BOOST_TEST_REQUIRE(eventually([&] {
    r.run_once();
    return table_rows(*table, "state = 0") == 1u;
  }));
  for (int i = 0; i < 3; ++i) r.run_once();  // not due yet: nothing (and the table looked at)
  BOOST_TEST(inner.wire().empty());
  clock.advance(60ms);  // due, far before table_poll (1 s) on this clock
  r.run_once();
  BOOST_TEST(names(inner.wire()) == std::vector<std::string>{"once"},
             boost::test_tools::per_element());
}

// Break-it finding: names PostgreSQL would read as a keyword or a number failed as syntax
// errors, retried forever; a second stream on a busy slot is passing, not permanent.
BOOST_FIXTURE_TEST_CASE(any_valid_name_works_and_a_busy_slot_is_transient, tailing_fixture) {
  auto admin = open_session();
  tailing_options odd = opts;
  odd.slot = "9" + opts.slot;
  odd.publication = "select";
  BOOST_TEST(tailing_store::setup(*admin, odd));
  {
    auto t1 = open_session();
    auto t2 = open_session();
    tailing_store first(connect_string(), *t1, odd), second(connect_string(), *t2, odd);
    write({{"1", "odd"}});
    auto b = claim_some(first);
    BOOST_TEST_REQUIRE(!b.empty());
    try {
      (void)claim_now(second);
      BOOST_ERROR("a second stream on a busy slot opened");
    } catch (const outbox::error& e) {
      BOOST_TEST(e.code() == outbox::errc::transient);
      BOOST_TEST(e.native_code() == "55006");
    }
    try {
      tailing_store::drop(*admin, odd);
      BOOST_ERROR("a busy slot was dropped");
    } catch (const outbox::error& e) {
      BOOST_TEST(e.code() == outbox::errc::transient);
    }
  }
  BOOST_TEST(eventually([&] {
    try {
      tailing_store::drop(*admin, odd, true);
      return true;
    } catch (const outbox::error&) {
      return false;
    }
  }));
}

BOOST_FIXTURE_TEST_CASE(concurrent_transactions_arrive_in_commit_order, tailing_fixture) {
  // Each transaction writes an event, then takes a ticket from a counter row (its lock is held
  // until the commit, so transactions commit in ticket order, whatever order they began or
  // wrote in), then writes a second event carrying the ticket. The relay runs meanwhile.
  auto setup_sql = open_session();
  *setup_sql << "CREATE TABLE tickets (n integer NOT NULL)";
  *setup_sql << "INSERT INTO tickets VALUES (0)";
  auto table = open_session();
  auto store = make_tailing(*table);
  outbox::testing::memory_transport transport({.record = true});
  outbox::relay r(*store, transport, outbox::relay_options{.batch_size = 37});
  std::jthread relay_thread([&](std::stop_token stop) { r.run(stop); });

  constexpr int writers = 4, per_writer = 60;
  {
    std::vector<std::jthread> threads;
    for (int w = 0; w < writers; ++w)
      threads.emplace_back([&, w] {
        auto sql = open_session();
        outbox::writer<tailing_store> writer;
        for (int i = 0; i < per_writer; ++i) {
          soci::transaction tx(*sql);
          const std::string agg = std::to_string(w);
          writer.enqueue(*sql, outbox::event{"order", agg, "pre", "{}"});
          int ticket = 0;
          *sql << "UPDATE tickets SET n = n + 1 RETURNING n", soci::into(ticket);
          writer.enqueue(
              *sql, outbox::event{"order", agg, "post", std::to_string(ticket), {}, "text/plain"});
          tx.commit();
        }
      });
  }
  BOOST_TEST_REQUIRE(
      eventually([&] { return transport.wire().size() >= 2 * writers * per_writer; }));
  relay_thread.request_stop();
  relay_thread.join();
  const auto wire = transport.wire();
  BOOST_TEST(wire.size() == 2u * writers * per_writer);
  int last = 0;
  for (std::size_t i = 0; i + 1 < wire.size(); i += 2) {
    BOOST_TEST_REQUIRE(wire[i].event_type == "pre");
    BOOST_TEST_REQUIRE(wire[i + 1].event_type == "post");
    BOOST_TEST_REQUIRE(wire[i].aggregate_id == wire[i + 1].aggregate_id);
    const int ticket = std::stoi(wire[i + 1].payload);
    BOOST_TEST_REQUIRE(ticket == last + 1);  // commit order, nothing missing or doubled
    last = ticket;
  }
}

// Issue 31.2: a publication that did not carry the outbox table was accepted; pgoutput passed
// table mode's rows over without a word and the slot moved past them. setup and each stream
// opened refuse it, naming the publication and the table, and relay::run stops on it.
BOOST_FIXTURE_TEST_CASE(a_publication_without_the_outbox_table_is_refused_and_stops_the_relay,
                        tailing_fixture) {
  auto admin = open_session();
  const std::string table = outbox_table(*admin);
  *admin << "CREATE TABLE other (id integer)";
  *admin << "ALTER PUBLICATION " + opts.publication + " SET TABLE other";
  const auto refused = [&](const outbox::error& e) {
    BOOST_TEST_MESSAGE(e.what());
    return names_publication_and_table(e, table);
  };
  BOOST_CHECK_EXCEPTION((void)tailing_store::setup(*admin, opts), outbox::error, refused);
  auto sql = open_session();
  auto store = make_tailing(*sql);
  BOOST_CHECK_EXCEPTION((void)claim_now(*store), outbox::error, refused);

  outbox::testing::memory_transport transport({.record = true});
  outbox::relay r(*store, transport);
  const auto stop = run_until_it_stops(r);
  BOOST_TEST(stop.ended);
  BOOST_TEST(stop.misconfigured);
  BOOST_TEST(stop.what.find(table) != std::string::npos);
  BOOST_TEST(r.stats().errors == 0u);  // stopped at once, not retried

  // Repaired: the same store streams.
  *admin << "ALTER PUBLICATION " + opts.publication + " SET TABLE outbox";
  BOOST_TEST(!tailing_store::setup(*admin, opts));
  write({{"1", "after"}});
  BOOST_TEST_REQUIRE(relay_until(r, transport, 1));
  BOOST_TEST(names(transport.wire()) == std::vector<std::string>{"after"},
             boost::test_tools::per_element());
  store->close();
}

// The other publications that would pass table mode's rows over: no INSERTs, a row filter, a
// column list without the relay's columns, none at all, one made by setup on a session whose
// search_path resolves outbox to another schema's table.
BOOST_FIXTURE_TEST_CASE(each_publication_that_would_pass_rows_over_is_refused, tailing_fixture) {
  auto admin = open_session();
  const std::string table = outbox_table(*admin);
  const std::string pub = opts.publication;
  auto sql = open_session();
  auto store = make_tailing(*sql);
  const auto refused_because = [&](const std::string& why) {
    try {
      (void)claim_now(*store);
      BOOST_ERROR("accepted: " << why);
    } catch (const outbox::error& e) {
      BOOST_TEST_MESSAGE(e.what());
      BOOST_TEST(names_publication_and_table(e, table), why << ": " << e.what());
    }
  };
  *admin << "ALTER PUBLICATION " + pub + " SET (publish = 'update, delete')";
  refused_because("no inserts");
  *admin << "ALTER PUBLICATION " + pub + " SET (publish = 'insert')";
  *admin << "ALTER PUBLICATION " + pub + " SET TABLE outbox WHERE (state = 0)";
  refused_because("a row filter");
  *admin << "ALTER PUBLICATION " + pub + " SET TABLE outbox (seq, event_id, state)";
  refused_because("a column list");
  *admin << "DROP PUBLICATION " + pub;
  refused_because("no publication");

  // setup on another search path made it for that schema's outbox table.
  auto other = open_unmigrated_session();
  outbox::postgresql::store::migrate(*other);
  BOOST_TEST(!tailing_store::setup(*other, opts));  // the slot was there: only the publication
  refused_because("another schema's table");
  BOOST_CHECK_THROW((void)tailing_store::setup(*admin, opts), outbox::error);

  *admin << "ALTER PUBLICATION " + pub + " SET TABLE outbox";
  // PostgreSQL 15's pgoutput cannot decode a change written while its publication did not exist
  // (ERROR "publication ... does not exist" in the change callback: misconfigured), so, as an
  // operator must, move the slot past that WAL once no stream holds it
  // (adapters/postgresql/README.md).
  BOOST_TEST_REQUIRE(eventually([&] {
    return count(*admin, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '" +
                             opts.slot + "' AND NOT active") == 1;
  }));
  *admin << "SELECT 1 FROM pg_replication_slot_advance('" + opts.slot + "', pg_current_wal_lsn())";
  BOOST_TEST(claim_now(*store).empty());  // accepted again
  store->close();
}

// Issue 31.2, the scenario: five table-mode events committed while the publication did not
// carry the outbox table; a relay refuses to run; once the publication is repaired, a relay
// started again publishes all five (the stream never shows them: the server decodes them with
// the publication of their time), each once.
BOOST_FIXTURE_TEST_CASE(rows_written_while_the_publication_lacked_the_table_go_out_once_repaired,
                        tailing_fixture) {
  using table_mode = tailing_store::table_mode;
  auto admin = open_session();
  *admin << "CREATE TABLE other (id integer)";
  *admin << "ALTER PUBLICATION " + opts.publication + " SET TABLE other";
  write<table_mode>({{"1", "e1"}, {"2", "e2"}, {"3", "e3"}, {"1", "e4"}, {"4", "e5"}});
  BOOST_TEST_REQUIRE(table_rows(*admin, "state = 3") == 5u);
  outbox::testing::memory_transport transport({.record = true});
  {
    auto sql = open_session();
    auto store = make_tailing(*sql);
    outbox::relay r(*store, transport);
    const auto stop = run_until_it_stops(r);
    BOOST_TEST(stop.ended);
    BOOST_TEST(stop.misconfigured);
    BOOST_TEST(transport.wire().empty());
    store->close();
  }
  *admin << "ALTER PUBLICATION " + opts.publication + " SET TABLE outbox";
  auto sql = open_session();
  auto store = make_tailing(*sql);
  outbox::relay r(*store, transport);
  BOOST_TEST_REQUIRE(relay_until(r, transport, 5));
  BOOST_TEST_REQUIRE(relay_through_sentinel(r, transport));  // and nothing else came
  BOOST_TEST(names(transport.wire()) ==
                 (std::vector<std::string>{"e1", "e2", "e3", "e4", "e5", "sentinel"}),
             boost::test_tools::per_element());
  BOOST_TEST(table_rows(*admin, "state IN (0, 3)") == 0u);
  BOOST_TEST(store->stranded_rows() == 5u);
  store->close();
}

// The safety net without a restart: a publication wrong only while the rows were written (the
// relay streaming all along) costs them nothing. The rows the stream passed over are made
// pending rows of the table once the relay's position is past them, and go out from there.
BOOST_FIXTURE_TEST_CASE(rows_the_stream_passed_over_go_out_from_the_table_without_a_restart,
                        tailing_fixture) {
  using table_mode = tailing_store::table_mode;
  auto admin = open_session();
  *admin << "CREATE TABLE other (id integer)";
  std::vector<std::string> reports;
  tailing_options o = opts;
  o.on_stranded = [&](const outbox::error& e) { reports.emplace_back(e.what()); };
  auto sql = open_session();
  tailing_store store(connect_string(), *sql, o);
  outbox::testing::memory_transport transport({.record = true});
  outbox::relay r(store, transport);
  write<table_mode>({{"1", "first"}});
  BOOST_TEST_REQUIRE(relay_until(r, transport, 1));  // the stream is open, the publication right
  *admin << "ALTER PUBLICATION " + opts.publication + " SET TABLE other";
  write<table_mode>({{"1", "e1"}, {"2", "e2"}, {"3", "e3"}});
  write<table_mode>({{"1", "e4"}, {"4", "e5"}});
  *admin << "ALTER PUBLICATION " + opts.publication + " SET TABLE outbox";
  write<table_mode>({{"5", "streamed"}});
  BOOST_TEST_REQUIRE(relay_until(r, transport, 7));
  BOOST_TEST_REQUIRE(relay_through_sentinel(r, transport));
  auto wire = names(transport.wire());
  BOOST_TEST(wire.size() == 8u);
  for (const char* n : {"first", "e1", "e2", "e3", "e4", "e5", "streamed", "sentinel"})
    BOOST_TEST(std::count(wire.begin(), wire.end(), n) == 1, n << " went out once");
  // Among themselves the passed-over rows keep their order (of aggregate 1: e1 before e4).
  const auto at = [&](const char* n) {
    return std::find(wire.begin(), wire.end(), n) - wire.begin();
  };
  BOOST_TEST(at("e1") < at("e4"));
  BOOST_TEST(table_rows(*admin, "state IN (0, 3)") == 0u);
  BOOST_TEST(store.stranded_rows() == 5u);
  BOOST_TEST_REQUIRE(reports.size() == 1u);
  BOOST_TEST(reports.front().find("5 table-mode event(s)") != std::string::npos);
  store.close();
}

// The publication changed under a running relay and left so: the rows passed over are made
// pending rows, and the publication checked again stops the relay; they wait in the table
// (stats' pending) and go out once it is repaired.
BOOST_FIXTURE_TEST_CASE(a_publication_changed_under_a_running_relay_stops_it_rows_kept,
                        tailing_fixture) {
  using table_mode = tailing_store::table_mode;
  auto admin = open_session();
  const std::string table = outbox_table(*admin);
  *admin << "CREATE TABLE other (id integer)";
  outbox::testing::memory_transport transport({.record = true});
  {
    auto sql = open_session();
    auto store = make_tailing(*sql);
    outbox::relay r(*store, transport);
    write({{"0", "first"}});
    BOOST_TEST_REQUIRE(relay_until(r, transport, 1));
    *admin << "ALTER PUBLICATION " + opts.publication + " SET TABLE other";
    write<table_mode>({{"1", "e1"}, {"2", "e2"}});
    const auto stop = run_until_it_stops(r);
    BOOST_TEST(stop.ended);
    BOOST_TEST(stop.misconfigured);
    BOOST_TEST(stop.what.find(table) != std::string::npos);
    BOOST_TEST(stop.what.find("2 table-mode event(s)") != std::string::npos);
    BOOST_TEST(store->stats(outbox::system_clock{}.now()).pending == 2);
    store->close();
  }
  BOOST_TEST(table_rows(*admin, "state = 0") == 2u);
  *admin << "ALTER PUBLICATION " + opts.publication + " SET TABLE outbox";
  auto sql = open_session();
  auto store = make_tailing(*sql);
  outbox::relay r(*store, transport);
  BOOST_TEST_REQUIRE(relay_until(r, transport, 3));
  BOOST_TEST_REQUIRE(relay_through_sentinel(r, transport));
  BOOST_TEST(names(transport.wire()) == (std::vector<std::string>{"first", "e1", "e2", "sentinel"}),
             boost::test_tools::per_element());
  store->close();
}

// stats() counts table mode's rows that wait unpublished longer than streamed_grace (they are
// not in `pending`: no claim of the table takes them), and the oldest one's age.
BOOST_FIXTURE_TEST_CASE(stats_count_table_mode_rows_left_unpublished, tailing_fixture) {
  using table_mode = tailing_store::table_mode;
  auto admin = open_session();
  const auto none = tailing_store::streamed(*admin, outbox::system_clock{}.now());
  BOOST_TEST(none.unpublished == 0);
  BOOST_TEST(none.oldest_age.count() == 0);
  write<table_mode>({{"1", "old1"}, {"2", "old2"}, {"3", "old3"}});
  *admin << "UPDATE outbox SET created_at = created_at - interval '5 minutes' WHERE state = 3";
  write<table_mode>({{"4", "fresh"}});
  auto sql = open_session();
  auto store = make_tailing(*sql);
  const auto now = outbox::system_clock{}.now();
  const auto s = store->stats(now);
  BOOST_TEST(s.streamed_unpublished == 3);
  BOOST_TEST(s.oldest_streamed_age.count() >= 240'000);
  BOOST_TEST(s.pending == 0);
  const auto direct = tailing_store::streamed(*admin, now);
  BOOST_TEST(direct.unpublished == 3);
  BOOST_TEST(direct.oldest_age.count() >= 240'000);
  // The polling store of the same table: 0 (a field of the log-tailing store's).
  BOOST_TEST(store->table().stats(now).streamed_unpublished == 0);
}

// Break-it finding (D2): a dead letter requeued by another process (`outbox requeue`) was
// learned of at the relay's next look at the table, and the stream published its aggregate's
// later events before it meanwhile. A stream batch asks the table first.
BOOST_FIXTURE_TEST_CASE(a_dead_letter_requeued_elsewhere_goes_before_its_aggregates_next_events,
                        tailing_fixture) {
  opts.table_poll = 1h;  // the table is looked at only when the store knows something is due
  auto table = open_session();
  auto store = make_tailing(*table);
  order_log log;
  write({{"X", "x1"}});
  const auto first = claim_some(*store);
  BOOST_TEST_REQUIRE(names(first.messages) == std::vector<std::string>{"x1"},
                     boost::test_tools::per_element());
  std::vector<outbox::settlement> dead(1);
  dead[0] = {.what = outbox::settlement::kind::dead, .error = "refused"};
  BOOST_TEST(store->settle(first, dead, outbox::system_clock{}.now()).dead == 1u);
  write({{"X", "x2"}});  // a dead letter holds nothing back
  BOOST_TEST_REQUIRE(log.hand_out_until(*store, "x2"));
  // The operator requeues x1 on a session of its own; x3 is written after.
  auto other = open_session();
  BOOST_TEST_REQUIRE(make_store(*other)->requeue(first.messages.front().id));
  write({{"X", "x3"}});
  BOOST_TEST_REQUIRE(log.hand_out_until(*store, "x3"));
  BOOST_TEST(log.handed_out == (std::vector<std::string>{"x2", "x1", "x3"}),
             boost::test_tools::per_element());
}

// Seen in the fault harness (two relays sharing the slot, relay kills, a broker outage):
// an aggregate's early events published 5 s after its later ones. A relay read the parked
// aggregates as its stream opened, then the relay holding the slot parked a failed event and
// confirmed the slot past it before it went: the new stream started past that event, and its
// aggregate's next events went out from the stream while it waited in the table.
BOOST_FIXTURE_TEST_CASE(a_stream_opened_past_an_event_another_relay_parked_waits_behind_it,
                        tailing_fixture) {
  const auto now = [] { return outbox::system_clock{}.now(); };
  write({{"X", "x1"}});
  auto table_a = open_session();
  auto a = make_tailing(*table_a);
  const auto batch_a = claim_some(*a);
  BOOST_TEST_REQUIRE(names(batch_a.messages) == std::vector<std::string>{"x1"},
                     boost::test_tools::per_element());
  // The second relay's replication connection goes through a proxy that holds it: the relay
  // has read the table (nothing parked) and waits for its stream to open.
  outbox::test::tcp_proxy proxy(server_port());
  proxy.freeze_connection(0);
  auto table_b = open_session();
  tailing_store b(connect_string() + " host=127.0.0.1 port=" + std::to_string(proxy.port()),
                  *table_b, opts);
  std::exception_ptr failed;
  std::thread opening([&] {
    try {
      (void)claim_now(b);
    } catch (...) {
      failed = std::current_exception();
    }
  });
  struct joined {
    std::thread& t;
    outbox::test::tcp_proxy& p;
    ~joined() {
      p.thaw_connection(0);
      if (t.joinable()) t.join();
    }
  } join_at_end{opening, proxy};
  BOOST_TEST_REQUIRE(eventually([&] { return proxy.holds_back(0); }));
  // Meanwhile the first relay's publish of x1 failed: x1 waits in the table for a retry an
  // hour away, and the slot is confirmed past it; then that relay goes.
  std::vector<outbox::settlement> retry(1);
  retry[0] = {.what = outbox::settlement::kind::retry, .retry_at = now() + 1h, .error = "away"};
  BOOST_TEST(a->settle(batch_a, retry, now()).retried == 1u);
  auto admin = open_session();
  BOOST_TEST_REQUIRE(eventually([&] {
    return count(*admin, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '" +
                             opts.slot + "' AND confirmed_flush_lsn - '0/0'::pg_lsn >= " +
                             std::to_string(a->settled_position())) == 1;
  }));
  a->close();
  write({{"X", "x2"}});
  proxy.thaw_connection(0);
  opening.join();
  if (failed) std::rethrow_exception(failed);
  // The stream shows x2 only (it starts past x1); x2 waits behind x1, due in an hour.
  order_log log;
  BOOST_TEST_REQUIRE(eventually([&] {
    log.hand_out(b, now());
    return !log.handed_out.empty() || table_rows(*admin, "event_type = 'x2' AND state = 0") == 1u;
  }));
  BOOST_TEST(log.handed_out.empty());
  BOOST_TEST_REQUIRE(log.hand_out_until(b, "x2", 2h));
  BOOST_TEST(log.handed_out == (std::vector<std::string>{"x1", "x2"}),
             boost::test_tools::per_element());
  b.close();
}

BOOST_AUTO_TEST_SUITE_END()

// The bytes alone: the event as the writer emits it, and the replication protocol's frames.
BOOST_AUTO_TEST_SUITE(wal_format)

namespace wal = outbox::postgresql::detail::wal;

BOOST_AUTO_TEST_CASE(an_event_round_trips_and_any_truncation_is_a_reason_not_a_crash) {
  outbox::event e{"order",
                  "42",
                  "placed",
                  std::string("\0\x01bin\xff", 6),
                  {{"trace", "abc"}},
                  "application/octet-stream"};
  const outbox::outgoing row{outbox::make_uuid_v7(), &e, outbox::headers_to_json(e.headers),
                             outbox::system_clock{}.now()};
  const std::string bytes = wal::encode_event(row);
  outbox::message m;
  BOOST_TEST(wal::decode_event(bytes, m).empty());
  BOOST_TEST(m.id == row.id);
  BOOST_TEST(m.payload == e.payload);
  BOOST_TEST(m.content_type == e.content_type);
  BOOST_TEST(m.headers.at("trace") == "abc");
  BOOST_TEST(m.aggregate_id == "42");
  BOOST_TEST(std::chrono::duration_cast<std::chrono::microseconds>(m.created_at - row.created_at)
                 .count() == 0);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    outbox::message part;
    BOOST_TEST(!wal::decode_event(std::string_view(bytes).substr(0, n), part).empty());
  }
  outbox::message longer;
  BOOST_TEST(!wal::decode_event(bytes + "x", longer).empty());
  // A JSON content type with a payload that is not JSON text is refused as stored data is.
  outbox::event j{"order", "1", "placed", "{}"};
  const outbox::outgoing jrow{outbox::make_uuid_v7(), &j, "{}", {}};
  std::string bad = wal::encode_event(jrow);
  bad.back() = '\xff';  // the payload's last byte: invalid UTF-8
  outbox::message bm;
  BOOST_TEST(!wal::decode_event(bad, bm).empty());
}

BOOST_AUTO_TEST_CASE(pgoutput_messages_decode_and_truncated_ones_are_refused) {
  std::string begin = "B";
  wal::put(begin, 0x1122334455667788ULL, 8);
  wal::put(begin, 0, 8);
  wal::put(begin, 7, 4);
  const auto b = wal::decode_pgoutput(begin);
  BOOST_TEST_REQUIRE(b.has_value());
  BOOST_TEST(b->final_lsn == 0x1122334455667788ULL);
  BOOST_TEST(b->xid == 7u);
  BOOST_TEST(!wal::decode_pgoutput(begin.substr(0, 10)).has_value());
  std::string msg = "M";
  msg.push_back(1);
  wal::put(msg, 5, 8);
  msg += std::string("outbox") + '\0';
  wal::put(msg, 3, 4);
  msg += "abc";
  const auto m = wal::decode_pgoutput(msg);
  BOOST_TEST_REQUIRE(m.has_value());
  BOOST_TEST(m->transactional);
  BOOST_TEST(m->prefix == "outbox");
  BOOST_TEST(m->content == "abc");
  BOOST_TEST(!wal::decode_pgoutput(msg.substr(0, msg.size() - 1)).has_value());
  BOOST_TEST(wal::decode_pgoutput("Y\x01").has_value());   // other kinds are skipped, not read
  BOOST_TEST(!wal::decode_pgoutput("R\x01").has_value());  // a truncated relation is refused
  const std::string status = wal::status_update(0x10, 0);
  BOOST_TEST(status.size() == 34u);
  BOOST_TEST(status[0] == 'r');
  BOOST_TEST(wal::format_lsn(0x16B374D848ULL) == "16/B374D848");
}

BOOST_AUTO_TEST_SUITE_END()

OUTBOX_TEST_MAIN_REQUIRING("OUTBOX_TEST_POSTGRESQL")
