// The relay's storm guard on the in-memory store and transport (test_memory_store): a route that
// dead-letters too much is paused with its events kept pending (deferred: no attempt spent),
// probed after the pause, resumed once it works; order per aggregate holds across the pause. A
// manual clock drives the pauses. A deferred event counts in the store's backlog (pending,
// waiting), never as scheduled, even never attempted.
#include <boost/test/unit_test.hpp>

#include "common.hpp"

namespace {

using faulty = outbox::testing::faulty_transport<outbox::testing::memory_transport>;
using outbox::testing::manual_clock;

/// A store, a transport whose route is the event type, and a relay whose guard lets `max_dead`
/// dead letters through per 60 s window and pauses 30 s (doubling to 120 s), with `retry`.
struct storm_world {
  manual_clock clock;
  memory_database db;
  memory_session app{db};
  memory_store<manual_clock> store{app, {}, clock};
  outbox::writer<memory_store<manual_clock>, manual_clock> writer{store, {}, clock};
  outbox::testing::memory_transport wire{{.record = true}};
  faulty transport{wire};
  std::vector<outbox::route_change> changes;
  outbox::relay<memory_store<manual_clock>, faulty, outbox::exponential_backoff, manual_clock>
      relay;

  explicit storm_world(std::size_t max_dead, outbox::exponential_backoff retry = {})
      : relay(store, transport,
              {.storm_guard = {.max_dead = max_dead,
                               .max_pause = 120s,
                               .on_change = [this](const auto& c) { changes.push_back(c); }}},
              retry, clock) {
    transport.route_by([](const outbox::message& m) { return "memory:" + m.event_type; });
    transport.fail_when([](const outbox::message& m) { return m.event_type == "to_broken"; },
                        outbox::errc::permanent);
  }
  /// `n` events on the broken route, each its own aggregate "b<i>".
  void broken(std::size_t n, const std::string& prefix = "b") {
    std::vector<outbox::event> es;
    for (std::size_t i = 0; i < n; ++i)
      es.push_back({"order", prefix + std::to_string(i), "to_broken", R"({"n":1})", {}});
    writer.enqueue(app, es);
  }
  /// Runs batches until one claims nothing.
  void drain() {
    while (relay.run_once() > 0) {
    }
  }
  outbox::backlog_stats backlog() { return store.stats(clock.now()); }
  std::size_t on_wire(const std::string& event_type) {
    const auto w = wire.wire();
    return static_cast<std::size_t>(std::count_if(
        w.begin(), w.end(), [&](const auto& m) { return m.event_type == event_type; }));
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(storm_guard)

BOOST_AUTO_TEST_CASE(a_broken_route_is_paused_after_max_dead_and_the_rest_stays_pending) {
  storm_world w(5);
  w.broken(50);
  w.writer.enqueue(w.app, {"order", "fine", "to_fine", R"({"n":1})", {}});
  w.drain();
  const auto b = w.backlog();
  BOOST_TEST(b.dead == 5);                    // the first max_dead only
  BOOST_TEST(b.pending == 45);                // the rest wait for the probe, deferred, unattempted
  BOOST_TEST(b.waiting_retry == 45);          // not due before the probe
  BOOST_TEST(b.scheduled == 0);               // not events the writer scheduled
  BOOST_TEST(w.relay.stats().retried == 0u);  // deferred: released, no attempt counted
  BOOST_TEST(w.relay.stats().released >= 45u);
  BOOST_TEST(w.on_wire("to_fine") == 1u);  // other routes flow
  BOOST_TEST(w.relay.stats().routes_paused == 1u);
  BOOST_TEST_REQUIRE(w.changes.size() == 1u);
  BOOST_TEST(w.changes[0].paused);
  BOOST_TEST(w.changes[0].route == "memory:to_broken");
  BOOST_TEST(w.changes[0].dead == 5u);
  BOOST_TEST((w.changes[0].until == w.clock.now() + 30s));
  const auto paused = w.relay.routes().paused();
  BOOST_TEST_REQUIRE(paused.size() == 1u);
  BOOST_TEST(paused[0].last_error.find("injected") != std::string::npos, paused[0].last_error);
  // Paused: more events of the route are kept pending, none sent, none dead.
  const auto injected = w.transport.failures_injected();
  w.broken(10, "c");
  w.drain();
  BOOST_TEST(w.backlog().dead == 5);
  BOOST_TEST(w.backlog().pending == 55);
  BOOST_TEST(w.backlog().scheduled == 0);
  BOOST_TEST(w.transport.failures_injected() == injected);
}

BOOST_AUTO_TEST_CASE(the_route_is_probed_after_the_pause_and_resumed_once_it_works) {
  storm_world w(5);
  w.broken(50);
  w.drain();
  BOOST_TEST(w.relay.stats().routes_paused == 1u);
  // The pause is not over: nothing is tried.
  w.clock.advance(29s);
  const auto injected = w.transport.failures_injected();
  w.drain();
  BOOST_TEST(w.transport.failures_injected() == injected);
  // Late, and the backlog says so: the oldest age grows through the pause.
  BOOST_TEST(w.backlog().pending == 45);
  BOOST_TEST((w.backlog().oldest_pending_age == 29s));
  // Still broken at the probe: paused again, twice as long, still no more dead letters.
  w.clock.advance(2s);
  w.drain();
  BOOST_TEST(w.transport.failures_injected() > injected);
  BOOST_TEST(w.backlog().dead == 5);
  BOOST_TEST(w.backlog().pending == 45);
  BOOST_TEST(w.backlog().waiting_retry == 45);
  BOOST_TEST(w.backlog().scheduled == 0);
  BOOST_TEST_REQUIRE(w.changes.size() == 2u);
  BOOST_TEST((w.changes[1].until == w.clock.now() + 60s));
  // Then 120 s, the maximum, and it stays there.
  w.clock.advance(61s);
  w.drain();
  BOOST_TEST((w.changes.back().until == w.clock.now() + 120s));
  w.clock.advance(121s);
  w.drain();
  BOOST_TEST((w.changes.back().until == w.clock.now() + 120s));
  BOOST_TEST(w.backlog().dead == 5);
  // Fixed: the probe goes through, the route resumes and drains; the dead letters requeued
  // after the fix go too. Nothing lost.
  w.transport.heal();
  w.clock.advance(121s);
  w.drain();
  BOOST_TEST(!w.changes.back().paused);
  BOOST_TEST(w.relay.stats().routes_paused == 0u);
  BOOST_TEST(w.backlog().pending == 0);
  BOOST_TEST(w.backlog().scheduled == 0);
  for (const auto& d : w.store.dead_letters(100)) BOOST_TEST(w.store.requeue(d.msg.id));
  w.drain();
  BOOST_TEST(w.backlog().dead == 0);
  BOOST_TEST(w.on_wire("to_broken") == 50u);
}

BOOST_AUTO_TEST_CASE(a_paused_route_holds_its_aggregates_later_events_on_other_routes) {
  storm_world w(5);
  w.broken(6);  // trips the guard
  w.drain();
  BOOST_TEST_REQUIRE(w.relay.stats().routes_paused == 1u);
  // One aggregate: the first event on the paused route, the next on a working one.
  w.writer.enqueue(w.app, std::vector<outbox::event>{{"order", "x", "to_broken", R"({"n":1})", {}},
                                                     {"order", "x", "to_fine", R"({"n":2})", {}},
                                                     {"order", "y", "to_fine", R"({"n":3})", {}}});
  w.drain();
  BOOST_TEST(w.on_wire("to_fine") == 1u);  // y's; x's second waits behind its first
  w.transport.heal();
  w.clock.advance(31s);
  w.drain();
  std::vector<std::string> x;
  for (const auto& m : w.wire.wire())
    if (m.aggregate_id == "x") x.push_back(m.event_type);
  BOOST_TEST((x == std::vector<std::string>{"to_broken", "to_fine"}));
}

BOOST_AUTO_TEST_CASE(a_route_paused_more_often_than_max_attempts_dead_letters_nothing_more) {
  // A pause spends no attempt (its events are deferred, their attempt given back): with 3
  // attempts in the retry policy, a route whose probe fails 8 times in a row keeps its events
  // pending (none spent, none dead beyond the first max_dead), and they drain once it is fixed,
  // each published at its first counted attempt.
  storm_world w(5, outbox::exponential_backoff{.max_attempts = 3});
  w.broken(50);
  w.drain();
  BOOST_TEST_REQUIRE(w.relay.stats().routes_paused == 1u);
  for (int probe = 0; probe < 8; ++probe) {
    w.clock.advance(121s);  // past the longest pause: the probe, refused again
    const auto injected = w.transport.failures_injected();
    w.drain();
    BOOST_TEST(w.transport.failures_injected() == injected + 45u, "probe " << probe);
    BOOST_TEST(w.backlog().dead == 5, "probe " << probe);
    BOOST_TEST(w.relay.stats().routes_paused == 1u, "probe " << probe);
  }
  BOOST_TEST(w.relay.stats().retried == 0u);
  BOOST_TEST(w.relay.stats().dead_lettered == 5u);
  w.transport.heal();
  w.clock.advance(121s);
  w.drain();
  BOOST_TEST(w.relay.stats().routes_paused == 0u);
  const auto b = w.backlog();
  BOOST_TEST(b.pending == 0);
  BOOST_TEST(b.scheduled == 0);
  BOOST_TEST(b.dead == 5);
  BOOST_TEST(w.on_wire("to_broken") == 45u);
  for (const auto& m : w.wire.wire()) BOOST_TEST(m.attempts == 1, m.aggregate_id);
}

BOOST_AUTO_TEST_CASE(dead_letters_outside_the_window_do_not_pause_the_route) {
  storm_world w(5);
  w.broken(5, "a");
  w.drain();
  w.clock.advance(61s);
  w.broken(5, "b");
  w.drain();
  BOOST_TEST(w.backlog().dead == 10);
  BOOST_TEST(w.relay.stats().routes_paused == 0u);
  BOOST_TEST(w.changes.empty());
}

BOOST_AUTO_TEST_CASE(max_dead_zero_turns_the_guard_off) {
  storm_world w(0);
  w.broken(300);
  w.drain();
  BOOST_TEST(w.backlog().dead == 300);
  BOOST_TEST(w.relay.stats().routes_paused == 0u);
}

BOOST_AUTO_TEST_CASE(contradictory_guard_options_are_refused) {
  outbox::testing::memory_transport t;
  memory_database db;
  memory_session app(db);
  memory_store store(app);
  const auto make = [&](outbox::storm_guard_options o) {
    outbox::relay r(store, t, {.storm_guard = std::move(o)});
  };
  BOOST_CHECK_THROW(make({.pause = 60s, .max_pause = 30s}), outbox::error);
  BOOST_CHECK_NO_THROW(make({.max_dead = 0, .pause = 0s}));
}

BOOST_AUTO_TEST_SUITE_END()
