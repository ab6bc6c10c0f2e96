#pragma once
// Store conformance, scheduled delivery (`event::deliver_at`): included by store_conformance.hpp
// after its suite, so every store (the memory one too) runs it with the same fixtures.

#include <chrono>
#include <optional>
#include <stop_token>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <outbox/relay.hpp>
#include <outbox/testing/manual_clock.hpp>
#include <outbox/testing/memory_transport.hpp>

namespace conformance {

/// `make_event(agg_id, type)` due at `at`.
inline outbox::event scheduled_event(std::string agg_id, outbox::time_point at,
                                     std::string type = "reminder_due") {
  outbox::event e = make_event(std::move(agg_id), std::move(type));
  e.deliver_at = at;
  return e;
}

}  // namespace conformance

BOOST_AUTO_TEST_SUITE(store_schedule_conformance)

BOOST_AUTO_TEST_CASE_TEMPLATE(a_scheduled_event_is_claimed_only_once_its_time_has_come, Fixture,
                              store_fixtures) {
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::manual_clock clock;
  const auto due = clock.now() + 10s;
  conformance::commit_events(fx, {conformance::scheduled_event("s", due)}, clock);

  BOOST_TEST(st->claim(conformance::req(clock)).empty());
  // Counted apart from the backlog: not pending, not late, not a retry.
  const auto s = st->stats(clock.now());
  BOOST_TEST(s.scheduled == 1);
  BOOST_TEST(s.pending == 0);
  BOOST_TEST(s.waiting_retry == 0);
  BOOST_TEST(s.in_flight == 0);
  BOOST_TEST(s.oldest_pending_age.count() == 0);
  const auto by_type = st->stats_by_aggregate_type(clock.now());
  BOOST_TEST_REQUIRE(by_type.size() == 1u);
  BOOST_TEST(by_type[0].stats.scheduled == 1);
  BOOST_TEST(by_type[0].stats.pending == 0);
  // The store tells the relay when it falls due (a store's own unit, never sooner).
  const std::optional<outbox::time_point> next = st->next_due(clock.now());
  BOOST_TEST_REQUIRE(next.has_value());
  BOOST_TEST((*next >= due && *next < due + 1ms));

  clock.advance(9999ms);
  BOOST_TEST(st->claim(conformance::req(clock)).empty());
  clock.advance(2ms);  // due (a store keeps whole ms or us, rounded up): claimed at once
  auto b = st->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(b.size() == 1u);
  BOOST_TEST(b.messages[0].aggregate_id == "s");
  BOOST_TEST(b.messages[0].attempts == 1);
  BOOST_TEST(!st->next_due(clock.now()).has_value());
  BOOST_TEST(st->settle(b, conformance::all(1, outbox::settlement::kind::published), clock.now())
                 .published == 1u);
  BOOST_TEST(st->stats(clock.now()).scheduled == 0);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_later_event_of_its_aggregate_waits_behind_a_scheduled_one, Fixture,
                              store_fixtures) {
  // The order of an aggregate holds: its unscheduled events written after a scheduled one go
  // after it (as behind a retry); other aggregates flow.
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::manual_clock clock;
  conformance::commit_events(
      fx,
      {conformance::make_event("a", "first"),
       conformance::scheduled_event("a", clock.now() + 5s, "second"),
       conformance::make_event("a", "third"), conformance::make_event("b", "other")},
      clock);
  auto b1 = st->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(b1.size() == 2u);
  BOOST_TEST(b1.messages[0].event_type == "first");
  BOOST_TEST(b1.messages[1].event_type == "other");
  st->settle(b1, conformance::all(2, outbox::settlement::kind::published), clock.now());
  BOOST_TEST(st->claim(conformance::req(clock)).empty());  // "third" waits behind "second"
  const auto s = st->stats(clock.now());
  BOOST_TEST(s.scheduled == 1);
  BOOST_TEST(s.pending == 1);  // "third": due, held back by its aggregate

  clock.advance(5001ms);
  auto b2 = st->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(b2.size() == 2u);
  BOOST_TEST(b2.messages[0].event_type == "second");
  BOOST_TEST(b2.messages[1].event_type == "third");
  st->settle(b2, conformance::all(2, outbox::settlement::kind::published), clock.now());
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_delivery_time_in_the_past_means_now, Fixture, store_fixtures) {
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::manual_clock clock;
  conformance::commit_events(fx, {conformance::scheduled_event("p", clock.now() - 1h)}, clock);
  BOOST_TEST(st->stats(clock.now()).scheduled == 0);
  BOOST_TEST(!st->next_due(clock.now()).has_value());
  auto b = st->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(b.size() == 1u);
  st->release(b);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(an_idle_relay_wakes_when_a_scheduled_event_falls_due, Fixture,
                              store_fixtures) {
  // The relay polls once an hour here: only the store's next_due ends its sleep when the event
  // falls due (on PostgreSQL too, whose LISTEN/NOTIFY says nothing then). Without it, the wait
  // below runs out.
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  const auto due = std::chrono::system_clock::now() + 300ms;
  conformance::commit_events(fx, {conformance::scheduled_event("w", due)});
  outbox::testing::memory_transport broker;
  outbox::relay<typename Fixture::store_type, outbox::testing::memory_transport> relay(
      *st, broker, {.idle_poll_min = 1h, .idle_poll_max = 1h});
  std::optional<std::chrono::system_clock::time_point> seen;
  {
    std::jthread run([&](std::stop_token stop) { relay.run(stop); });
    const auto until = std::chrono::steady_clock::now() + 60s;
    while (!seen && std::chrono::steady_clock::now() < until) {
      if (broker.published_count() > 0) seen = std::chrono::system_clock::now();
      std::this_thread::sleep_for(5ms);
    }
  }
  BOOST_TEST_REQUIRE(seen.has_value());
  BOOST_TEST((*seen >= due));
  BOOST_TEST(broker.published_count() == 1u);
  // Slept until the time, no busy loop: a claim at the start, one when due, a few after.
  BOOST_TEST(relay.stats().steps < 20u, relay.stats().steps);
}

BOOST_AUTO_TEST_SUITE_END()
