// The core's tests (test_core, module in ../core_test.cpp): scheduled delivery, the writer's
// check of `event::deliver_at` and the relay's idle sleep (`detail::idle_sleep`).
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <string>

#include <outbox/outbox.hpp>
#include <outbox/testing/manual_clock.hpp>
#include <outbox/testing/memory_store.hpp>

#include "../../support/errors.hpp"

using namespace std::chrono_literals;

namespace {
outbox::event due_at(outbox::time_point t) {
  outbox::event e{"order", "42", "reminder_due", R"({"n":1})", {}};
  e.deliver_at = t;
  return e;
}

/// A writer on a memory store, with a manual clock (the cases' fixture).
struct world {
  explicit world(outbox::writer_options o = {}) : w(store, std::move(o), clock) {}
  outbox::testing::memory_database db;
  outbox::testing::memory_session sql{db};
  outbox::testing::memory_store<> store{sql};
  outbox::testing::manual_clock clock;
  outbox::writer<outbox::testing::memory_store<>, outbox::testing::manual_clock> w;
};

/// The same with a schedule horizon of a minute.
struct one_minute_horizon : world {
  one_minute_horizon() : world({.schedule_horizon = 60s}) {}
};
}  // namespace

BOOST_AUTO_TEST_SUITE(scheduled_delivery)

BOOST_FIXTURE_TEST_CASE(a_delivery_time_beyond_the_horizon_is_refused_before_any_sql, world) {
  const auto e = outbox::test::error_of([&] {
    w.enqueue(sql, std::vector{due_at(clock.now() + 1h), due_at(clock.now() + 366 * 24h)});
  });
  BOOST_TEST_REQUIRE(e.has_value());
  BOOST_TEST((e->kind() == outbox::errc::invalid_input));
  BOOST_TEST(e->field() == "deliver_at");
  BOOST_TEST(std::string(e->what()).find("schedule_horizon") != std::string::npos, e->what());
  BOOST_TEST(db.outbox().empty());  // neither event: all or nothing
  // A year is the default; a year and a second out is too far, a year is not.
  w.enqueue(sql, due_at(clock.now() + 365 * 24h));
}

BOOST_FIXTURE_TEST_CASE(the_horizon_is_an_option, one_minute_horizon) {
  w.enqueue(sql, due_at(clock.now() + 60s));
  BOOST_TEST((outbox::test::kind_of([&] { w.enqueue(sql, due_at(clock.now() + 61s)); }) ==
              outbox::errc::invalid_input));
}

BOOST_AUTO_TEST_CASE(the_writer_stores_a_future_time_and_treats_a_past_one_as_now) {
  const outbox::time_point now = std::chrono::system_clock::now();
  BOOST_TEST((outbox::detail::available_at(due_at(now + 5s), now) == now + 5s));
  BOOST_TEST((outbox::detail::available_at(due_at(now - 5s), now) == outbox::time_point{}));
  BOOST_TEST((outbox::detail::available_at(due_at(now), now) == outbox::time_point{}));
  outbox::event plain{"order", "42", "placed", "{}", {}};
  BOOST_TEST((outbox::detail::available_at(plain, now) == outbox::time_point{}));
  // Rounded up to a store's unit: never claimable before its time.
  const outbox::time_point t{std::chrono::microseconds(1'000'001)};
  BOOST_TEST(outbox::detail::to_unix_ceil<std::chrono::milliseconds>(t) == 1001);
  BOOST_TEST(outbox::detail::to_unix_ceil<std::chrono::milliseconds>(outbox::time_point{}) == 0);
}

BOOST_FIXTURE_TEST_CASE(an_idle_relay_sleeps_until_the_next_row_falls_due_and_no_longer, world) {
  BOOST_TEST(outbox::detail::idle_sleep(store, clock, 1000ms).count() == 1000);  // nothing waits
  w.enqueue(sql, due_at(clock.now() + 250ms));
  BOOST_TEST(outbox::detail::idle_sleep(store, clock, 1000ms).count() == 250);
  BOOST_TEST(outbox::detail::idle_sleep(store, clock, 100ms).count() == 100);  // a poll first
  clock.advance(249900us);
  BOOST_TEST(outbox::detail::idle_sleep(store, clock, 1000ms).count() == 1);  // never 0
  clock.advance(1ms);  // due: the claim takes it, nothing else waits
  BOOST_TEST(outbox::detail::idle_sleep(store, clock, 1000ms).count() == 1000);
}

BOOST_AUTO_TEST_SUITE_END()
