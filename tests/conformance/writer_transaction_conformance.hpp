#pragma once
// The writer's transaction (writer::begin), written once for every store: the business rows and
// the events commit together or not at all, whatever fails (the event INSERT, COMMIT, the
// connection between the business statements and COMMIT). Include it after store_conformance.hpp
// in a store's conformance test; its fixtures also provide (concept writer_transaction_fixture):
//   fail_event_inserts(session), heal(session)   the store refuses the next event rows, or not
//   commit_can_fail, fail_commits(session)       COMMIT is refused (where the store can be made to)
//   connection_can_be_cut, fx.cut(session)       the session's connection dropped by the server
//   commit_answer_can_be_lost, lose_commit_answer(session)   COMMIT runs, its answer is lost

#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <outbox/error.hpp>
#include <outbox/writer.hpp>

#include "../support/errors.hpp"
#include "fixtures.hpp"

namespace conformance {

// clang-format off
/// What the writer transaction cases need of a store fixture.
template <class F>
concept writer_transaction_fixture =
    store_fixture<F> && requires(F& fx, typename F::session_type& sql) {
      { F::commit_can_fail } -> std::convertible_to<bool>;
      { F::connection_can_be_cut } -> std::convertible_to<bool>;
      { F::fail_event_inserts(sql) };
      { F::heal(sql) };
    };
// clang-format on

/// What a fresh session sees committed: "orders=N events=M".
template <class Fixture>
std::string committed(Fixture& fx) {
  auto check = fx.open_session();
  return "orders=" + std::to_string(Fixture::orders(*check)) +
         " events=" + std::to_string(Fixture::outbox_rows(*check));
}

/// Runs one writer transaction on a fresh session: an order and two events; returns what its
/// commit threw (none: committed).
template <class Fixture, class Before = void (*)(typename Fixture::session_type&)>
std::optional<outbox::error> order_with_events(
    Fixture& fx, typename Fixture::session_type& sql, const std::string& id,
    Before before_commit = [](typename Fixture::session_type&) {}) {
  auto st = fx.make_store(sql);
  outbox::writer w(*st);
  auto tx = w.begin(sql);
  Fixture::insert_order(tx.session(), id, 10);
  tx.enqueue(make_event(id));
  tx.enqueue(make_event(id, "order_paid"));
  before_commit(sql);
  return outbox::test::error_of([&] { tx.commit(); });
}

/// With `fail(session)` in force, the writer transaction's commit is refused (not in doubt) and
/// commits nothing; healed, the same session commits the next one.
template <class Fixture>
void refused_commits_nothing(void (*fail)(typename Fixture::session_type&)) {
  Fixture fx;
  auto sql = fx.open_session();
  fail(*sql);
  const auto e = order_with_events(fx, *sql, "o-1");
  BOOST_REQUIRE(e.has_value());
  BOOST_TEST(e->kind() != outbox::errc::in_doubt);
  BOOST_TEST(committed(fx) == "orders=0 events=0");
  Fixture::heal(*sql);
  BOOST_TEST(!order_with_events(fx, *sql, "o-2"));  // the session is usable
  BOOST_TEST(committed(fx) == "orders=1 events=2");
}

}  // namespace conformance

BOOST_AUTO_TEST_SUITE(writer_transaction_conformance)

BOOST_AUTO_TEST_CASE_TEMPLATE(commits_business_rows_and_events_together, Fixture, store_fixtures) {
  static_assert(conformance::writer_transaction_fixture<Fixture>);
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::writer w(*st);
  std::vector<outbox::uuid> ids;
  {
    auto tx = w.begin(*sql);
    Fixture::insert_order(tx.session(), "o-1", 10);
    ids.push_back(tx.enqueue(conformance::make_event("o-1")));
    const std::vector<outbox::event> more{conformance::make_event("o-1", "order_paid"),
                                          conformance::make_event("o-1", "order_shipped")};
    for (const auto& id : tx.enqueue(more)) ids.push_back(id);
    BOOST_TEST(tx.size() == 3u);
    // Nothing was sent yet: another session sees nothing, and neither would this one's relay.
    BOOST_TEST(conformance::committed(fx) == "orders=0 events=0");
    tx.commit();
    BOOST_TEST(outbox::test::kind_of([&] { tx.commit(); }) == outbox::errc::permanent);
  }
  BOOST_TEST(conformance::committed(fx) == "orders=1 events=3");
  outbox::testing::manual_clock clock;
  const auto batch = st->claim(conformance::req(clock));
  BOOST_REQUIRE(batch.messages.size() == 3u);
  for (std::size_t i = 0; i < 3; ++i) BOOST_TEST(batch.messages[i].id == ids[i]);
  BOOST_TEST(batch.messages[1].event_type == "order_paid");
  st->release(batch);
  // A transaction without events commits its business rows alone; the session stays usable.
  {
    auto tx = w.begin(*sql);
    Fixture::insert_order(tx.session(), "o-2", 20);
    tx.commit();
  }
  BOOST_TEST(conformance::committed(fx) == "orders=2 events=3");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_rolled_back_or_abandoned_transaction_leaves_nothing, Fixture,
                              store_fixtures) {
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::writer w(*st);
  {
    auto tx = w.begin(*sql);
    Fixture::insert_order(tx.session(), "o-1", 10);
    tx.enqueue(conformance::make_event("o-1"));
    tx.rollback();
    BOOST_TEST(outbox::test::kind_of([&] { tx.enqueue(conformance::make_event("o-1")); }) ==
               outbox::errc::permanent);
  }
  {
    auto tx = w.begin(*sql);  // destroyed without commit: an exception in the caller's code
    Fixture::insert_order(tx.session(), "o-2", 10);
    tx.enqueue(conformance::make_event("o-2"));
  }
  BOOST_TEST(conformance::committed(fx) == "orders=0 events=0");
  BOOST_TEST(!conformance::order_with_events(fx, *sql, "o-3"));  // the session is usable
  BOOST_TEST(conformance::committed(fx) == "orders=1 events=2");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(bad_input_is_refused_at_enqueue_and_the_transaction_goes_on, Fixture,
                              store_fixtures) {
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::writer w(*st);
  {
    auto tx = w.begin(*sql);
    Fixture::insert_order(tx.session(), "o-1", 10);
    tx.enqueue(conformance::make_event("o-1"));
    const std::vector<outbox::event> mixed{conformance::make_event("o-1", "order_paid"),
                                           conformance::make_event("o-1", "bad", "{not json")};
    BOOST_TEST(outbox::test::kind_of([&] { tx.enqueue(mixed); }) == outbox::errc::invalid_input);
    BOOST_TEST(outbox::test::kind_of([&] { tx.enqueue(conformance::make_event("")); }) ==
               outbox::errc::invalid_input);
    BOOST_TEST(tx.size() == 1u);  // all of a refused call or none
    Fixture::insert_order(tx.session(), "o-2", 20);
    tx.commit();
  }
  BOOST_TEST(conformance::committed(fx) == "orders=2 events=1");
}

// The transaction ended behind the writer between the business statements and its commit: the
// caller's own rollback, or a failure that took the transaction down, swallowed by the caller.
// The commit is refused (permanent) and sends no event: run outside a transaction, the event
// INSERT would commit on its own, an event about an order that does not exist.
BOOST_AUTO_TEST_CASE_TEMPLATE(a_transaction_ended_behind_the_writer_commits_no_event, Fixture,
                              store_fixtures) {
  Fixture fx;
  auto sql = fx.open_session();
  const auto rolled_back = [](typename Fixture::session_type& s) { s.rollback(); };
  const auto aborted = [](typename Fixture::session_type& s) {
    Fixture::swallow_a_failure_that_aborts_the_transaction(s);
  };
  int n = 0;
  for (void (*end)(typename Fixture::session_type&) : {+rolled_back, +aborted}) {
    const auto e = conformance::order_with_events(fx, *sql, "o-" + std::to_string(++n), end);
    BOOST_REQUIRE(e.has_value());
    BOOST_TEST((e->kind() == outbox::errc::permanent), e->what());
    BOOST_TEST(conformance::committed(fx) == "orders=0 events=0");
  }
  BOOST_TEST(!conformance::order_with_events(fx, *sql, "o-3"));  // the session is usable
  BOOST_TEST(conformance::committed(fx) == "orders=1 events=2");
}

// writer::begin on a session already in a transaction (the caller's own) is refused, and the
// open transaction is left as it was: a BEGIN would have committed it (MySQL) or the writer's
// transaction would have nested in it and ended it (PostgreSQL).
BOOST_AUTO_TEST_CASE_TEMPLATE(begin_in_an_open_transaction_is_refused_and_leaves_it_open, Fixture,
                              store_fixtures) {
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::writer w(*st);
  {
    auto outer = Fixture::begin(*sql);
    Fixture::insert_order(*sql, "o-1", 10);
    BOOST_TEST(outbox::test::kind_of([&] { (void)w.begin(*sql); }) == outbox::errc::permanent);
    BOOST_TEST(conformance::committed(fx) == "orders=0 events=0");
    outer->rollback();
  }
  BOOST_TEST(conformance::committed(fx) == "orders=0 events=0");
  BOOST_TEST(!conformance::order_with_events(fx, *sql, "o-2"));  // the session is usable
  BOOST_TEST(conformance::committed(fx) == "orders=1 events=2");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_refused_event_insert_commits_nothing, Fixture, store_fixtures) {
  conformance::refused_commits_nothing<Fixture>(&Fixture::fail_event_inserts);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_refused_commit_commits_nothing, Fixture, store_fixtures) {
  if constexpr (Fixture::commit_can_fail)
    conformance::refused_commits_nothing<Fixture>(&Fixture::fail_commits);
  else
    BOOST_TEST_MESSAGE(Fixture::name << ": COMMIT cannot be made to fail; not checked");
}

// The connection dropped after the business statements, before COMMIT: nothing commits. The
// error is transient (the store knows COMMIT never ran) or in_doubt (it cannot tell), never a
// success; a new session then sees neither the order nor its events.
BOOST_AUTO_TEST_CASE_TEMPLATE(a_connection_cut_before_commit_commits_nothing, Fixture,
                              store_fixtures) {
  if constexpr (Fixture::connection_can_be_cut) {
    Fixture fx;
    auto sql = fx.open_session();
    const auto e = conformance::order_with_events(
        fx, *sql, "o-1", [&](typename Fixture::session_type& s) { fx.cut(s); });
    BOOST_REQUIRE(e.has_value());
    BOOST_TEST((e->kind() == outbox::errc::transient || e->kind() == outbox::errc::in_doubt),
               e->what());
    BOOST_TEST(conformance::committed(fx) == "orders=0 events=0");
  } else {
    BOOST_TEST_MESSAGE(Fixture::name << ": no connection to cut; not checked");
  }
}

// COMMIT ran but its answer was lost: in_doubt, and the business rows and events are both there
// or both not (the in-memory store commits them, as a server that answered too late would).
BOOST_AUTO_TEST_CASE_TEMPLATE(a_lost_commit_answer_is_in_doubt_and_never_half_committed, Fixture,
                              store_fixtures) {
  if constexpr (Fixture::commit_answer_can_be_lost) {
    Fixture fx;
    auto sql = fx.open_session();
    Fixture::lose_commit_answer(*sql);
    const auto e = conformance::order_with_events(fx, *sql, "o-1");
    BOOST_REQUIRE(e.has_value());
    BOOST_TEST((e->kind() == outbox::errc::in_doubt));
    const auto seen = conformance::committed(fx);
    BOOST_TEST((seen == "orders=0 events=0" || seen == "orders=1 events=2"), seen);
  } else {
    BOOST_TEST_MESSAGE(Fixture::name << ": a lost COMMIT answer cannot be staged; not checked");
  }
}

BOOST_AUTO_TEST_SUITE_END()
