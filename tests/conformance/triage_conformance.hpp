#pragma once
// Dead-letter triage and replay conformance (concepts::triage_store, concepts::replay_store),
// written once: a store conformance test file includes it after store_conformance.hpp (same
// `store_fixtures`, same helpers). Grouping by cause key, requeue by group with the replay
// count, discard to the archive and its purge in bounded batches, the interleavings with a
// relay's claim and an operator's requeue, and replay of published rows in store order.

#include <chrono>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <outbox/concepts/triage.hpp>
#include <outbox/relay.hpp>
#include <outbox/testing/manual_clock.hpp>

#include "store_conformance.hpp"

namespace triage {

/// Equal to the stores' precision (SQLite keeps milliseconds).
inline bool near(outbox::time_point a, outbox::time_point b) {
  return a - b < std::chrono::milliseconds(1) && b - a < std::chrono::milliseconds(1);
}

/// Commits `n` events (aggregates "a0", "a1", ...; the event type `type`), claims them all and
/// settles the ones `dead` picks as dead letters of `cause` (the relay's key), the rest
/// published.
template <class Store>
std::vector<outbox::uuid> settle_dead(Store& st, const std::vector<outbox::uuid>& ids,
                                      const outbox::testing::manual_clock& clock,
                                      const std::vector<std::string>& causes) {
  auto b = st.claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(b.size() == causes.size());
  std::vector<outbox::settlement> f(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (causes[i] == "published") {
      f[i].what = outbox::settlement::kind::published;
      continue;
    }
    f[i].what = outbox::settlement::kind::dead;
    f[i].error = "no route for event " + b.messages[i].id.to_string();
    f[i].cause = causes[i];
  }
  (void)st.settle(b, f, clock.now());
  return ids;
}

}  // namespace triage

BOOST_AUTO_TEST_SUITE(triage_conformance)

BOOST_AUTO_TEST_CASE_TEMPLATE(dead_letters_are_grouped_by_cause_and_requeued_by_group, Fixture,
                              store_fixtures) {
  static_assert(outbox::concepts::triage_store<typename Fixture::store_type>);
  Fixture fx;
  const auto ids = conformance::commit_events(
      fx, {conformance::make_event("a"), conformance::make_event("b", "order_paid"),
           conformance::make_event("c"), conformance::make_event("d")});
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql, outbox::retention::keep);
  outbox::testing::manual_clock clock;
  // Two of cause A (two event types), one with no key from the relay (the store makes one of
  // the error, class "unknown"), one published.
  triage::settle_dead(*st, ids, clock,
                      {"permanent: no route", "permanent: no route", "", "published"});
  const auto groups = st->dead_letter_groups(10);
  BOOST_TEST_REQUIRE(groups.size() == 2u);
  BOOST_TEST(groups[0].cause == "permanent: no route");
  BOOST_TEST(groups[0].count == 2);
  BOOST_TEST((groups[0].event_types == std::vector<std::string>{"order_paid", "order_placed"}));
  BOOST_TEST(groups[0].sample == ids[0]);  // the oldest
  BOOST_TEST(triage::near(groups[0].first_dead_at, clock.now()));
  BOOST_TEST(triage::near(groups[0].last_dead_at, clock.now()));
  BOOST_TEST(groups[1].cause == "unknown: no route for event #");  // the id stripped
  BOOST_TEST(groups[1].count == 1);
  BOOST_TEST(st->dead_letter_groups(1).size() == 1u);  // bounded
  // Requeue by group, one at a time: the oldest first, then nothing left of the group.
  clock.advance(5s);
  BOOST_TEST(st->requeue_group("permanent: no route", clock.now(), 1) == 1u);
  BOOST_TEST(st->requeue_group("permanent: no route", clock.now(), 1) == 1u);
  BOOST_TEST(st->requeue_group("permanent: no route", clock.now(), 1) == 0u);
  BOOST_TEST(st->requeue_group("no such cause", clock.now(), 10) == 0u);
  BOOST_TEST(st->stats(clock.now()).dead == 1);
  // They fail again: the dead letters say they were replayed once, and when.
  triage::settle_dead(*st, ids, clock, {"permanent: no route", "permanent: no route"});
  const auto dead = st->dead_letters(10);
  BOOST_TEST_REQUIRE(dead.size() == 3u);
  BOOST_TEST(dead[0].msg.id == ids[0]);
  BOOST_TEST(dead[0].cause == "permanent: no route");
  BOOST_TEST(dead[0].replays == 1);
  BOOST_TEST(triage::near(dead[0].replayed_at, clock.now()));
  BOOST_TEST(dead[2].replays == 0);  // the one left dead (ids[2], last in store order)
}

BOOST_AUTO_TEST_CASE_TEMPLATE(discard_moves_dead_letters_to_the_archive_in_bounded_batches, Fixture,
                              store_fixtures) {
  Fixture fx;
  const auto ids = conformance::commit_events(
      fx, {conformance::make_event("a"), conformance::make_event("b"),
           conformance::make_event("c", "order_paid"), conformance::make_event("d")});
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql, outbox::retention::keep);
  outbox::testing::manual_clock clock;
  triage::settle_dead(*st, ids, clock, {"k: a", "k: a", "k: b", "k: c"});
  BOOST_TEST(st->discard({.cause = std::string("k: a")}, clock.now(), 1) == 1u);
  BOOST_TEST(st->discard({.cause = std::string("k: a")}, clock.now(), 1) == 1u);
  BOOST_TEST(st->discard({.cause = std::string("k: a")}, clock.now(), 1) == 0u);
  BOOST_TEST(st->discard({.event_type = std::string("order_paid")}, clock.now(), 10) == 1u);
  // Dead since a later time: none; by id: the last one.
  BOOST_TEST(st->discard({.dead_since = clock.now() + 1s}, clock.now(), 10) == 0u);
  BOOST_TEST(st->discard({.id = ids[0]}, clock.now(), 10) == 0u);  // archived already
  BOOST_TEST(st->discard({.id = ids[3]}, clock.now(), 10) == 1u);
  BOOST_TEST(st->stats(clock.now()).dead == 0);
  BOOST_TEST(st->dead_letters(10).empty());
  BOOST_TEST(!st->requeue(ids[0]));  // archived: not a dead letter any more
  // The archive is kept until purged, in bounded batches, oldest first.
  BOOST_TEST(st->purge_archive(clock.now(), 10) == 0u);  // archived at now: not before it
  BOOST_TEST(st->purge_archive(clock.now() + 1ms, 3) == 3u);
  BOOST_TEST(st->purge_archive(clock.now() + 1ms, 3) == 1u);
  BOOST_TEST(st->purge_archive(clock.now() + 1ms, 3) == 0u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_discard_never_takes_a_row_a_relay_holds_or_an_operator_requeued,
                              Fixture, store_fixtures) {
  Fixture fx;
  const auto ids =
      conformance::commit_events(fx, {conformance::make_event("a"), conformance::make_event("b")});
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql, outbox::retention::keep);
  outbox::testing::manual_clock clock;
  triage::settle_dead(*st, ids, clock, {"k: a", "k: a"});
  // An operator sees the group; meanwhile another requeues one of it and a relay claims it.
  BOOST_TEST(st->dead_letter_groups(10).at(0).count == 2);
  BOOST_TEST(st->requeue(ids[0]));
  auto relay_sql = fx.open_session();
  auto relay_store = fx.make_store(*relay_sql, outbox::retention::keep);
  auto held = relay_store->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(held.size() == 1u);
  // The discard of the group takes only the row still dead, never the held one. MySQL may
  // skip it too (SKIP LOCKED: a locking claim's scan can hold locks on index records near the
  // rows it took); it is then left for the next run, not lost.
  const auto first = st->discard({.cause = std::string("k: a")}, clock.now(), 10);
  BOOST_TEST(first <= 1u);
  // The relay's settle dead-letters it again: it is a dead letter once, not lost, not archived.
  std::vector<outbox::settlement> f(1);
  f[0].what = outbox::settlement::kind::dead;
  f[0].cause = "k: a";
  BOOST_TEST(relay_store->settle(held, f, clock.now()).dead == 1u);
  relay_store.reset();
  relay_sql.reset();
  BOOST_TEST(first + st->discard({.id = ids[1]}, clock.now(), 10) == 1u);
  const auto dead = st->dead_letters(10);
  BOOST_TEST_REQUIRE(dead.size() == 1u);
  BOOST_TEST(dead[0].msg.id == ids[0]);
  BOOST_TEST(dead[0].replays == 1);
  BOOST_TEST(st->purge_archive(clock.now() + 1ms, 10) == 1u);  // ids[1] only
}

BOOST_AUTO_TEST_CASE_TEMPLATE(replay_makes_published_rows_pending_in_store_order_with_their_ids,
                              Fixture, store_fixtures) {
  static_assert(outbox::concepts::replay_store<typename Fixture::store_type>);
  Fixture fx;
  const auto ids = conformance::commit_events(
      fx, {conformance::make_event("x"), conformance::make_event("y", "order_paid"),
           conformance::make_event("x"), conformance::make_event("x")});
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql, outbox::retention::keep);
  outbox::testing::manual_clock clock;
  triage::settle_dead(*st, ids, clock, {"published", "published", "published", "published"});
  const auto now = std::chrono::system_clock::now();
  outbox::replay_filter all{.since = now - 1h, .until = now + 1h};
  BOOST_TEST(st->replay_count(all).matching == 4);
  BOOST_TEST(st->replay_count(all).any_kept);
  auto only_y = all;
  only_y.aggregate_id = "y";
  BOOST_TEST(st->replay_count(only_y).matching == 1);
  auto paid = all;
  paid.event_type = "order_paid";
  BOOST_TEST(st->replay_count(paid).matching == 1);
  BOOST_TEST(st->replay_count({.since = now + 1h, .until = now + 2h}).matching == 0);
  // In bounded batches: 3, then 1, then none (the replayed rows are pending, not published).
  BOOST_TEST(st->replay(all, clock.now(), 3) == 3u);
  BOOST_TEST(st->replay(all, clock.now(), 3) == 1u);
  BOOST_TEST(st->replay(all, clock.now(), 3) == 0u);
  // Claimed again in store order, with their ids.
  auto b = st->claim(conformance::req(clock));
  std::vector<outbox::uuid> order;
  for (const auto& m : b.messages) order.push_back(m.id);
  BOOST_TEST(order == ids, "replayed rows come back in store order with their ids");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(replay_count_says_nothing_is_kept_under_delete_on_publish, Fixture,
                              store_fixtures) {
  Fixture fx;
  const auto ids =
      conformance::commit_events(fx, {conformance::make_event("a"), conformance::make_event("b")});
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql, outbox::retention::delete_on_publish);
  outbox::testing::manual_clock clock;
  triage::settle_dead(*st, ids, clock, {"published", "published"});
  const auto now = std::chrono::system_clock::now();
  const auto e = st->replay_count({.since = now - 1h, .until = now + 1h});
  BOOST_TEST(e.matching == 0);
  BOOST_TEST(!e.any_kept);
}

BOOST_AUTO_TEST_SUITE_END()
