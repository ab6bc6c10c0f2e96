#pragma once
// Store conformance suite, written once. A test file defines `store_fixtures` (a std::tuple of
// fixture types) and includes this header inside a Boost.Test module. Capability differences
// are fixture traits; the contract is the concept conformance::store_fixture (fixtures.hpp).
//
// The suite never writes SQL: it observes and manipulates the database through named fixture
// hooks, so a store without SQL (the in-memory one) runs it too. A fixture provides
//   session_type, store_type, name, in_flight_visible, leases_expire, retentions()
//   open_session(), make_store(session[, retention])
//   begin(session) -> pointer to a transaction with commit()/rollback()
//   insert_order(session, id, total)           a business row beside enqueue
//   outbox_rows(session)                       committed outbox rows, any state
//   published_rows(session)                    outbox rows marked published
//   orders(session)                            business rows (insert_order)
//   inbox_rows(session), inbox_dead_rows(session)
//   max_out_attempts(session)                  every outbox row's attempts at the column's max
//   insert_raw(session, event_id, aggregate_id, headers_json)   a row as another program writes it
//   swallow_a_failure_that_aborts_the_transaction(session)
//   raise_transient_sql_error(session)         a failing statement the store classifies transient
// (tests/support/soci_fixture.hpp under tests/<name>/fixture.hpp of the SQL stores;
// tests/support/memory_store_fixture.hpp on a memory_database.)

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include <outbox/concepts/store.hpp>
#include <outbox/consumer.hpp>
#include <outbox/relay.hpp>
#include <outbox/testing/manual_clock.hpp>
#include <outbox/testing/memory_transport.hpp>
#include <outbox/writer.hpp>

#include "../support/errors.hpp"
#include "fixtures.hpp"

namespace conformance {

using namespace std::chrono_literals;

inline outbox::event make_event(std::string agg_id, std::string type = "order_placed",
                                std::string payload = R"({"total":42})") {
  return outbox::event{"order", std::move(agg_id), std::move(type), std::move(payload), {}};
}

/// A delivered message of aggregate ("order", `agg_id`), with a fresh id.
inline outbox::message delivered(std::string agg_id, std::string payload = "{}") {
  outbox::message m;
  m.id = outbox::make_uuid_v7();
  m.aggregate_type = "order";
  m.aggregate_id = std::move(agg_id);
  m.event_type = "placed";
  m.payload = std::move(payload);
  return m;
}

/// Enqueues and commits events through a writer on a fresh application session; `clock` stamps
/// their `created_at`.
template <class Fixture, class Clock = outbox::system_clock>
std::vector<outbox::uuid> commit_events(Fixture& fx, const std::vector<outbox::event>& events,
                                        Clock clock = {}) {
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::writer w(*st, {}, std::move(clock));
  auto tx = Fixture::begin(*sql);
  auto ids = w.enqueue(*sql, events);
  tx->commit();
  return ids;
}

inline outbox::claim_request req(const outbox::testing::manual_clock& clock, std::size_t n = 100,
                                 std::chrono::milliseconds lease = 30s) {
  return outbox::claim_request{"test-relay", n, clock.now(), lease};
}

inline std::vector<outbox::settlement> all(std::size_t n, outbox::settlement::kind k) {
  std::vector<outbox::settlement> v(n);
  for (auto& s : v) s.what = k;
  return v;
}

/// `n` units of varied text (a seeded sequence, so no compression shortens it), each one byte
/// or, with `four_byte`, one 4-byte UTF-8 character; `last` picks the last unit.
inline std::string varied_name(std::size_t n, bool four_byte, int last) {
  std::minstd_rand gen(31);
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    const auto k = static_cast<unsigned>(i + 1 == n ? static_cast<unsigned>(last) : gen() % 26);
    if (four_byte) {  // U+1F600 + k
      out += '\xf0';
      out += '\x9f';
      out += static_cast<char>(0x98 + (k >> 6));
      out += static_cast<char>(0x80 + (k & 0x3f));
    } else {
      out += static_cast<char>('a' + k);
    }
  }
  return out;
}

}  // namespace conformance

using namespace std::chrono_literals;

BOOST_AUTO_TEST_SUITE(store_conformance)

BOOST_AUTO_TEST_CASE_TEMPLATE(models_every_store_concept, Fixture, store_fixtures) {
  // The fixture contract (fixtures.hpp) includes outbox::concepts::store on store_type.
  static_assert(conformance::store_fixture<Fixture>);
  BOOST_TEST(std::string(Fixture::name).size() > 0u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(rollback_leaves_no_event, Fixture, store_fixtures) {
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::writer w(*st);
  {
    auto tx = Fixture::begin(*sql);
    Fixture::insert_order(*sql, "o-1", 10);
    w.enqueue(*sql, conformance::make_event("o-1"));
    tx->rollback();
  }
  BOOST_TEST(Fixture::outbox_rows(*sql) == 0);
  BOOST_TEST(Fixture::orders(*sql) == 0);
  outbox::testing::manual_clock clock;
  BOOST_TEST(st->claim(conformance::req(clock)).empty());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(commit_makes_the_event_claimable_with_every_field, Fixture,
                              store_fixtures) {
  Fixture fx;
  outbox::event e = conformance::make_event("o-7", "order_paid",
                                            R"({"quote":"'; DROP TABLE outbox; --","n":[1,2]})");
  e.headers = {{"trace-id", "abc"}, {"tenant", "caf\xc3\xa9"}};
  const auto ids = conformance::commit_events(fx, {e});
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::manual_clock clock;
  auto batch = st->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(batch.size() == 1u);
  const auto& m = batch.messages.front();
  BOOST_TEST(m.id == ids.front());
  BOOST_TEST(m.id.version() == 7);
  BOOST_TEST(m.aggregate_type == "order");
  BOOST_TEST(m.aggregate_id == "o-7");
  BOOST_TEST(m.event_type == "order_paid");
  // Compared as JSON: a store may normalise the text (PostgreSQL's jsonb does).
  BOOST_TEST((nlohmann::json::parse(m.payload) == nlohmann::json::parse(e.payload)));
  BOOST_TEST((m.headers == e.headers));
  BOOST_TEST(m.attempts == 1);
  BOOST_TEST(Fixture::outbox_rows(*sql) == 1);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(claimed_rows_are_not_claimed_again_while_the_lease_holds, Fixture,
                              store_fixtures) {
  Fixture fx;
  std::vector<outbox::event> events;
  for (int i = 0; i < 10; ++i) events.push_back(conformance::make_event("a-" + std::to_string(i)));
  conformance::commit_events(fx, events);
  auto s1 = fx.open_session();
  auto s2 = fx.open_session();
  auto st1 = fx.make_store(*s1);
  auto st2 = fx.make_store(*s2);
  outbox::testing::manual_clock clock;
  auto b1 = st1->claim(conformance::req(clock, 6));
  auto b2 = st2->claim(conformance::req(clock, 100));
  BOOST_TEST(b1.size() == 6u);
  BOOST_TEST(b2.size() == 4u);
  BOOST_TEST(b1.token != b2.token);
  for (const auto& a : b1.messages)
    for (const auto& b : b2.messages) BOOST_TEST(a.id != b.id);
  clock.advance(29s);
  auto s3 = fx.open_session();
  auto st3 = fx.make_store(*s3);
  BOOST_TEST(st3->claim(conformance::req(clock)).empty());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(an_abandoned_claim_is_claimable_again_and_the_stale_claim_is_fenced,
                              Fixture, store_fixtures) {
  Fixture fx;
  conformance::commit_events(fx, {conformance::make_event("a"), conformance::make_event("b")});
  auto s2 = fx.open_session();
  auto st2 = fx.make_store(*s2);
  outbox::testing::manual_clock clock;
  if constexpr (Fixture::leases_expire) {
    auto s1 = fx.open_session();
    auto st1 = fx.make_store(*s1);
    auto stale = st1->claim(conformance::req(clock, 100, 1s));
    BOOST_TEST_REQUIRE(stale.size() == 2u);
    BOOST_TEST(st2->claim(conformance::req(clock)).empty());
    clock.advance(1500ms);
    auto fresh = st2->claim(conformance::req(clock, 100, 30s));
    BOOST_TEST_REQUIRE(fresh.size() == 2u);
    BOOST_TEST(fresh.messages[0].attempts == 2);  // the abandoned attempt counts
    // The stale relay got its confirms late: it must not settle rows it no longer holds.
    auto r =
        st1->settle(stale, conformance::all(2, outbox::settlement::kind::published), clock.now());
    BOOST_TEST(r.published == 0u);
    BOOST_TEST(r.fenced == 2u);
    auto r2 =
        st2->settle(fresh, conformance::all(2, outbox::settlement::kind::published), clock.now());
    BOOST_TEST(r2.published == 2u);
    BOOST_TEST(r2.fenced == 0u);
  } else {
    // Locking: the claim lives as long as its transaction; a relay whose connection dies
    // frees its batch without waiting for any lease, and its claim leaves no trace.
    {
      auto s1 = fx.open_session();
      auto st1 = fx.make_store(*s1);
      auto held = st1->claim(conformance::req(clock));
      BOOST_TEST_REQUIRE(held.size() == 2u);
      BOOST_TEST(st2->claim(conformance::req(clock)).empty());  // locked, skipped
    }  // the relay is gone: statements, then connection
    // The server ends the dead session in its own time: claimed once it has (bounded: 60 s).
    outbox::claimed_batch fresh;
    const auto until = std::chrono::steady_clock::now() + 60s;
    while (fresh.empty() && std::chrono::steady_clock::now() < until) {
      fresh = st2->claim(conformance::req(clock));
      if (fresh.empty()) std::this_thread::sleep_for(10ms);
    }
    BOOST_TEST_REQUIRE(fresh.size() == 2u);
    BOOST_TEST(fresh.messages[0].attempts == 1);
    auto r2 =
        st2->settle(fresh, conformance::all(2, outbox::settlement::kind::published), clock.now());
    BOOST_TEST(r2.published == 2u);
  }
  BOOST_TEST(st2->stats(clock.now()).pending == 0);
}

// A locking claim holds its transaction through its publish, and pipelined on two sessions
// through the publish of the batch before it too. The server ends a transaction idle for the
// store's idle_in_transaction_timeout (60 s by default); the settle then found the claim gone
// and the batch was published again (MySQL, --publish-timeout 35s pipelined and a broker
// stalled 64 s). A relay that could hold a claim that long is refused; a leasing claim holds
// no transaction.
BOOST_AUTO_TEST_CASE_TEMPLATE(a_relay_whose_locking_claim_could_outlast_the_idle_limit_is_refused,
                              Fixture, store_fixtures) {
  using relay_type = outbox::relay<typename Fixture::store_type, outbox::testing::memory_transport>;
  constexpr bool locking = !Fixture::leases_expire;
  Fixture fx;
  auto s1 = fx.open_session();
  auto s2 = fx.open_session();
  auto st1 = fx.make_store(*s1);
  auto st2 = fx.make_store(*s2);
  outbox::testing::memory_transport t;
  const auto refused = [&](auto make) {
    const auto e = outbox::test::error_of(make);
    if (e) {
      BOOST_TEST((e->kind() == outbox::errc::misconfigured), e->what());
      BOOST_TEST(std::string(e->what()).find("idle_in_transaction_timeout") != std::string::npos,
                 e->what());
    }
    return e.has_value();
  };
  // One batch at a time: 70 s (and a second) of publish.
  BOOST_TEST(refused([&] { relay_type r(*st1, t, {.lease = 80s, .publish_timeout = 70s}); }) ==
             locking);
  BOOST_TEST(!refused([&] { relay_type r(*st1, t, {.lease = 80s, .publish_timeout = 35s}); }));
  // Pipelined on two sessions: 2 x 35 s (and 5 s); not pipelined, 35 s.
  BOOST_TEST(refused([&] {
               relay_type r(*st1, *st2, t, {.lease = 80s, .publish_timeout = 35s});
             }) == locking);
  BOOST_TEST(!refused([&] {
    relay_type r(*st1, *st2, t, {.lease = 80s, .publish_timeout = 35s, .pipeline = false});
  }));
  BOOST_TEST(
      !refused([&] { relay_type r(*st1, *st2, t, {.lease = 70s, .publish_timeout = 35s}); }));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(published_rows_are_kept_or_deleted_by_retention, Fixture,
                              store_fixtures) {
  for (auto retention : Fixture::retentions()) {
    Fixture fx;
    conformance::commit_events(fx, {conformance::make_event("a"), conformance::make_event("b")});
    auto sql = fx.open_session();
    auto st = fx.make_store(*sql, retention);
    outbox::testing::manual_clock clock;
    auto b = st->claim(conformance::req(clock));
    auto r =
        st->settle(b, conformance::all(b.size(), outbox::settlement::kind::published), clock.now());
    BOOST_TEST(r.published == 2u);
    BOOST_TEST(st->claim(conformance::req(clock)).empty());
    const auto rows = Fixture::outbox_rows(*sql);
    if (retention == decltype(retention)::keep) {
      BOOST_TEST(rows == 2);
      BOOST_TEST(Fixture::published_rows(*sql) == 2);
    } else {
      BOOST_TEST(rows == 0);
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_retried_row_waits_for_its_time_and_counts_attempts, Fixture,
                              store_fixtures) {
  Fixture fx;
  conformance::commit_events(fx, {conformance::make_event("a")});
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::manual_clock clock;
  auto b = st->claim(conformance::req(clock));
  std::vector<outbox::settlement> f(1);
  f[0].what = outbox::settlement::kind::retry;
  f[0].retry_at = clock.now() + 2s;
  f[0].error = "broker said no";
  BOOST_TEST(st->settle(b, f, clock.now()).retried == 1u);
  BOOST_TEST(st->claim(conformance::req(clock)).empty());
  clock.advance(1999ms);
  BOOST_TEST(st->claim(conformance::req(clock)).empty());
  clock.advance(2ms);
  auto again = st->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(again.size() == 1u);
  BOOST_TEST(again.messages[0].attempts == 2);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(release_returns_rows_without_counting_an_attempt, Fixture,
                              store_fixtures) {
  Fixture fx;
  conformance::commit_events(fx, {conformance::make_event("a"), conformance::make_event("b")});
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::manual_clock clock;
  auto b = st->claim(conformance::req(clock));
  st->release(b);
  auto again = st->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(again.size() == 2u);
  BOOST_TEST(again.messages[0].attempts == 1);
  BOOST_TEST(again.messages[1].attempts == 1);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(dead_letters_are_kept_listed_and_requeued, Fixture, store_fixtures) {
  Fixture fx;
  const auto ids =
      conformance::commit_events(fx, {conformance::make_event("a"), conformance::make_event("b")});
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::manual_clock clock;
  auto b = st->claim(conformance::req(clock));
  std::vector<outbox::settlement> f(2);
  f[0].what = outbox::settlement::kind::dead;
  f[0].error = "no route to exchange";
  f[1].what = outbox::settlement::kind::published;
  auto r = st->settle(b, f, clock.now());
  BOOST_TEST(r.dead == 1u);
  BOOST_TEST(r.published == 1u);
  BOOST_TEST(st->stats(clock.now()).dead == 1);
  auto dead = st->dead_letters(10);
  BOOST_TEST_REQUIRE(dead.size() == 1u);
  BOOST_TEST(dead[0].msg.id == ids[0]);
  BOOST_TEST(dead[0].last_error == "no route to exchange");
  BOOST_TEST((nlohmann::json::parse(dead[0].msg.payload) == nlohmann::json{{"total", 42}}));
  BOOST_TEST(st->claim(conformance::req(clock)).empty());
  BOOST_TEST(st->requeue(ids[0]));
  BOOST_TEST(!st->requeue(ids[0]));  // no longer dead
  BOOST_TEST(!st->requeue(ids[1]));  // published, never dead
  auto again = st->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(again.size() == 1u);
  BOOST_TEST(again.messages[0].id == ids[0]);
  BOOST_TEST(again.messages[0].attempts == 1);
  BOOST_TEST(st->stats(clock.now()).dead == 0);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(error_texts_survive_the_settle_verbatim, Fixture, store_fixtures) {
  Fixture fx;
  const auto ids =
      conformance::commit_events(fx, {conformance::make_event("a"), conformance::make_event("b")});
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::manual_clock clock;
  auto b = st->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(b.size() == 2u);
  const std::string nasty = R"(quote " backslash \ braces {a,b} 'single' NULL)"
                            "\n caf\xc3\xa9";
  std::vector<outbox::settlement> f(2);
  f[0].what = outbox::settlement::kind::dead;
  f[0].error = nasty;
  f[1].what = outbox::settlement::kind::dead;  // empty text
  auto r = st->settle(b, f, clock.now());
  BOOST_TEST(r.dead == 2u);
  const auto dead = st->dead_letters(10);
  BOOST_TEST_REQUIRE(dead.size() == 2u);
  BOOST_TEST(dead[0].last_error == nasty);
  BOOST_TEST(dead[1].last_error.empty());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_later_event_waits_while_an_earlier_one_of_its_aggregate_is_held,
                              Fixture, store_fixtures) {
  Fixture fx;
  // x1 x2 y1 x3: x2 and x3 must not be claimed while x1 is in flight or waiting for a retry.
  conformance::commit_events(
      fx, {conformance::make_event("x", "e1"), conformance::make_event("x", "e2"),
           conformance::make_event("y", "e1"), conformance::make_event("x", "e3")});
  auto s1 = fx.open_session();
  auto s2 = fx.open_session();
  auto st1 = fx.make_store(*s1);
  auto st2 = fx.make_store(*s2);
  outbox::testing::manual_clock clock;
  auto first = st1->claim(conformance::req(clock, 1));
  BOOST_TEST_REQUIRE(first.size() == 1u);
  BOOST_TEST(first.messages[0].event_type == "e1");
  auto second = st2->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(second.size() == 1u);  // only y1: x2 and x3 wait behind x1
  BOOST_TEST(second.messages[0].aggregate_id == "y");
  st2->settle(second, conformance::all(1, outbox::settlement::kind::published), clock.now());
  std::vector<outbox::settlement> f(1);
  f[0].what = outbox::settlement::kind::retry;
  f[0].retry_at = clock.now() + 5s;
  st1->settle(first, f, clock.now());
  BOOST_TEST(st2->claim(conformance::req(clock)).empty());  // x1 waits for its retry, x2 behind it
  clock.advance(6s);
  auto third = st2->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(third.size() == 3u);  // x1 x2 x3 together, in order
  BOOST_TEST(third.messages[0].event_type == "e1");
  BOOST_TEST(third.messages[1].event_type == "e2");
  BOOST_TEST(third.messages[2].event_type == "e3");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(inbox_reports_a_duplicate_without_aborting_the_transaction, Fixture,
                              store_fixtures) {
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  const auto id = outbox::make_uuid_v7();
  const auto now = std::chrono::system_clock::now();
  {
    auto tx = st->begin();
    BOOST_TEST(st->record_delivery("billing", id, now));
    tx.commit();
  }
  {
    auto tx = st->begin();
    BOOST_TEST(!st->record_delivery("billing", id, now));
    BOOST_TEST(st->record_delivery("shipping", id, now));        // another consumer name
    Fixture::insert_order(st->session(), "after-duplicate", 1);  // still usable
    tx.commit();
  }
  BOOST_TEST(Fixture::inbox_rows(*sql) == 2);
  BOOST_TEST(Fixture::orders(*sql) == 1);
  {
    auto tx = st->begin();  // not committed: rolled back
    BOOST_TEST(st->record_delivery("audit", id, now));
  }
  BOOST_TEST(Fixture::inbox_rows(*sql) == 2);
}

// What the consumer asks before applying a delivery stamped with its predecessor: committed
// records and the open transaction's own count, per consumer name; dead letters count too
// (their successors must not wait for them); a rolled back record does not.
BOOST_AUTO_TEST_CASE_TEMPLATE(inbox_lookup_sees_committed_and_own_records, Fixture,
                              store_fixtures) {
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  static_assert(outbox::concepts::inbox_lookup_store<std::remove_cvref_t<decltype(*st)>>);
  const auto id = outbox::make_uuid_v7();
  const auto now = std::chrono::system_clock::now();
  {
    auto tx = st->begin();
    BOOST_TEST(!st->recorded("billing", id));
    BOOST_TEST(st->record_delivery("billing", id, now));
    BOOST_TEST(st->recorded("billing", id));  // its own transaction's record
  }                                           // rolled back
  {
    auto tx = st->begin();
    BOOST_TEST(!st->recorded("billing", id));
    BOOST_TEST(st->record_delivery("billing", id, now));
    tx.commit();
  }
  {
    auto tx = st->begin();
    BOOST_TEST(st->recorded("billing", id));
    BOOST_TEST(!st->recorded("shipping", id));  // another consumer name
    BOOST_TEST(!st->recorded("billing", outbox::make_uuid_v7()));
    Fixture::insert_order(st->session(), "after-lookup", 1);  // the transaction goes on
    tx.commit();
  }
  BOOST_TEST(Fixture::orders(*sql) == 1);
  const auto m = conformance::delivered("dead");
  st->dead_letter_delivery("billing", m, "handler failed", now);
  auto tx = st->begin();
  BOOST_TEST(st->recorded("billing", m.id));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(purges_run_in_bounded_batches, Fixture, store_fixtures) {
  Fixture fx;
  std::vector<outbox::event> events;
  for (int i = 0; i < 25; ++i) events.push_back(conformance::make_event("p-" + std::to_string(i)));
  conformance::commit_events(fx, events);
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::manual_clock clock;
  auto b = st->claim(conformance::req(clock, 20));
  st->settle(b, conformance::all(b.size(), outbox::settlement::kind::published), clock.now());
  const auto later = std::chrono::system_clock::now() + 1h;
  BOOST_TEST(st->purge_published(later, 8) == 8u);
  BOOST_TEST(st->purge_published(later, 8) == 8u);
  BOOST_TEST(st->purge_published(later, 8) == 4u);
  BOOST_TEST(st->purge_published(later, 8) == 0u);
  BOOST_TEST(Fixture::outbox_rows(*sql) == 5);  // the pending ones stay
  BOOST_TEST(st->purge_published(std::chrono::system_clock::now() - 1h, 8) == 0u);

  const auto old = std::chrono::system_clock::now() - 48h;
  {
    auto tx = st->begin();
    for (int i = 0; i < 5; ++i) st->record_delivery("c", outbox::make_uuid_v7(), old);
    st->record_delivery("c", outbox::make_uuid_v7(), std::chrono::system_clock::now());
    tx.commit();
  }
  const auto cutoff = std::chrono::system_clock::now() - 24h;
  BOOST_TEST(st->purge_inbox(cutoff, 3) == 3u);
  BOOST_TEST(st->purge_inbox(cutoff, 3) == 2u);
  BOOST_TEST(st->purge_inbox(cutoff, 3) == 0u);
  BOOST_TEST(Fixture::inbox_rows(*sql) == 1);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(backlog_stats_count_pending_in_flight_dead_and_age, Fixture,
                              store_fixtures) {
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  const auto empty = st->stats(std::chrono::system_clock::now());
  BOOST_TEST(empty.pending == 0);
  BOOST_TEST(empty.oldest_pending_age.count() == 0);
  std::vector<outbox::event> events;
  for (int i = 0; i < 6; ++i) events.push_back(conformance::make_event("s-" + std::to_string(i)));
  conformance::commit_events(fx, events);
  outbox::testing::manual_clock clock;  // after the commit: the age below is only what we add
  auto b = st->claim(conformance::req(clock, 3));
  std::vector<outbox::settlement> f(3);
  f[0].what = outbox::settlement::kind::dead;
  st->settle(b, f, clock.now());  // one dead, two released
  auto b2 = st->claim(conformance::req(clock, 2));
  BOOST_TEST(b2.size() == 2u);
  clock.advance(10s);
  auto s = st->stats(clock.now());
  if constexpr (Fixture::in_flight_visible) {
    BOOST_TEST(s.pending == 3);
    BOOST_TEST(s.in_flight == 2);
  } else {  // a locking claim writes nothing: its rows still look pending
    BOOST_TEST(s.pending == 5);
    BOOST_TEST(s.in_flight == 0);
  }
  BOOST_TEST(s.dead == 1);
  BOOST_TEST(s.oldest_pending_age >= std::chrono::milliseconds(9'000));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(backlog_stats_count_retries_and_break_down_by_aggregate_type, Fixture,
                              store_fixtures) {
  // Two aggregate types with a row in every state (pending, waiting for a retry, in flight,
  // dead), "audit" with a dead letter only and "payment" with a published row only.
  using kind = outbox::settlement::kind;
  static_assert(outbox::concepts::aggregate_stats_store<typename Fixture::store_type>);
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  BOOST_TEST(st->stats_by_aggregate_type(std::chrono::system_clock::now()).empty());
  // Whole seconds: every store keeps created_at to the millisecond, so the ages are exact.
  outbox::testing::manual_clock clock(
      std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now()));
  const auto ev = [](std::string type, std::string id) {
    return outbox::event{std::move(type), std::move(id), "happened", "{}", {}};
  };
  // "Shipment"'s oldest row is dead-lettered: its oldest pending row is one second younger.
  conformance::commit_events(fx,
                             {ev("payment", "published"), ev("Shipment", "dead"),
                              ev("order", "retry"), ev("audit", "dead")},
                             clock);
  clock.advance(1s);
  conformance::commit_events(fx, {ev("order", "dead"), ev("Shipment", "retry")}, clock);
  clock.advance(1s);
  conformance::commit_events(fx, {ev("order", "flight"), ev("Shipment", "flight")}, clock);
  clock.advance(1s);
  conformance::commit_events(
      fx, {ev("order", "pending-1"), ev("order", "pending-2"), ev("Shipment", "pending-1")}, clock);
  // The first six: each settled as its aggregate id says; the retries are due in an hour.
  auto first = st->claim(conformance::req(clock, 6));
  BOOST_TEST_REQUIRE(first.size() == 6u);
  std::vector<outbox::settlement> fates(first.size());
  for (std::size_t i = 0; i < fates.size(); ++i) {
    const auto& id = first.messages[i].aggregate_id;
    fates[i].what = id == "published" ? kind::published : id == "dead" ? kind::dead : kind::retry;
    fates[i].retry_at = clock.now() + 1h;
    fates[i].error = "refused";
  }
  const auto settled = st->settle(first, fates, clock.now());
  BOOST_TEST(settled.published == 1u);
  BOOST_TEST(settled.dead == 3u);
  BOOST_TEST(settled.retried == 2u);
  // The two "flight" rows, claimed on another session (a locking claim holds its transaction
  // open) under a lease that outlasts the test.
  auto relay_sql = fx.open_session();
  auto relay = fx.make_store(*relay_sql);
  auto flying = relay->claim(conformance::req(clock, 2, 3h));
  BOOST_TEST_REQUIRE(flying.size() == 2u);
  for (const auto& m : flying.messages) BOOST_TEST(m.aggregate_id == "flight");

  clock.advance(57s);  // 60 s after the first rows were written
  // A locking claim writes nothing: its rows count as pending, not in flight.
  const std::int64_t held = Fixture::in_flight_visible ? 1 : 0;
  const auto expect = [&](const outbox::backlog_stats& s, std::int64_t pending,
                          std::int64_t waiting_retry, std::int64_t in_flight, std::int64_t dead,
                          std::int64_t age_ms) {
    BOOST_TEST(s.pending == pending);
    BOOST_TEST(s.waiting_retry == waiting_retry);
    BOOST_TEST(s.in_flight == in_flight);
    BOOST_TEST(s.dead == dead);
    BOOST_TEST(s.oldest_pending_age.count() == age_ms);
  };
  BOOST_TEST_CONTEXT("stats") {
    expect(st->stats(clock.now()), 7 - 2 * held, 2, 2 * held, 3, 60'000);
  }
  auto by_type = st->stats_by_aggregate_type(clock.now());
  BOOST_TEST_REQUIRE(by_type.size() == 3u);  // byte order: upper case first; no "payment"
  BOOST_TEST(by_type[0].aggregate_type == "Shipment");
  BOOST_TEST_CONTEXT("Shipment") { expect(by_type[0].stats, 3 - held, 1, held, 1, 59'000); }
  BOOST_TEST(by_type[1].aggregate_type == "audit");
  BOOST_TEST_CONTEXT("audit") { expect(by_type[1].stats, 0, 0, 0, 1, 0); }
  BOOST_TEST(by_type[2].aggregate_type == "order");
  BOOST_TEST_CONTEXT("order") { expect(by_type[2].stats, 4 - held, 1, held, 1, 60'000); }

  // Once the retries are due they are pending like the rest, no longer waiting.
  clock.advance(1h);
  BOOST_TEST_CONTEXT("stats, retries due") {
    expect(st->stats(clock.now()), 7 - 2 * held, 0, 2 * held, 3, 3'660'000);
  }
  by_type = st->stats_by_aggregate_type(clock.now());
  BOOST_TEST_REQUIRE(by_type.size() == 3u);
  BOOST_TEST_CONTEXT("Shipment, retries due") {
    expect(by_type[0].stats, 3 - held, 0, held, 1, 3'659'000);
  }
  BOOST_TEST_CONTEXT("order, retries due") {
    expect(by_type[2].stats, 4 - held, 0, held, 1, 3'660'000);
  }
  relay->release(flying);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(aggregate_types_are_told_apart_and_sorted_byte_for_byte, Fixture,
                              store_fixtures) {
  // Whatever the database's collation: case and trailing spaces make other types (MySQL's
  // utf8mb4_bin ignores trailing spaces in comparisons), and the order is that of the bytes
  // (a locale would put "Order" after "order" and "\xc3\xa9" before "o").
  Fixture fx;
  const std::vector<std::string> types = {"order ", "\xc3\xa9v\xc3\xa9nement", "order", "Order"};
  std::vector<outbox::event> events;
  for (std::size_t i = 0; i < types.size(); ++i)
    for (std::size_t n = 0; n <= i; ++n)  // i + 1 rows of types[i]
      events.push_back(outbox::event{types[i], "a-" + std::to_string(n), "happened", "{}", {}});
  conformance::commit_events(fx, events);
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  const auto by_type = st->stats_by_aggregate_type(std::chrono::system_clock::now());
  BOOST_TEST_REQUIRE(by_type.size() == 4u);
  BOOST_TEST(by_type[0].aggregate_type == "Order");
  BOOST_TEST(by_type[0].stats.pending == 4);
  BOOST_TEST(by_type[1].aggregate_type == "order");
  BOOST_TEST(by_type[1].stats.pending == 3);
  BOOST_TEST(by_type[2].aggregate_type == "order ");
  BOOST_TEST(by_type[2].stats.pending == 1);
  BOOST_TEST(by_type[3].aggregate_type == types[1]);
  BOOST_TEST(by_type[3].stats.pending == 2);
}

// ---- failure paths (issue 9): each of these failed on some store before its fix ------------

BOOST_AUTO_TEST_CASE_TEMPLATE(a_waiting_aggregate_does_not_hold_back_others_beyond_the_batch_limit,
                              Fixture, store_fixtures) {
  // 600 rows of X behind a head that waits for a retry, then 5 rows of Y: the claim must reach
  // the Y rows. PostgreSQL applied its LIMIT before the per-aggregate filter, so every claim of
  // 500 was all X, filtered away, and came back empty until X's head was resolved.
  Fixture fx;
  std::vector<outbox::event> events;
  for (int i = 0; i < 600; ++i) events.push_back(conformance::make_event("x"));
  for (int i = 0; i < 5; ++i) events.push_back(conformance::make_event("y"));
  conformance::commit_events(fx, events);
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::manual_clock clock;
  auto head = st->claim(conformance::req(clock, 1));
  BOOST_TEST_REQUIRE(head.size() == 1u);
  BOOST_TEST(head.messages[0].aggregate_id == "x");
  std::vector<outbox::settlement> f(1);
  f[0].what = outbox::settlement::kind::retry;
  f[0].retry_at = clock.now() + 60s;
  BOOST_TEST(st->settle(head, f, clock.now()).retried == 1u);
  auto batch = st->claim(conformance::req(clock, 500));
  BOOST_TEST_REQUIRE(batch.size() == 5u);
  for (const auto& m : batch.messages) BOOST_TEST(m.aggregate_id == "y");
  st->settle(batch, conformance::all(batch.size(), outbox::settlement::kind::published),
             clock.now());
  clock.advance(61s);  // X's head is due: X flows again, in order, from its head
  auto xs = st->claim(conformance::req(clock, 500));
  BOOST_TEST_REQUIRE(xs.size() == 500u);
  BOOST_TEST(xs.messages[0].id == head.messages[0].id);
  BOOST_TEST(xs.messages[0].attempts == 2);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(rows_behind_another_relays_batch_do_not_hold_back_other_aggregates,
                              Fixture, store_fixtures) {
  // Relay A holds x1..x10 in an open batch; x11..x40 and then y1..y5 wait. Relay B's claim of 10
  // must reach the y rows. Under locking, A's row locks are invisible to SQL: x11..x20 filled B's
  // LIMIT, were dropped by the per-aggregate check, and B got nothing until A settled.
  Fixture fx;
  std::vector<outbox::event> events;
  for (int i = 0; i < 40; ++i)
    events.push_back(conformance::make_event("x", "x" + std::to_string(i)));
  for (int i = 0; i < 5; ++i)
    events.push_back(conformance::make_event("y", "y" + std::to_string(i)));
  conformance::commit_events(fx, events);
  auto s1 = fx.open_session();
  auto s2 = fx.open_session();
  auto a = fx.make_store(*s1);
  auto b = fx.make_store(*s2);
  outbox::testing::manual_clock clock;
  auto held = a->claim(conformance::req(clock, 10));
  BOOST_TEST_REQUIRE(held.size() == 10u);
  auto mine = b->claim(conformance::req(clock, 10));
  BOOST_TEST_REQUIRE(mine.size() == 5u);
  for (const auto& m : mine.messages) BOOST_TEST(m.aggregate_id == "y");
  b->settle(mine, conformance::all(5, outbox::settlement::kind::published), clock.now());
  a->settle(held, conformance::all(10, outbox::settlement::kind::published), clock.now());
  auto rest = b->claim(conformance::req(clock, 100));  // x11.. in order once A settled
  BOOST_TEST_REQUIRE(rest.size() == 30u);
  BOOST_TEST(rest.messages[0].event_type == "x10");
  BOOST_TEST(rest.messages[29].event_type == "x39");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_scan_limit_bounds_the_rows_a_claim_looks_at, Fixture,
                              store_fixtures) {
  // The relay's claims made ahead (claim_request::scan_limit): 20 rows of x, then 5 of y. A
  // claim that may look at 3 rows takes x0..x2, however large its limit; with those held, one
  // that may look at 10 finds only x rows held back behind them, and nothing; without a bound
  // the claim looks past them to the y rows.
  Fixture fx;
  std::vector<outbox::event> events;
  for (int i = 0; i < 20; ++i)
    events.push_back(conformance::make_event("x", "x" + std::to_string(i)));
  for (int i = 0; i < 5; ++i)
    events.push_back(conformance::make_event("y" + std::to_string(i), "y"));
  conformance::commit_events(fx, events);
  auto s1 = fx.open_session();
  auto s2 = fx.open_session();
  auto a = fx.make_store(*s1);
  auto b = fx.make_store(*s2);
  outbox::testing::manual_clock clock;
  const auto bounded = [&](std::size_t scan) {
    return outbox::claim_request{"test-relay", 100, clock.now(), 30s, scan};
  };
  auto held = a->claim(bounded(3));
  BOOST_TEST_REQUIRE(held.size() == 3u);
  BOOST_TEST(held.messages[0].event_type == "x0");
  BOOST_TEST(held.messages[2].event_type == "x2");
  BOOST_TEST(b->claim(bounded(10)).empty());
  auto ys = b->claim(conformance::req(clock, 100));
  BOOST_TEST_REQUIRE(ys.size() == 5u);
  for (const auto& m : ys.messages) BOOST_TEST(m.event_type == "y");
  b->settle(ys, conformance::all(5, outbox::settlement::kind::published), clock.now());
  a->settle(held, conformance::all(3, outbox::settlement::kind::published), clock.now());
  auto rest_of_x = a->claim(conformance::req(clock, 100));
  BOOST_TEST_REQUIRE(rest_of_x.size() == 17u);
  a->settle(rest_of_x, conformance::all(17, outbox::settlement::kind::published), clock.now());
  // Beside a batch in flight on the other session, the relay's claim ahead looks at one batch
  // plus the batch in flight (a locking store counts its locked rows as claimable): it takes the
  // next batch, not nothing.
  std::vector<outbox::event> more;
  for (int i = 0; i < 6; ++i) more.push_back(conformance::make_event("w" + std::to_string(i), "w"));
  conformance::commit_events(fx, more);
  auto first = a->claim(conformance::req(clock, 3));
  BOOST_TEST_REQUIRE(first.size() == 3u);
  auto next = b->claim(outbox::claim_request{"test-relay", 3, clock.now(), 30s, 3 + 3});
  BOOST_TEST(next.size() == 3u);
  b->settle(next, conformance::all(next.size(), outbox::settlement::kind::published), clock.now());
  a->settle(first, conformance::all(3, outbox::settlement::kind::published), clock.now());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_row_that_cannot_be_read_is_dead_lettered_and_the_rest_flows,
                              Fixture, store_fixtures) {
  // Rows written by another program: headers that are not an object of strings, an empty
  // aggregate id. Each made the whole claim throw (permanent), on every start of the relay.
  Fixture fx;
  conformance::commit_events(fx, {conformance::make_event("a")});
  const auto bad_headers = outbox::make_uuid_v7();
  const auto bad_name = outbox::make_uuid_v7();
  const auto empty_header = outbox::make_uuid_v7();
  {
    auto sql = fx.open_session();
    Fixture::insert_raw(*sql, bad_headers.to_string(), "b", R"({"retries":3})");
    Fixture::insert_raw(*sql, bad_name.to_string(), "", "{}");
    Fixture::insert_raw(*sql, empty_header.to_string(), "e", R"({"":"x"})");
  }
  conformance::commit_events(fx, {conformance::make_event("c")});
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::manual_clock clock;
  auto batch = st->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(batch.size() == 2u);
  BOOST_TEST(batch.messages[0].aggregate_id == "a");
  BOOST_TEST(batch.messages[1].aggregate_id == "c");
  BOOST_TEST(batch.unreadable == 3u);
  BOOST_TEST(
      st->settle(batch, conformance::all(2, outbox::settlement::kind::published), clock.now())
          .published == 2u);
  BOOST_TEST(st->claim(conformance::req(clock)).empty());
  const auto dead = st->dead_letters(10);  // listing them does not fail either
  BOOST_TEST_REQUIRE(dead.size() == 3u);
  BOOST_TEST(dead[0].msg.id == bad_headers);
  BOOST_TEST(dead[0].last_error.find("retries") != std::string::npos, dead[0].last_error);
  BOOST_TEST(dead[1].msg.id == bad_name);
  BOOST_TEST(dead[1].last_error.find("aggregate_id") != std::string::npos, dead[1].last_error);
  BOOST_TEST(dead[2].msg.id == empty_header);
  BOOST_TEST(dead[2].last_error.find("header name is empty") != std::string::npos,
             dead[2].last_error);
  BOOST_TEST(st->stats(clock.now()).dead == 3);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(an_absurd_attempt_count_written_by_another_program_is_claimed_safely,
                              Fixture, store_fixtures) {
  // attempts at the column's maximum: PostgreSQL's claim overflowed computing attempts + 1
  // (22003, every claim, the relay stalled); SQLite's int64 became -1 in an int, published
  // instead of dead-lettered (and UBSan caught the relay's attempts - 1).
  Fixture fx;
  const auto id = conformance::commit_events(fx, {conformance::make_event("a")}).front();
  auto sql = fx.open_session();
  Fixture::max_out_attempts(*sql);
  auto st = fx.make_store(*sql);
  outbox::testing::manual_clock clock;
  auto b = st->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(b.size() == 1u);
  BOOST_TEST(b.messages[0].id == id);
  BOOST_TEST(b.messages[0].attempts == std::numeric_limits<int>::max());
  const outbox::exponential_backoff retry{};
  BOOST_TEST(retry.exhausted(b.messages[0].attempts - 1));  // what the relay checks first
  std::vector<outbox::settlement> f(1);
  f[0].what = outbox::settlement::kind::dead;
  BOOST_TEST(st->settle(b, f, clock.now()).dead == 1u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(dead_lettering_a_delivery_keeps_content_of_any_kind, Fixture,
                              store_fixtures) {
  // What a peer delivered need not be JSON or UTF-8. PostgreSQL's jsonb refused such a payload
  // (22P02) and headers_to_json threw on a header value that was not UTF-8: the delivery was
  // requeued and failed the same way after every restart.
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  auto m = conformance::delivered("1", std::string("not json \xff\x00 bytes", 17));
  m.headers = {{"ok", "v"}, {"binary", "\xff\xfe"}};
  const auto now = std::chrono::system_clock::now();
  BOOST_CHECK_NO_THROW(st->dead_letter_delivery("billing", m, "handler failed", now));
  BOOST_TEST(Fixture::inbox_dead_rows(*sql) == 1);
  auto tx = st->begin();
  BOOST_TEST(!st->record_delivery("billing", m.id, now));  // redeliveries are skipped
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_transaction_aborted_by_a_swallowed_error_does_not_commit, Fixture,
                              store_fixtures) {
  // A handler catches a SQL error and carries on. PostgreSQL then answers COMMIT with the tag
  // ROLLBACK and no error: the consumer acked an effect that was thrown away, and the
  // redelivery applied the handler again.
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  const auto id = outbox::make_uuid_v7();
  {
    auto tx = st->begin();
    BOOST_TEST(st->record_delivery("billing", id, std::chrono::system_clock::now()));
    Fixture::insert_order(st->session(), "effect", 1);
    Fixture::swallow_a_failure_that_aborts_the_transaction(st->session());
    try {
      tx.commit();
      BOOST_ERROR("commit reported success for a transaction that was rolled back");
    } catch (const outbox::error& e) {
      BOOST_TEST((e.kind() == outbox::errc::permanent), e.what());
    }
  }
  BOOST_TEST(Fixture::inbox_rows(*sql) == 0);
  BOOST_TEST(Fixture::orders(*sql) == 0);
  {  // the session is usable afterwards
    auto tx = st->begin();
    BOOST_TEST(st->record_delivery("billing", id, std::chrono::system_clock::now()));
    tx.commit();
  }
  BOOST_TEST(Fixture::inbox_rows(*sql) == 1);
}

// A consumer name the inbox cannot hold failed every delivery (MySQL, strict sql_mode: 1406
// on VARCHAR(255), and the dead-lettering failed the same way, so the delivery came back
// forever; PostgreSQL: a btree entry over 2,704 bytes) or was stored cut (MySQL without strict
// mode: two names sharing their first 255 characters shared one inbox). Such a name, and one
// that is not UTF-8 text, is refused when the consumer is built. The longest name the store
// holds works, and two of them differing in their last unit keep two inboxes.
BOOST_AUTO_TEST_CASE_TEMPLATE(consumer_names_the_inbox_cannot_hold_whole_are_refused, Fixture,
                              store_fixtures) {
  using store_type = typename Fixture::store_type;
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::memory_transport broker;
  const auto handler = [](typename Fixture::session_type&, const outbox::message&) {};
  const auto refused = [&](std::string name) {
    try {
      outbox::consumer c(*st, broker, handler, {.name = std::move(name)});
      return false;
    } catch (const outbox::error& e) {
      BOOST_TEST((e.kind() == outbox::errc::misconfigured), e.what());
      BOOST_TEST(std::string(e.what()).find("consumer_options.name") != std::string::npos,
                 e.what());
      return true;
    }
  };
  BOOST_TEST(refused("billing\xff"));
  BOOST_TEST(refused(std::string("bill\0ing", 8)));
  // The longest name: the store's limit in its unit (characters: 4 bytes of UTF-8 each), or
  // 4,096 bytes where nothing limits it.
  std::size_t longest = 4096;
  bool characters = false;
  if constexpr (outbox::concepts::consumer_name_limited_store<store_type>) {
    longest = store_type::consumer_name_limit.max;
    characters = store_type::consumer_name_limit.characters;
    BOOST_TEST(refused(conformance::varied_name(longest + 1, characters, 0)));
  }
  const std::string a = conformance::varied_name(longest, characters, 0);
  const std::string b = conformance::varied_name(longest, characters, 1);
  const auto m = conformance::delivered("long-names");
  const auto deliver = [&] {
    (void)broker.publish(std::span(&m, 1), std::chrono::steady_clock::now() + 10s);
  };
  using outcome = typename outbox::consumer<store_type, outbox::testing::memory_transport>::outcome;
  outbox::consumer first(*st, broker, handler, {.name = a, .poll_timeout = 10s});
  outbox::consumer second(*st, broker, handler, {.name = b, .poll_timeout = 10s});
  deliver();
  BOOST_TEST((first.poll_once() == outcome::applied));
  deliver();
  BOOST_TEST((second.poll_once() == outcome::applied));  // its own inbox
  deliver();
  BOOST_TEST((first.poll_once() == outcome::duplicate));
  BOOST_TEST(Fixture::inbox_rows(*sql) == 2);
}

// MySQL's inbox compares consumer names with their trailing spaces ignored (utf8mb4_bin is a
// PAD SPACE collation on MariaDB 10.11 and MySQL 8), so "billing-x " shared the inbox of
// "billing-x": it saw an event "billing-x" had applied as a duplicate and never ran its
// handler. A name that ends in a space is refused on every store (a name that works on one
// store works on all); every other name, other trailing white space included, keeps its own.
BOOST_AUTO_TEST_CASE_TEMPLATE(consumer_names_ending_in_a_space_are_refused, Fixture,
                              store_fixtures) {
  using store_type = typename Fixture::store_type;
  using consumer_type = outbox::consumer<store_type, outbox::testing::memory_transport>;
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::memory_transport broker;
  int handled = 0;
  const auto handler = [&](typename Fixture::session_type&, const outbox::message&) { ++handled; };
  const auto m = conformance::delivered("spaces");
  const auto deliver = [&] {
    (void)broker.publish(std::span(&m, 1), std::chrono::steady_clock::now() + 10s);
  };
  consumer_type first(*st, broker, handler, {.name = "billing-x", .poll_timeout = 10s});
  deliver();
  BOOST_TEST((first.poll_once() == consumer_type::outcome::applied));
  for (const std::string name : {"billing-x ", "billing-x   ", " "}) {
    std::optional<consumer_type> c;
    try {
      c.emplace(*st, broker, handler, outbox::consumer_options{.name = name, .poll_timeout = 10s});
    } catch (const outbox::error& e) {
      BOOST_TEST((e.kind() == outbox::errc::misconfigured), e.what());
      BOOST_TEST(std::string(e.what()).find("consumer_options.name") != std::string::npos,
                 e.what());
      continue;
    }
    BOOST_ERROR("the consumer name \"" + name + "\" was accepted");
    if (name.front() == ' ') continue;
    deliver();  // accepted: at least it must keep its own inbox (MySQL: it did not)
    BOOST_TEST((c->poll_once() == consumer_type::outcome::applied), '"' + name + '"');
  }
  // A long one is shown cut, so that the message stays readable.
  const auto long_name = outbox::test::error_of(
      [&] { consumer_type c(*st, broker, handler, {.name = std::string(100'000, 'n') + ' '}); });
  BOOST_TEST_REQUIRE(long_name.has_value());
  BOOST_TEST(std::string_view(long_name->what()).size() < 1024u, long_name->what());
  BOOST_TEST(std::string_view(long_name->what()).find("100001 bytes") != std::string_view::npos);
  // Names only MySQL's PAD SPACE could confuse, were it to pad with more than a space.
  for (const std::string name :
       {"billing-x\t", "billing-x\n", "billing-x\xc2\xa0", " billing-x", "billing x"}) {
    consumer_type c(*st, broker, handler, {.name = name, .poll_timeout = 10s});
    deliver();
    BOOST_TEST((c.poll_once() == consumer_type::outcome::applied), '"' + name + '"');
  }
  BOOST_TEST(handled == 6);
  BOOST_TEST(Fixture::inbox_rows(*sql) == 6);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_handler_sql_error_is_classified_by_its_native_code, Fixture,
                              store_fixtures) {
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  static_assert(outbox::concepts::classifying_store<typename Fixture::store_type>);
  auto tx = st->begin();
  try {
    Fixture::raise_transient_sql_error(st->session());
    BOOST_ERROR("no error raised");
  } catch (const std::exception& e) {
    const auto c = st->classify(e);
    BOOST_TEST_REQUIRE(c.has_value());
    BOOST_TEST((*c == outbox::errc::transient), e.what());
  }
  BOOST_TEST(!st->classify(std::runtime_error("not a database error")).has_value());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_huge_claim_limit_reserves_nothing_up_front, Fixture,
                              store_fixtures) {
  // claim(2^40) on an empty outbox reserved 2^40 messages (std::bad_alloc out of the relay).
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::manual_clock clock;
  BOOST_TEST(st->claim(conformance::req(clock, std::size_t{1} << 40)).empty());
  conformance::commit_events(fx, {conformance::make_event("a")});
  auto b = st->claim(conformance::req(clock, std::size_t{1} << 40));
  BOOST_TEST(b.size() == 1u);
  st->release(b);
}

BOOST_AUTO_TEST_SUITE_END()

#include "store_defer_conformance.hpp"
#include "store_schedule_conformance.hpp"
