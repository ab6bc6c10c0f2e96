#pragma once
// Store conformance, the deferral (a `release` settlement with `retry_at` set: not attempted,
// pending, claimable at retry_at, its attempt given back, its aggregate held back behind it as
// behind a retry): included by store_conformance.hpp after its suite, so every polling store
// (the memory one too) runs it with the same fixtures. The storm guard defers a paused route's
// events so; a pause must never spend an attempt, nor hide the events from the backlog.

#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <outbox/testing/manual_clock.hpp>

namespace conformance {

/// The event types of `b`'s messages, in order.
inline std::vector<std::string> event_types(const outbox::claimed_batch& b) {
  std::vector<std::string> out;
  for (const auto& m : b.messages) out.push_back(m.event_type);
  return out;
}

/// A release until `at` (a deferral).
inline outbox::settlement deferred_until(outbox::time_point at) {
  return outbox::settlement{outbox::settlement::kind::release, at};
}

}  // namespace conformance

BOOST_AUTO_TEST_SUITE(store_defer_conformance)

BOOST_AUTO_TEST_CASE_TEMPLATE(a_deferred_row_waits_for_its_time_and_never_spends_an_attempt,
                              Fixture, store_fixtures) {
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::manual_clock clock;
  using kind = outbox::settlement::kind;
  conformance::commit_events(
      fx,
      {conformance::make_event("a", "first"), conformance::make_event("a", "second"),
       conformance::make_event("b", "other"), conformance::make_event("c", "tried")},
      clock);

  // "first" deferred for 10 s, "second" (behind it) and "other" released at once, "tried"
  // failed once (a retry due at once): every fate counted, the deferral as released.
  auto b1 = st->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(b1.size() == 4u);
  BOOST_TEST((conformance::event_types(b1) ==
              std::vector<std::string>{"first", "second", "other", "tried"}));
  const auto at1 = clock.now() + 10s;
  const auto r1 =
      st->settle(b1,
                 std::vector<outbox::settlement>{
                     conformance::deferred_until(at1), {}, {}, {kind::retry, clock.now(), "boom"}},
                 clock.now());
  BOOST_TEST(r1.released == 3u);
  BOOST_TEST(r1.retried == 1u);
  BOOST_TEST(r1.fenced == 0u);
  // The deferred "first" (never attempted before) is in the backlog, waiting; not scheduled.
  const auto s1 = st->stats(clock.now());
  BOOST_TEST(s1.pending == 4);
  BOOST_TEST(s1.waiting_retry == 1);
  BOOST_TEST(s1.scheduled == 0);

  // At once: the plain release is claimable ("other", its attempt given back: 1 again), the
  // retry too ("tried": 2); "first" is not, and "second" waits behind it.
  auto b2 = st->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(b2.size() == 2u);
  BOOST_TEST((conformance::event_types(b2) == std::vector<std::string>{"other", "tried"}));
  BOOST_TEST(b2.messages[0].attempts == 1);
  BOOST_TEST(b2.messages[1].attempts == 2);
  // "tried" deferred as well: its attempts stay those of before this claim (1).
  const auto r2 = st->settle(
      b2, std::vector<outbox::settlement>{{kind::published}, conformance::deferred_until(at1)},
      clock.now());
  BOOST_TEST(r2.published == 1u);
  BOOST_TEST(r2.released == 1u);
  BOOST_TEST(r2.fenced == 0u);

  // Deferred twice more: the attempts never grow.
  for (int round = 0; round < 2; ++round) {
    clock.advance(9999ms);
    BOOST_TEST(st->claim(conformance::req(clock)).empty(), "round " << round);
    clock.advance(2ms);  // at retry_at (a store keeps whole ms or us, rounded up)
    auto b = st->claim(conformance::req(clock));
    BOOST_TEST_REQUIRE(b.size() == 3u, "round " << round);
    BOOST_TEST(
        (conformance::event_types(b) == std::vector<std::string>{"first", "second", "tried"}));
    BOOST_TEST(b.messages[0].attempts == 1, "round " << round);
    BOOST_TEST(b.messages[1].attempts == 1, "round " << round);
    BOOST_TEST(b.messages[2].attempts == 2, "round " << round);
    const auto at = clock.now() + 10s;
    const auto r =
        st->settle(b,
                   std::vector<outbox::settlement>{
                       conformance::deferred_until(at), {}, conformance::deferred_until(at)},
                   clock.now());
    BOOST_TEST(r.released == 3u);
    BOOST_TEST(r.fenced == 0u);
    // "second" again waits behind "first", though released at once.
    BOOST_TEST(st->claim(conformance::req(clock)).empty(), "round " << round);
  }

  clock.advance(10001ms);
  auto last = st->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(last.size() == 3u);
  BOOST_TEST(last.messages[0].attempts == 1);
  BOOST_TEST(last.messages[2].attempts == 2);
  BOOST_TEST(st->settle(last, conformance::all(3, kind::published), clock.now()).published == 3u);
  const auto s = st->stats(clock.now());
  BOOST_TEST(s.pending == 0);
  BOOST_TEST(s.scheduled == 0);
  BOOST_TEST(s.dead == 0);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_deferred_row_is_in_the_backlog_and_a_scheduled_event_is_not,
                              Fixture, store_fixtures) {
  // A row deferred before any attempt (a paused route's) is late work: in `pending`,
  // `waiting_retry` and `oldest_pending_age`. A scheduled event beside it is not: `scheduled`.
  Fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::manual_clock clock;
  conformance::commit_events(fx, {conformance::make_event("a", "early")}, clock);
  clock.advance(5s);
  outbox::event later = conformance::make_event("s", "reminder_due");
  later.deliver_at = clock.now() + 60s;
  conformance::commit_events(fx, {later}, clock);

  auto b = st->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(b.size() == 1u);
  BOOST_TEST(b.messages[0].event_type == "early");
  BOOST_TEST(b.messages[0].attempts == 1);
  const auto r =
      st->settle(b, std::vector<outbox::settlement>{conformance::deferred_until(clock.now() + 10s)},
                 clock.now());
  BOOST_TEST(r.released == 1u);
  BOOST_TEST(r.fenced == 0u);

  clock.advance(1s);
  const auto s = st->stats(clock.now());
  BOOST_TEST(s.pending == 1);
  BOOST_TEST(s.waiting_retry == 1);
  BOOST_TEST(s.scheduled == 1);
  BOOST_TEST(s.in_flight == 0);
  BOOST_TEST(s.oldest_pending_age.count() == 6000);  // "early", enqueued 6 s ago
  const auto by_type = st->stats_by_aggregate_type(clock.now());
  BOOST_TEST_REQUIRE(by_type.size() == 1u);
  BOOST_TEST(by_type[0].stats.pending == 1);
  BOOST_TEST(by_type[0].stats.waiting_retry == 1);
  BOOST_TEST(by_type[0].stats.scheduled == 1);
  BOOST_TEST(by_type[0].stats.oldest_pending_age.count() == 6000);

  // Due: claimed with its attempt given back (1 again), released at once, then due, not
  // waiting; the scheduled event stays scheduled until its time.
  clock.advance(10s);
  auto again = st->claim(conformance::req(clock));
  BOOST_TEST_REQUIRE(again.size() == 1u);
  BOOST_TEST(again.messages[0].attempts == 1);
  BOOST_TEST(st->settle(again, std::vector<outbox::settlement>(1), clock.now()).released == 1u);
  const auto s2 = st->stats(clock.now());
  BOOST_TEST(s2.pending == 1);
  BOOST_TEST(s2.waiting_retry == 0);
  BOOST_TEST(s2.scheduled == 1);
}

BOOST_AUTO_TEST_SUITE_END()
