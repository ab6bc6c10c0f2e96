// The in-memory store's tests (test_memory_store, module in ../memory_store_test.cpp):
// a pipelined run: the next batch claimed, the last one settled, while one is in flight.
#include <boost/test/unit_test.hpp>

#include "common.hpp"

// ---- a pipelined run: the next batch claimed, the last one settled, while one is in flight -----

BOOST_AUTO_TEST_SUITE(pipelined_runs)

BOOST_AUTO_TEST_CASE(the_next_batch_is_claimed_while_one_awaits_its_confirms) {
  for (const bool pipeline : {true, false}) {
    BOOST_TEST_CONTEXT("pipeline " << pipeline) {
      memory_database db;
      enqueue_spread(db, 400, 400);
      memory_session relay_sql(db);
      memory_store store(relay_sql);
      outbox::testing::memory_transport broker({.record = true});
      // Pipelined, the claim ahead comes (the wait ends on it); not, nothing comes in 30 ms.
      overlap_watching_transport t{&broker, &db, pipeline ? 30s : 30ms};
      outbox::relay relay(store, t, {.batch_size = 100, .pipeline = pipeline});
      BOOST_TEST(relay.pipelines() == pipeline);
      run_until(relay, [&] { return broker.published_count() == 400u; });
      BOOST_TEST(t.calls == 4);
      // Each batch but the last saw the next one claimed during its publish.
      BOOST_TEST(t.overlapped == (pipeline ? 3 : 0));
      const auto s = store.stats(std::chrono::system_clock::now());
      BOOST_TEST(s.pending == 0);
      BOOST_TEST(s.in_flight == 0);
      BOOST_TEST(relay.stats().published == 400u);
      BOOST_TEST(relay.stats().batches == 4u);
    }
  }
}

// A claim made while a batch is in flight must not take a later message of an aggregate whose
// earlier message is in that batch; and a message that fails is settled (waiting for its retry)
// before the next claim looks. One hot aggregate among many, batches of 30, one message in the
// middle failing twice: every aggregate's messages reach the wire in commit order.
BOOST_AUTO_TEST_CASE(order_holds_across_batches_in_flight_and_a_failure) {
  for (const bool keeps : {true, false}) {
    BOOST_TEST_CONTEXT("keeps_publish_order " << keeps) {
      memory_database db;
      const auto ids = enqueue_hot_among_many(db);
      memory_session relay_sql(db);
      memory_store store(relay_sql);
      outbox::testing::memory_transport broker({.record = true});
      const auto failing = ids[60];  // the hot aggregate's 21st
      int failures = 0;
      // It fails twice. An order-keeping transport also fails the later messages of its
      // aggregate in the same call (its promise); they can be in no other call, as no claim
      // takes them while it is unpublished (if one did, they would fail and be retried, and
      // `retried` would say so).
      bool passed = false;  // the failing message went through
      const auto fail = [&](const outbox::message& m) {
        if (m.id == failing) {
          passed = failures++ >= 2;
          return !passed;
        }
        return keeps && m.aggregate_id == "hot" && failing < m.id && !passed;
      };
      const auto check = [&](auto& faulty) {
        faulty.fail_when(fail, outbox::errc::transient);
        outbox::relay relay(store, faulty, {.batch_size = 30, .idle_poll_min = 1ms},
                            outbox::exponential_backoff{.initial = 1ms, .max_delay = 2ms});
        BOOST_TEST(relay.pipelines());
        run_until(relay, [&] { return broker.published_count() == 300u; });
        BOOST_TEST(relay.stats().retried == 2u);
        BOOST_TEST(relay.stats().reordered == 0u);
      };
      if (keeps) {
        // Keeping its promise: the rest of the run fails with the failing message.
        outbox::testing::faulty_transport<outbox::testing::memory_transport, true> faulty(broker);
        check(faulty);
      } else {
        outbox::testing::faulty_transport<outbox::testing::memory_transport, false> faulty(broker);
        check(faulty);
      }
      BOOST_TEST((by_aggregate(broker.wire()) == commit_order(db)));
      BOOST_TEST(store.stats(std::chrono::system_clock::now()).in_flight == 0);
    }
  }
}

// With two stores (two sessions), batches alternate between them: a store that cannot claim
// ahead on its own session (locking) claims on the other one. Order holds the same way.
BOOST_AUTO_TEST_CASE(two_stores_take_turns) {
  memory_database db;
  enqueue_spread(db, 500, 7);
  memory_session s1(db), s2(db);
  memory_store m1(s1), m2(s2);
  counting_store c1(&m1), c2(&m2);
  outbox::testing::memory_transport broker({.record = true});
  outbox::relay one(c1, broker, {.batch_size = 50});
  BOOST_TEST(!one.pipelines());  // one store that cannot claim ahead: a batch at a time
  outbox::relay relay(c1, c2, broker, {.batch_size = 50, .idle_poll_min = 1ms});
  BOOST_TEST(relay.pipelines());
  run_until(relay, [&] { return broker.published_count() == 500u; });
  BOOST_TEST(c1.claims >= 5);
  BOOST_TEST(c2.claims >= 5);
  BOOST_TEST(c1.misuses == 0);  // never a claim on a session whose batch is open
  BOOST_TEST(c2.misuses == 0);
  BOOST_TEST((by_aggregate(broker.wire()) == commit_order(db)));
  BOOST_CHECK_THROW(outbox::relay(c1, c1, broker), outbox::error);  // the same store twice
}

// What the worker does can fail (the claim ahead, the settle of the batch before), and so can
// the transport while a batch is claimed ahead: `run` backs off and carries on; a batch whose
// settle failed is left to its lease and taken over; a batch claimed ahead of a transport
// failure is released (its attempt given back). Nothing is lost and nothing stays held.
BOOST_AUTO_TEST_CASE(failures_on_either_side_lose_nothing_and_hold_nothing) {
  outbox::testing::manual_clock clock;
  memory_database db;
  enqueue_spread(db, 300, 300);
  memory_session relay_sql(db);
  memory_store store(relay_sql);
  outbox::testing::memory_transport broker({.record = true});
  throwing_transport t{&broker, 3};
  int errors = 0;
  outbox::relay relay(store, t,
                      {.batch_size = 50,
                       .lease = 30s,
                       .idle_poll_min = 1ms,
                       .idle_poll_max = 2ms,
                       .on_error = [&](const outbox::error&) { ++errors; }},
                      outbox::exponential_backoff{.initial = 1ms, .max_delay = 2ms}, clock);
  // Armed before the relay starts, keyed to counts (armed later, they raced the relay, which
  // could drain all 300 first): the first claim fails; after the settles of the first two
  // batches, a settle that keeps failing (3 tries, the release of the batch the transport
  // failed): its batch stays leased until the lease runs out.
  db.fail_next(1, outbox::errc::transient, memory_operation::claim);
  db.fail_after(2, 3, outbox::errc::transient, memory_operation::settle);
  std::jthread runner([&](std::stop_token stop) { relay.run(stop); });
  BOOST_TEST(eventually([&] { return db.failures_injected() == 4u; }));
  BOOST_TEST(eventually([&] {
    const auto s = store.stats(clock.now());
    return s.pending == 0 && s.in_flight == 50;  // all published but the batch left to its lease
  }));
  clock.advance(31s);  // the lease runs out: the batch is taken over and published again
  BOOST_TEST(eventually([&] {
    const auto s = store.stats(clock.now());
    return s.pending == 0 && s.in_flight == 0;
  }));
  runner.request_stop();
  runner.join();
  BOOST_TEST(errors >= 3);  // the claim, the transport, the settle
  const auto rows = db.outbox();
  BOOST_TEST(rows.size() == 300u);
  std::set<outbox::uuid> on_wire;
  for (const auto& m : broker.wire()) on_wire.insert(m.id);
  for (const auto& row : rows) {
    BOOST_TEST(row.published_at.has_value());
    BOOST_TEST(on_wire.contains(row.id));
    BOOST_TEST(row.attempts <= 2);  // a release gives its attempt back
  }
  BOOST_TEST(store.stats(clock.now()).in_flight == 0);
}

// Stopping: the batch in flight is settled and the batch claimed ahead released before `run`
// returns, so another relay can take the rest at once, not after a lease.
BOOST_AUTO_TEST_CASE(stopping_leaves_nothing_held) {
  memory_database db;
  enqueue_spread(db, 1000, 1000);
  memory_session relay_sql(db);
  memory_store store(relay_sql);
  outbox::testing::memory_transport broker({.confirm_latency = 2ms});
  outbox::relay relay(store, broker, {.batch_size = 10});
  run_until(relay, [&] { return broker.published_count() >= 200u; });
  const auto s = store.stats(std::chrono::system_clock::now());
  BOOST_TEST(s.in_flight == 0);
  BOOST_TEST(s.pending == static_cast<std::int64_t>(1000 - relay.stats().published));
  for (const auto& row : db.outbox()) BOOST_TEST(row.attempts == (row.published_at ? 1 : 0));
}

// What a metrics exporter sees: one report per settled batch (from the relay's thread or the
// worker's), whose fates match its settle and add up to the relay's counters; and a run of
// errors counted in `consecutive_errors` until a step goes through again.
BOOST_AUTO_TEST_CASE(batch_reports_add_up_and_error_runs_are_counted) {
  memory_database db;
  enqueue_spread(db, 600, 600);
  memory_session relay_sql(db);
  memory_store store(relay_sql);
  outbox::testing::memory_transport broker({.confirm_latency = 1ms});
  std::mutex mutex;
  std::size_t reports = 0, published = 0, messages = 0, mismatched = 0, untimed = 0;
  std::vector<std::uint64_t> runs;  // consecutive_errors as each error is reported
  outbox::relay<memory_store<>, outbox::testing::memory_transport>* self = nullptr;
  outbox::relay relay(
      store, broker,
      {.batch_size = 50,
       .idle_poll_min = 1ms,
       .idle_poll_max = 2ms,
       .on_error = [&](const outbox::error&) { runs.push_back(self->stats().consecutive_errors); },
       .on_batch =
           [&](const outbox::batch_report& r) {
             std::lock_guard lock(mutex);
             ++reports;
             published += r.settled.published;
             messages += r.messages.size();
             const auto confirmed = std::count_if(r.fates.begin(), r.fates.end(), [](auto& f) {
               return f.what == outbox::settlement::kind::published;
             });
             if (r.fates.size() != r.messages.size() ||
                 static_cast<std::size_t>(confirmed) != r.settled.published)
               ++mismatched;
             if (r.publish <= 0ns || r.claim <= 0ns || r.settle <= 0ns) ++untimed;
           }},
      outbox::exponential_backoff{.initial = 1ms, .max_delay = 2ms});
  self = &relay;
  BOOST_TEST(relay.pipelines());
  db.fail_next(3, outbox::errc::transient, memory_operation::claim);
  run_until(relay, [&] { return relay.stats().published == 600u; });
  const auto st = relay.stats();
  std::lock_guard lock(mutex);
  BOOST_TEST(reports == st.batches);
  BOOST_TEST(published == 600u);
  BOOST_TEST(messages == 600u);
  BOOST_TEST(mismatched == 0u);
  BOOST_TEST(untimed == 0u);
  BOOST_TEST((runs == std::vector<std::uint64_t>{1, 2, 3}));
  BOOST_TEST(st.consecutive_errors == 0u);  // the steps after them went through
}

// The pauses of `run` while the database is away are the retry policy's delays, capped by
// error_backoff_max: with a policy whose delays are a minute, a relay still takes up its work
// at once after three failed claims. Its steps count what went through.
BOOST_AUTO_TEST_CASE(run_backs_off_at_most_error_backoff_max_and_counts_its_steps) {
  memory_database db;
  enqueue_spread(db, 100, 100);
  memory_session relay_sql(db);
  memory_store store(relay_sql);
  outbox::testing::memory_transport broker;
  outbox::relay relay(
      store, broker,
      {.batch_size = 50, .idle_poll_min = 1ms, .idle_poll_max = 2ms, .error_backoff_max = 2ms},
      outbox::exponential_backoff{.initial = 60s, .max_delay = 60s, .jitter = 0});
  db.fail_next(3, outbox::errc::transient, memory_operation::claim);
  run_until(relay, [&] { return relay.stats().published == 100u; });  // not after 3 minutes
  const auto st = relay.stats();
  BOOST_TEST(st.errors == 3u);
  BOOST_TEST(st.steps >= 2u);  // two batches of 50, at least
  BOOST_CHECK_THROW(outbox::relay(store, broker, {.error_backoff_max = 0ms}), outbox::error);
}

BOOST_AUTO_TEST_SUITE_END()
