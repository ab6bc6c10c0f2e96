// The core's tests (test_core, module in ../core_test.cpp): the relay's and the consumer's
// long-running loops (what they back off from, what stops them), and the testing doubles.
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <cctype>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <outbox/outbox.hpp>
#include <outbox/sql/statements.hpp>
#include <outbox/store_options.hpp>
#include <outbox/testing/duplicating_receiver.hpp>
#include <outbox/testing/faulty_transport.hpp>
#include <outbox/testing/manual_clock.hpp>
#include <outbox/testing/memory_transport.hpp>

#include "../../support/errors.hpp"

using namespace std::chrono_literals;

// ---- long-running loops: what they back off from, what stops them -----------------------------

namespace {
/// An inbox store whose `begin` fails as `transient` the first `failures` times.
struct flaky_inbox {
  using session_type = int;
  struct transaction {
    void commit() {}
  };
  int session_ = 0;
  int failures = 0;
  int dead = 0;
  session_type& session() { return session_; }
  transaction begin() {
    if (failures > 0) {
      --failures;
      throw outbox::error(outbox::errc::transient, "test", {}, "database is busy");
    }
    return {};
  }
  bool record_delivery(std::string_view, const outbox::uuid&, outbox::time_point) { return true; }
  void dead_letter_delivery(std::string_view, const outbox::message&, std::string_view,
                            outbox::time_point) {
    ++dead;
  }
};

/// A database client's own exception type, and a store that knows it.
struct deadlock_detected : std::runtime_error {
  deadlock_detected() : std::runtime_error("deadlock detected") {}
};
struct classifying_inbox : flaky_inbox {
  std::optional<outbox::errc> classify(const std::exception& e) const {
    if (dynamic_cast<const deadlock_detected*>(&e)) return outbox::errc::transient;
    return std::nullopt;
  }
};
static_assert(outbox::concepts::classifying_store<classifying_inbox>);
static_assert(!outbox::concepts::classifying_store<flaky_inbox>);

/// An inbox that keeps names of at most 8 characters (MySQL's kind of limit, made small), and
/// one whose limit has no unit (a bare number is not a `name_limit`).
struct short_names_inbox : flaky_inbox {
  static constexpr outbox::name_limit consumer_name_limit{8, true};
};
struct bare_limit_inbox : flaky_inbox {
  static constexpr std::size_t consumer_name_limit = 8;
};
static_assert(outbox::concepts::consumer_name_limited_store<short_names_inbox>);
static_assert(!outbox::concepts::consumer_name_limited_store<bare_limit_inbox>);
static_assert(!outbox::concepts::consumer_name_limited_store<flaky_inbox>);

/// A retry policy that records which delays were asked for, and waits for none.
struct recording_retry {
  std::vector<int>* asked;
  int max_attempts = 3;
  template <class Rng>
  std::chrono::milliseconds delay(int attempt, Rng&) const {
    asked->push_back(attempt);
    return 0ms;
  }
  bool exhausted(int attempt) const noexcept { return attempt >= max_attempts; }
};

/// A receiver whose `receive` throws `kind` a number of times, then asks `stop` to stop.
struct failing_receiver {
  outbox::errc kind;
  int failures;
  std::stop_source* stop;
  std::optional<outbox::delivery> receive(std::chrono::milliseconds) {
    if (failures-- > 0) throw outbox::error(kind, "test", {}, "receive failed");
    stop->request_stop();
    return std::nullopt;
  }
  void ack(const outbox::delivery&) {}
  void nack(const outbox::delivery&, bool) {}
};

outbox::message one_message() {
  outbox::message m;
  m.id = outbox::make_uuid_v7();
  m.aggregate_type = "order";
  m.aggregate_id = "1";
  m.event_type = "placed";
  m.payload = "{}";
  return m;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(loops)

BOOST_AUTO_TEST_CASE(consumer_backs_off_more_after_each_transient_failure_and_spends_no_attempt) {
  // The database away for 8 tries: each retry waits longer than the one before (it waited the
  // first-attempt delay every time: 579 retries in 5 s), and none of them spends an attempt
  // (max_attempts is 3: the old code never dead-lettered these either, but for the wrong reason).
  flaky_inbox st;
  st.failures = 8;
  outbox::testing::memory_transport t;
  (void)t.publish(std::vector{one_message()}, std::chrono::steady_clock::now() + 1s);
  std::vector<int> asked;
  outbox::consumer c(
      st, t, [](int&, const outbox::message&) {}, {.name = "c"}, recording_retry{&asked});
  using outcome = decltype(c)::outcome;
  outcome last = outcome::idle;
  for (int i = 0; i < 20 && last != outcome::applied; ++i) last = c.poll_once();
  BOOST_TEST((last == outcome::applied));
  BOOST_TEST((asked == std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}));
  BOOST_TEST(st.dead == 0);
  BOOST_TEST(c.stats().retried == 8u);
}

BOOST_AUTO_TEST_CASE(consumer_classifies_a_handler_sql_error_by_the_store_and_retries_it) {
  // A deadlock in the handler's own statement is transient: retried, never a dead letter after
  // max_attempts (it was a "handler bug", dead after 3 quick attempts).
  classifying_inbox st;
  outbox::testing::memory_transport t;
  (void)t.publish(std::vector{one_message()}, std::chrono::steady_clock::now() + 1s);
  std::vector<int> asked;
  int calls = 0;
  outbox::consumer c(
      st, t,
      [&](int&, const outbox::message&) {
        if (++calls <= 6) throw deadlock_detected();
      },
      {.name = "c"}, recording_retry{&asked});
  using outcome = decltype(c)::outcome;
  outcome last = outcome::idle;
  for (int i = 0; i < 20 && last != outcome::applied; ++i) last = c.poll_once();
  BOOST_TEST((last == outcome::applied));
  BOOST_TEST(calls == 7);
  BOOST_TEST(st.dead == 0);
  // The same failure from a store that cannot classify it spends attempts: dead after 3.
  flaky_inbox plain;
  (void)t.publish(std::vector{one_message()}, std::chrono::steady_clock::now() + 1s);
  outbox::consumer d(
      plain, t, [](int&, const outbox::message&) { throw deadlock_detected(); }, {.name = "d"},
      recording_retry{&asked});
  using outcome_d = decltype(d)::outcome;
  outcome_d last_d = outcome_d::idle;
  for (int i = 0; i < 20 && last_d != outcome_d::dead_lettered; ++i) last_d = d.poll_once();
  BOOST_TEST((last_d == outcome_d::dead_lettered));
  BOOST_TEST(plain.dead == 1);
}

BOOST_AUTO_TEST_CASE(consumer_requires_a_name) {
  flaky_inbox st;
  outbox::testing::memory_transport t;
  try {
    outbox::consumer c(st, t, [](int&, const outbox::message&) {});
    BOOST_ERROR("a consumer without a name was accepted");
  } catch (const outbox::error& e) {
    BOOST_TEST((e.kind() == outbox::errc::misconfigured));
  }
}

BOOST_AUTO_TEST_CASE(consumer_refuses_a_name_its_store_cannot_keep_whole) {
  // Counted in the limit's unit: 8 two-byte characters fit 8 characters, 9 do not.
  short_names_inbox st;
  outbox::testing::memory_transport t;
  const auto refused = [&](std::string name) {
    try {
      outbox::consumer c(st, t, [](int&, const outbox::message&) {}, {.name = std::move(name)});
      return false;
    } catch (const outbox::error& e) {
      BOOST_TEST((e.kind() == outbox::errc::misconfigured), e.what());
      return true;
    }
  };
  std::string eight;
  for (int i = 0; i < 8; ++i) eight += "\xc3\xa9";
  BOOST_TEST(!refused(eight));
  BOOST_TEST(refused(eight + "x"));
  BOOST_TEST(refused("\xc3"));  // not UTF-8
  // A store without a limit keeps any length, but never a name that is not text.
  flaky_inbox any;
  BOOST_CHECK_NO_THROW(outbox::consumer(any, t, [](int&, const outbox::message&) {},
                                        {.name = std::string(100'000, 'n')}));
  BOOST_CHECK_THROW(outbox::consumer(any, t, [](int&, const outbox::message&) {},
                                     {.name = std::string("a\0b", 3)}),
                    outbox::error);
}

BOOST_AUTO_TEST_CASE(consumer_run_backs_off_from_every_error_but_misconfigured) {
  flaky_inbox st;
  std::stop_source stop;
  failing_receiver r{outbox::errc::permanent, 3, &stop};
  std::vector<int> asked;
  int reported = 0;
  outbox::consumer c(
      st, r, [](int&, const outbox::message&) {},
      {.name = "c", .on_error = [&](const outbox::error&) { ++reported; }},
      recording_retry{&asked});
  BOOST_CHECK_NO_THROW(c.run(stop.get_token()));  // a permanent error used to escape run
  BOOST_TEST(reported == 3);
  BOOST_TEST(c.stats().errors == 3u);
  BOOST_TEST((asked == std::vector<int>{1, 2, 3}));

  std::stop_source stop2;
  failing_receiver bad{outbox::errc::misconfigured, 1, &stop2};
  outbox::consumer c2(
      st, bad, [](int&, const outbox::message&) {}, {.name = "c"}, recording_retry{&asked});
  BOOST_CHECK_THROW(c2.run(stop2.get_token()), outbox::error);
}

BOOST_AUTO_TEST_CASE(relay_run_backs_off_from_every_error_but_misconfigured) {
  struct failing_store {
    outbox::errc kind;
    int failures;
    std::stop_source* stop;
    outbox::claimed_batch claim(const outbox::claim_request&) {
      if (failures-- > 0) throw outbox::error(kind, "test", {}, "claim failed");
      stop->request_stop();
      return {};
    }
    outbox::settle_result settle(const outbox::claimed_batch&, std::span<const outbox::settlement>,
                                 outbox::time_point) {
      return {};
    }
    void release(const outbox::claimed_batch&) {}
  };
  outbox::testing::memory_transport t;
  const outbox::exponential_backoff quick{.initial = 1ms, .max_delay = 2ms, .jitter = 0};
  std::stop_source stop;
  failing_store st{outbox::errc::permanent, 3, &stop};
  int reported = 0;
  outbox::relay r(st, t,
                  {.idle_poll_min = 1ms,
                   .idle_poll_max = 2ms,
                   .on_error = [&](const outbox::error&) { ++reported; }},
                  quick);
  BOOST_CHECK_NO_THROW(r.run(stop.get_token()));  // a permanent error used to escape run
  BOOST_TEST(reported == 3);
  BOOST_TEST(r.stats().errors == 3u);

  std::stop_source stop2;
  failing_store bad{outbox::errc::misconfigured, 1, &stop2};
  outbox::relay r2(bad, t, {.idle_poll_min = 1ms, .idle_poll_max = 2ms}, quick);
  BOOST_CHECK_THROW(r2.run(stop2.get_token()), outbox::error);
}

// The pause after an error is the pause the retry policy asks for: neither work waiting (a
// store whose wait_for_work says so at once: a log-tailing store holding events its table
// claim could not get past, a notification per commit) nor `wake()` ends it. Seen: 4,000 to
// 6,000 failed claims a second, each one an ERROR in the server's log.
BOOST_AUTO_TEST_CASE(relay_run_does_not_spin_on_errors_while_work_is_waiting) {
  struct busy_failing_store {
    std::atomic<int> claims{0};
    outbox::claimed_batch claim(const outbox::claim_request&) {
      ++claims;
      throw outbox::error(outbox::errc::permanent, "test", {}, "claim refused");
    }
    outbox::settle_result settle(const outbox::claimed_batch&, std::span<const outbox::settlement>,
                                 outbox::time_point) {
      return {};
    }
    void release(const outbox::claimed_batch&) {}
    bool wait_for_work(std::chrono::milliseconds) { return true; }  // always work waiting
    void interrupt() noexcept {}
  };
  static_assert(outbox::concepts::waking_store<busy_failing_store>);
  busy_failing_store st;
  outbox::testing::memory_transport t;
  const outbox::exponential_backoff every_20ms{.initial = 20ms, .max_delay = 20ms, .jitter = 0};
  outbox::relay r(st, t, {.idle_poll_min = 1ms, .idle_poll_max = 2ms, .error_backoff_max = 20ms},
                  every_20ms);
  const auto start = std::chrono::steady_clock::now();
  std::jthread runner([&](std::stop_token stop) { r.run(stop); });
  std::jthread waker([&](std::stop_token stop) {
    while (!stop.stop_requested()) {
      r.wake();  // a writer's wake-up per commit
      std::this_thread::sleep_for(1ms);
    }
  });
  // Six claims take five pauses of 20 ms at least (a spin makes thousands in that time); a
  // loaded machine only makes them take longer.
  while (st.claims.load() < 6) std::this_thread::sleep_for(1ms);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  waker.request_stop();
  waker.join();
  runner.request_stop();
  runner.join();
  BOOST_TEST((elapsed >= 100ms), std::chrono::duration<double>(elapsed).count()
                                     << " s for 6 claims: the relay spins");
  BOOST_TEST(r.stats().errors == static_cast<std::uint64_t>(st.claims.load()));
}

// `run` claims again at once after a batch that claimed something, but not after one it could
// only release (its publish deadline had passed: the claim outlived its lease): that would spin
// on the database. It sleeps its idle poll then, as after an empty claim.
namespace {
/// A store whose every claim outlived its lease (one message, lease_until in the past); it can
/// claim ahead (pipelined) or not, as told.
template <bool Overlap>
struct late_store {
  std::atomic<int> claims{0};  // read by the test while the relay runs
  std::atomic<int> releases{0};
  [[nodiscard]] bool claims_overlap() const { return Overlap; }
  outbox::claimed_batch claim(const outbox::claim_request& req) {
    ++claims;
    outbox::claimed_batch b;
    b.lease_until = req.now - 1s;  // the lease ran out during the claim
    b.messages.push_back(one_message());
    return b;
  }
  outbox::settle_result settle(const outbox::claimed_batch&,
                               std::span<const outbox::settlement> fates, outbox::time_point) {
    outbox::settle_result r;
    for (const auto& f : fates) r.released += f.what == outbox::settlement::kind::release;
    releases += static_cast<int>(r.released);
    return r;
  }
  void release(const outbox::claimed_batch& b) { releases += static_cast<int>(b.size()); }
};
using late_stores = std::tuple<late_store<false>, late_store<true>>;
}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(relay_run_does_not_spin_on_a_batch_it_can_only_release, Store,
                              late_stores) {
  Store st;
  outbox::testing::memory_transport t;
  outbox::relay r(st, t, {.idle_poll_min = 20ms, .idle_poll_max = 20ms});
  BOOST_TEST(r.pipelines() == st.claims_overlap());
  const auto start = std::chrono::steady_clock::now();
  std::jthread runner([&](std::stop_token stop) { r.run(stop); });
  // One claim per idle poll (20 ms), two when pipelined (the one claimed ahead): twelve claims
  // take 220 ms at least (100 ms pipelined); half that is checked, a spin makes thousands.
  while (st.claims.load() < 12) std::this_thread::sleep_for(1ms);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  runner.request_stop();
  runner.join();
  BOOST_TEST(t.published_count() == 0u);
  // Every claim was given back, the batch claimed ahead included.
  BOOST_TEST(r.stats().released == static_cast<std::uint64_t>(st.claims.load()));
  BOOST_TEST(st.releases.load() == st.claims.load());
  const auto least = (r.pipelines() ? 12 / 2 / 2 : 12 / 2) * 20ms;
  BOOST_TEST((elapsed >= least), std::chrono::duration<double>(elapsed).count()
                                     << " s for 12 claims: the relay spins");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(testing_doubles)

BOOST_AUTO_TEST_CASE(duplicating_receiver_storms_with_copies_an_inbox_absorbs) {
  // An inbox that remembers: the storm's copies must come back as duplicates, never applied
  // twice; their acks must not reach the transport (which owes nothing for them).
  struct remembering_inbox : flaky_inbox {
    std::set<std::string> seen;
    std::vector<std::string> asked;  // every delivery's id, in order
    bool record_delivery(std::string_view, const outbox::uuid& id, outbox::time_point) {
      asked.push_back(id.to_string());
      return seen.insert(id.to_string()).second;
    }
  };
  remembering_inbox st;
  outbox::testing::memory_transport t;
  std::vector<outbox::message> batch;
  batch.reserve(5);
  for (int i = 0; i < 5; ++i) batch.push_back(one_message());
  (void)t.publish(batch, std::chrono::steady_clock::now() + 1s);
  outbox::testing::duplicating_receiver dup(t, 3);  // keeps the last 3
  std::map<std::string, int> applied;
  outbox::consumer c(st, dup, [&](int&, const outbox::message& m) { ++applied[m.id.to_string()]; },
                     {.name = "c", .poll_timeout = 10ms});
  using outcome = decltype(c)::outcome;
  for (int i = 0; i < 5; ++i) BOOST_TEST((c.poll_once() == outcome::applied));
  BOOST_TEST(!dup.last_was_copy());
  dup.storm(4);
  for (int i = 0; i < 12; ++i) {
    BOOST_TEST((c.poll_once() == outcome::duplicate));
    BOOST_TEST(dup.last_was_copy());
  }
  BOOST_TEST(dup.copies() == 12u);
  BOOST_TEST((c.poll_once() == outcome::idle));  // the storm is over, the transport empty
  BOOST_TEST(applied.size() == 5u);
  for (const auto& [id, n] : applied) BOOST_TEST(n == 1);
  // The copies were of the last 3, in their order, 4 rounds: the first 2 never came again.
  BOOST_REQUIRE(st.asked.size() == 17u);
  for (std::size_t i = 0; i < 12; ++i)
    BOOST_TEST(st.asked[5 + i] == batch[2 + i % 3].id.to_string());
  BOOST_TEST(c.stats().duplicates_skipped == 12u);
  // Every real delivery was acked once; nothing is left unacked for a copy.
  BOOST_TEST(t.unacked() == 0u);
}

BOOST_AUTO_TEST_CASE(duplicating_receiver_hands_out_requeued_copies_again_in_their_order) {
  outbox::testing::memory_transport t;
  std::vector<outbox::message> batch;
  batch.reserve(3);
  for (int i = 0; i < 3; ++i) batch.push_back(one_message());
  (void)t.publish(batch, std::chrono::steady_clock::now() + 1s);
  outbox::testing::duplicating_receiver dup(t);
  for (int i = 0; i < 3; ++i) dup.ack(*dup.receive(10ms));
  dup.storm(1);
  const auto a = dup.receive(10ms), b = dup.receive(10ms);
  BOOST_REQUIRE(a && b);
  dup.nack(*a, true);  // given back, as a consumer's release_held does: oldest first
  dup.nack(*b, true);
  std::vector<outbox::uuid> order;
  while (const auto d = dup.receive(10ms)) {
    BOOST_TEST(dup.last_was_copy());
    order.push_back(d->msg.id);
    dup.ack(*d);
  }
  BOOST_TEST((order == std::vector<outbox::uuid>{batch[0].id, batch[1].id, batch[2].id}));
  BOOST_TEST(dup.copies() == 5u);  // 3 of the storm, 2 handed out again
  dup.nack(*a, false);             // a copy dropped goes nowhere
  BOOST_TEST(!dup.receive(10ms));
  BOOST_TEST(t.unacked() == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
