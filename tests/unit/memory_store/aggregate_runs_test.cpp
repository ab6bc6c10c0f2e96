// The in-memory store's tests (test_memory_store, module in ../memory_store_test.cpp):
// the relay's runs of an aggregate in one call, on a transport that keeps publish order.
#include <boost/test/unit_test.hpp>

#include "common.hpp"

// ---- an aggregate's run in one call, on a transport that keeps publish order ------------------

BOOST_AUTO_TEST_SUITE(aggregate_runs)

BOOST_AUTO_TEST_CASE(a_hot_aggregates_batch_is_one_call_where_the_transport_keeps_order) {
  for (const bool keeps : {true, false}) {
    memory_database db;
    const auto ids = enqueue_hot(db);
    memory_session relay_sql(db);
    memory_store store(relay_sql);
    outbox::testing::memory_transport broker({.record = true});
    int calls = 0;
    if (keeps) {
      counting_transport<true> t{&broker};
      outbox::relay relay(store, t, {.batch_size = 500});
      BOOST_TEST(relay.run_once() == 200u);
      calls = t.calls;
    } else {
      counting_transport<false> t{&broker};
      outbox::relay relay(store, t, {.batch_size = 500});
      BOOST_TEST(relay.run_once() == 200u);
      calls = t.calls;
    }
    // One confirm round trip for the batch, or one per message (waves).
    BOOST_TEST(calls == (keeps ? 1 : 200));
    BOOST_TEST((ids_of(broker.wire()) == ids));
    BOOST_TEST(store.stats(std::chrono::system_clock::now()).pending == 0);
  }
}

// A wave is not started with less time left than the last one took: its confirms would come
// after the deadline, charging an attempt and sending it twice (a 4 s broker under a 10 s
// publish timeout: the third wave of each batch went out twice). The rest is released, no
// attempt spent, and goes out with the next claim, in order.
BOOST_AUTO_TEST_CASE(a_wave_the_deadline_cannot_cover_is_released_not_sent) {
  memory_database db;
  const auto ids = enqueue(db, 4, [](int i) { return "a" + std::to_string(i % 2); });
  memory_session relay_sql(db);
  memory_store store(relay_sql);
  outbox::testing::memory_transport broker({.record = true});
  slow_first_wave_transport t{&broker};
  outbox::relay relay(store, t, {.batch_size = 10, .publish_timeout = 500ms});
  BOOST_TEST(relay.run_once() == 4u);
  BOOST_TEST(t.calls == 1);  // the second wave was not sent
  BOOST_TEST((ids_of(broker.wire()) == std::vector<outbox::uuid>{ids[0], ids[1]}));
  BOOST_TEST(relay.stats().released == 2u);
  BOOST_TEST(relay.stats().retried == 0u);
  drain(relay, store);
  BOOST_TEST((ids_of(broker.wire()) == ids));  // each once, in order
  BOOST_TEST(relay.stats().retried == 0u);
}

// A transport that promises to keep order and then fails one message in the middle of a run
// while confirming the later ones (a broker that nacks one message and takes the next): the
// later ones are on the wire ahead of the failed one, which follows after its retry. The relay
// cannot take them back; it settles each by its own confirm and counts them (reordered). With
// waves (no promise) the rest of the run is held back instead, and the order holds.
BOOST_AUTO_TEST_CASE(a_failure_in_the_middle_of_a_run_is_counted_or_holds_the_rest_back) {
  // 200 events of one aggregate, the 50th failing once; the relay's stats and the wire.
  const auto run = []<bool KeepsOrder>(std::vector<outbox::uuid>& ids) {
    memory_database db;
    ids = enqueue_hot(db);
    memory_session relay_sql(db);
    memory_store store(relay_sql);
    outbox::testing::memory_transport broker({.record = true});
    outbox::testing::faulty_transport<outbox::testing::memory_transport, KeepsOrder> faulty(broker);
    const auto failing = ids[49];
    faulty.fail_when([&](const outbox::message& m) { return m.id == failing; },
                     outbox::errc::transient);
    outbox::relay relay(store, faulty, {.batch_size = 500},
                        outbox::exponential_backoff{.initial = 1ms, .max_delay = 1ms});
    BOOST_TEST(relay.run_once() == 200u);
    faulty.heal();
    drain(relay, store);
    BOOST_TEST(relay.stats().retried == 1u);
    return std::pair{relay.stats(), ids_of(broker.wire())};
  };
  std::vector<outbox::uuid> ids;
  {
    const auto [stats, wire] = run.operator()<true>(ids);
    BOOST_TEST(stats.reordered == 150u);
    BOOST_TEST(stats.released == 0u);
    auto expected = ids;
    expected.erase(expected.begin() + 49);
    expected.push_back(ids[49]);  // after its retry
    BOOST_TEST((wire == expected));
  }
  {
    const auto [stats, wire] = run.operator()<false>(ids);
    BOOST_TEST(stats.reordered == 0u);
    BOOST_TEST(stats.released == 150u);
    BOOST_TEST((wire == ids));  // the order holds
  }
}

/// 200 events of one aggregate, relayed through a transport that keeps publish order and fails
/// every event from the 50th on with `cls` until healed.
struct failing_from_the_50th {
  explicit failing_from_the_50th(outbox::errc cls)
      : ids(enqueue_hot(db)), from_50th(ids.begin() + 49, ids.end()) {
    faulty.fail_when([this](const outbox::message& m) { return from_50th.contains(m.id); }, cls);
  }
  memory_database db;
  std::vector<outbox::uuid> ids;
  std::set<outbox::uuid> from_50th;
  memory_session relay_sql{db};
  memory_store<> store{relay_sql};
  outbox::testing::memory_transport broker{{.record = true}};
  outbox::testing::faulty_transport<outbox::testing::memory_transport, true> faulty{broker};
};

// A transport that keeps its promise fails the rest of an aggregate's run after a failure
// (here: everything from the 50th on, the first time): the relay releases the rest, their
// attempts given back (they did not fail on their own), and they follow after the retry, in
// order; only the first failure is charged an attempt.
BOOST_AUTO_TEST_CASE(after_a_failure_the_rest_of_a_run_is_released_not_charged) {
  failing_from_the_50th w(outbox::errc::transient);
  outbox::relay relay(w.store, w.faulty, {.batch_size = 500},
                      outbox::exponential_backoff{.initial = 1ms, .max_delay = 1ms});
  BOOST_TEST(relay.run_once() == 200u);
  BOOST_TEST(relay.stats().retried == 1u);
  BOOST_TEST(relay.stats().released == 150u);
  BOOST_TEST(relay.stats().reordered == 0u);
  w.faulty.heal();
  drain(relay, w.store);
  BOOST_TEST((ids_of(w.broker.wire()) == w.ids));  // the order holds
  // Attempts: the 50th was charged twice (the failure, the publish), the others once.
  for (const auto& row : w.db.outbox()) BOOST_TEST(row.attempts == (row.id == w.ids[49] ? 2 : 1));
}

// A broker that took the start of a batch and then went silent (frozen mid-batch): the tail it
// never answered for is in doubt, deferred with its attempt given back, so even a one-attempt
// policy dead-letters none of it (the broker may have stored it); it goes out after the
// deferral, in order, each event charged for the one attempt that published it.
BOOST_AUTO_TEST_CASE(a_tail_the_broker_never_answered_is_deferred_not_charged) {
  failing_from_the_50th w(outbox::errc::in_doubt);
  outbox::relay relay(
      w.store, w.faulty, {.batch_size = 500},
      outbox::exponential_backoff{.initial = 1ms, .max_delay = 1ms, .max_attempts = 1});
  BOOST_TEST(relay.run_once() == 200u);
  BOOST_TEST(relay.stats().published == 49u);
  BOOST_TEST(relay.stats().dead_lettered == 0u);
  BOOST_TEST(relay.stats().retried == 0u);
  BOOST_TEST(relay.stats().released == 151u);
  w.faulty.heal();
  drain(relay, w.store);
  BOOST_TEST(relay.stats().dead_lettered == 0u);
  BOOST_TEST((ids_of(w.broker.wire()) == w.ids));  // the order holds
  for (const auto& row : w.db.outbox()) BOOST_TEST(row.attempts == 1);
}

BOOST_AUTO_TEST_SUITE_END()
