#pragma once
// The storm guard end to end (each transport's storm_guard_test.cpp): 1,000 events to a route the
// broker refuses (an AMQP exchange without a binding, a topic the Kafka mock refuses) through a
// real relay and broker; at most `max_dead` dead letters, the rest pending (deferred: a pause
// spends no attempt; the stats count a deferred event as pending, never as scheduled, even one
// never attempted) and the route paused;
// once the route is fixed the probe resumes it, it drains, and the dead letters requeued after the
// fix are published too: nothing lost.

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include <outbox/outbox.hpp>
#include <outbox/testing/manual_clock.hpp>

#include "end_to_end_world.hpp"

namespace e2e {

/// The guard's numbers in these tests: the defaults (100 in 60 s, 30 s first pause).
inline constexpr std::size_t storm_events = 1'000;
inline const std::size_t storm_max_dead = outbox::storm_guard_options{}.max_dead;

/// Runs `relay` until a batch claims nothing; a transient error (a broker hiccup) is waited out,
/// up to 120 s in all.
template <class Relay>
void storm_drain(Relay& relay) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < until) {
    try {
      if (relay.run_once() == 0) return;
    } catch (const outbox::error& e) {
      BOOST_TEST_REQUIRE((e.kind() == outbox::errc::transient), e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  BOOST_FAIL("the relay did not drain within 120 s");
}

/// The whole scenario on world `w` (its application store and clock) with `relay`, which
/// publishes through the broken route. `fix` repairs the route; `on_the_route` counts the
/// messages that reached it (e.g. a queue's depth).
template <class World, class Relay, class Fix, class Count>
void a_broken_route_is_paused_and_drains_once_fixed(World& w, Relay& relay,
                                                    const std::string& route, Fix fix,
                                                    Count on_the_route) {
  {
    auto tx = World::SF::begin(*w.app_sql);
    std::vector<outbox::event> events;
    for (std::size_t i = 0; i < storm_events; ++i)
      events.push_back(
          {"order", std::to_string(i % 200), "placed", R"({"i":)" + std::to_string(i) + "}", {}});
    w.writer.enqueue(*w.app_sql, events);
    tx->commit();
  }
  storm_drain(relay);
  auto st = w.app_store->stats(w.clock.now());
  BOOST_TEST_MESSAGE("broken route: " << st.dead << " dead, " << st.pending << " pending, "
                                      << st.waiting_retry << " deferred");
  BOOST_TEST(st.dead > 0);
  BOOST_TEST(static_cast<std::size_t>(st.dead) <= storm_max_dead);
  BOOST_TEST(static_cast<std::size_t>(st.pending + st.dead) == storm_events);
  BOOST_TEST(st.waiting_retry > 0);
  BOOST_TEST(st.scheduled == 0);
  BOOST_TEST(relay.stats().routes_paused == 1u);
  const auto paused = relay.routes().paused();
  BOOST_TEST_REQUIRE(paused.size() == 1u);
  BOOST_TEST(paused[0].route == route);
  BOOST_TEST(on_the_route() == 0u);

  // Still broken at the first probe: paused again, no more dead letters.
  w.clock.advance(std::chrono::seconds(31));
  storm_drain(relay);
  BOOST_TEST(w.app_store->stats(w.clock.now()).dead == st.dead);
  BOOST_TEST(relay.stats().routes_paused == 1u);

  // Fixed: the next probe (after the doubled pause) resumes the route and it drains.
  fix();
  w.clock.advance(std::chrono::seconds(61));
  storm_drain(relay);
  st = w.app_store->stats(w.clock.now());
  BOOST_TEST(st.pending == 0);
  BOOST_TEST(st.scheduled == 0);
  BOOST_TEST(relay.stats().routes_paused == 0u);
  // The first dead letters, requeued after the fix, go too: nothing lost.
  for (const auto& d : w.app_store->dead_letters(storm_events))
    BOOST_TEST(w.app_store->requeue(d.msg.id));
  storm_drain(relay);
  st = w.app_store->stats(w.clock.now());
  BOOST_TEST(st.pending == 0);
  BOOST_TEST(st.dead == 0);
  BOOST_TEST(relay.stats().published == storm_events);
  BOOST_TEST(on_the_route() == storm_events);
}

}  // namespace e2e
