// The core's tests (test_core, module in ../core_test.cpp): the retry policy, statements,
// errors and options.
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
#include <outbox/testing/memory_database.hpp>
#include <outbox/testing/memory_transport.hpp>

#include "../../support/errors.hpp"

using namespace std::chrono_literals;

// ---- retry policy ------------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(statements)

BOOST_AUTO_TEST_CASE(a_multi_row_insert_repeats_the_tuple_and_keeps_what_follows_it_once) {
  const std::string one =
      "INSERT INTO t (a, b) VALUES ($1, coalesce($2, '(-infinity)')) ON CONFLICT (a) DO NOTHING";
  BOOST_TEST(outbox::sql::multi_row_insert(one, 2, 2) ==
             "INSERT INTO t (a, b) VALUES ($1, coalesce($2, '(-infinity)')),"
             "($3, coalesce($4, '(-infinity)')) ON CONFLICT (a) DO NOTHING");
  BOOST_TEST(outbox::sql::multi_row_insert("INSERT INTO t VALUES (?, ?)", 3, 2) ==
             "INSERT INTO t VALUES (?, ?),(?, ?),(?, ?)");
  BOOST_CHECK_THROW((void)outbox::sql::multi_row_insert("INSERT INTO t VALUES ($1", 2, 1),
                    outbox::error);
  BOOST_CHECK_THROW((void)outbox::sql::multi_row_insert("SELECT 1", 2, 1), outbox::error);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(retry)

BOOST_AUTO_TEST_CASE(backoff_grows_exponentially_up_to_the_cap) {
  outbox::exponential_backoff b{
      .initial = 100ms, .multiplier = 2.0, .max_delay = 1s, .jitter = 0, .max_attempts = 5};
  std::mt19937_64 rng(1);
  BOOST_TEST(b.delay(1, rng).count() == 100);
  BOOST_TEST(b.delay(2, rng).count() == 200);
  BOOST_TEST(b.delay(4, rng).count() == 800);
  BOOST_TEST(b.delay(5, rng).count() == 1000);
  BOOST_TEST(b.delay(60, rng).count() == 1000);
  BOOST_TEST(!b.exhausted(4));
  BOOST_TEST(b.exhausted(5));
}

BOOST_AUTO_TEST_CASE(jitter_spreads_delays_below_the_nominal_value) {
  outbox::exponential_backoff b{.initial = 1000ms, .jitter = 0.5};
  std::mt19937_64 rng(7);
  std::set<long> seen;
  for (int i = 0; i < 100; ++i) {
    const auto d = b.delay(1, rng).count();
    BOOST_TEST_REQUIRE(d <= 1000);
    BOOST_TEST_REQUIRE(d >= 500);
    seen.insert(d);
  }
  BOOST_TEST(seen.size() > 10u);
}

BOOST_AUTO_TEST_SUITE_END()

// ---- errors and options ------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(errors)

BOOST_AUTO_TEST_CASE(error_carries_class_adapter_and_native_code) {
  const outbox::error e(outbox::errc::transient, "sqlite", "5 database is locked", "claim");
  BOOST_TEST((e.kind() == outbox::errc::transient));
  BOOST_TEST(e.adapter() == "sqlite");
  BOOST_TEST(e.native_code() == "5 database is locked");
  BOOST_TEST(std::string(e.what()).find("sqlite [5 database is locked]: claim") == 0u);
  BOOST_TEST(e.code().category().name() == std::string("outbox"));
  const std::system_error& base = e;
  BOOST_TEST((base.code() == outbox::errc::transient));
}

// A store whose object commits and whose appender only appends (a third party's): a writer
// built without the object cannot commit, and `begin` says so before it opens anything.
BOOST_AUTO_TEST_CASE(begin_refuses_a_writer_that_could_not_commit) {
  struct object_commits {
    using session_type = outbox::testing::memory_session;
    struct appender {
      using session_type = outbox::testing::memory_session;
      void append(session_type&, std::span<const outbox::outgoing>) {}
    };
    void append(session_type&, std::span<const outbox::outgoing>) {}
    void commit(session_type& sql, std::span<const outbox::outgoing> rows) {
      committed += rows.size();
      sql.commit();
    }
    std::size_t committed = 0;
  };
  outbox::testing::memory_database db;
  outbox::testing::memory_session app(db);
  outbox::writer<object_commits> bare;
  const auto e = outbox::test::error_of([&] { (void)bare.begin(app); });
  BOOST_TEST_REQUIRE(e.has_value());
  BOOST_TEST((e->kind() == outbox::errc::misconfigured));
  BOOST_TEST(std::string(e->what()).find("build the writer on a store") != std::string::npos);
  BOOST_TEST(!app.in_transaction());
  object_commits store;
  outbox::writer<object_commits> on_store(store);
  auto tx = on_store.begin(app);
  tx.enqueue(outbox::event{
      .aggregate_type = "order", .aggregate_id = "1", .event_type = "placed", .payload = "{}"});
  tx.commit();
  BOOST_TEST(store.committed == 1u);
  BOOST_TEST(!app.in_transaction());
}

BOOST_AUTO_TEST_CASE(relay_refuses_contradictory_options) {
  struct nothing_store {
    outbox::claimed_batch claim(const outbox::claim_request&) { return {}; }
    outbox::settle_result settle(const outbox::claimed_batch&, std::span<const outbox::settlement>,
                                 outbox::time_point) {
      return {};
    }
    void release(const outbox::claimed_batch&) {}
  } st;
  outbox::testing::memory_transport t;
  using relay = outbox::relay<nothing_store, outbox::testing::memory_transport>;
  BOOST_CHECK_THROW(relay(st, t, {.batch_size = 0}), outbox::error);
  // A batch is held in memory: 2^40 used to be reserved up front (std::bad_alloc out of run).
  try {
    const relay accepted(st, t, {.batch_size = std::size_t{1} << 40});
    BOOST_ERROR("a batch of 2^40 was accepted");
  } catch (const outbox::error& e) {
    BOOST_TEST((e.kind() == outbox::errc::misconfigured));
  }
  BOOST_CHECK_NO_THROW(relay(st, t, {.batch_size = outbox::relay_options::max_batch_size}));
  BOOST_CHECK_THROW(relay(st, t, {.lease = 5s, .publish_timeout = 10s}), outbox::error);
  relay ok(st, t, {});
  BOOST_TEST(ok.options().owner.rfind("relay-", 0) == 0u);
  BOOST_TEST(ok.run_once() == 0u);
}

namespace {
/// A store whose claim holds a transaction that the server ends once idle for
/// `idle_in_transaction_timeout` (locking), or holds none (leasing), as MySQL's and
/// PostgreSQL's do; a locking one claims one batch at a time on its session.
struct idle_limited_store {
  outbox::store_options options_;
  [[nodiscard]] const outbox::store_options& options() const { return options_; }
  [[nodiscard]] static std::optional<std::chrono::milliseconds> claim_idle_limit(
      const outbox::store_options& o) noexcept {
    if (o.policy == outbox::claim_policy::leasing) return std::nullopt;
    return o.idle_in_transaction_timeout;
  }
  [[nodiscard]] bool claims_overlap() const {
    return options_.policy == outbox::claim_policy::leasing;
  }
  outbox::claimed_batch claim(const outbox::claim_request&) { return {}; }
  outbox::settle_result settle(const outbox::claimed_batch&, std::span<const outbox::settlement>,
                               outbox::time_point) {
    return {};
  }
  void release(const outbox::claimed_batch&) {}
};
static_assert(outbox::concepts::idle_limited_claims_store<idle_limited_store>);
/// Its `options()` is not a store's options.
struct other_options_store : idle_limited_store {
  [[nodiscard]] int options() const { return 0; }
};
static_assert(!outbox::concepts::idle_limited_claims_store<other_options_store>);
}  // namespace

// A locking claim holds its transaction through its publish (pipelined, through the publish
// of the batch before it too); the server ends a transaction idle longer than the store's
// idle-in-transaction timeout (60 s by default), the settle then finds it gone and the batch
// is published again (MySQL, --publish-timeout 35s pipelined and a broker stalled 64 s). A
// relay that could hold a claim that long is refused.
BOOST_AUTO_TEST_CASE(relay_refuses_a_claim_that_can_outlast_the_stores_idle_limit) {
  outbox::testing::memory_transport t;
  using relay = outbox::relay<idle_limited_store, outbox::testing::memory_transport>;
  idle_limited_store locking{{.policy = outbox::claim_policy::locking}};
  idle_limited_store second{{.policy = outbox::claim_policy::locking}};
  idle_limited_store leasing{{.policy = outbox::claim_policy::leasing}};
  const auto refused = [&](auto make) {
    const auto e = outbox::test::error_of(make);
    if (e) {
      BOOST_TEST((e->kind() == outbox::errc::misconfigured), e->what());
      const std::string what = e->what();
      BOOST_TEST(what.find("publish_timeout") != std::string::npos, what);
      BOOST_TEST(what.find("idle_in_transaction_timeout, 60000 ms") != std::string::npos, what);
    }
    return e.has_value();
  };
  // One batch at a time: the publish timeout and a tenth of it, at most 1 s.
  BOOST_TEST(!refused([&] { relay r(locking, t, {.lease = 80s, .publish_timeout = 59s}); }));
  BOOST_TEST(refused([&] { relay r(locking, t, {.lease = 80s, .publish_timeout = 59'001ms}); }));
  BOOST_TEST(refused([&] { relay r(locking, t, {.lease = 80s, .publish_timeout = 70s}); }));
  // Pipelined on two sessions: twice the publish timeout and 5 s.
  BOOST_TEST(
      !refused([&] { relay r(locking, second, t, {.lease = 80s, .publish_timeout = 27'500ms}); }));
  BOOST_TEST(refused([&] { relay r(locking, second, t, {.lease = 80s, .publish_timeout = 35s}); }));
  BOOST_TEST(refused([&] { relay r(second, locking, t, {.lease = 80s, .publish_timeout = 35s}); }));
  BOOST_TEST(!refused([&] {  // not pipelined (pipeline off, or a lease too short for it)
    relay r(locking, second, t, {.lease = 80s, .publish_timeout = 35s, .pipeline = false});
  }));
  BOOST_TEST(
      !refused([&] { relay r(locking, second, t, {.lease = 70s, .publish_timeout = 35s}); }));
  // A longer idle limit; a leasing claim holds no transaction.
  idle_limited_store patient{
      {.policy = outbox::claim_policy::locking, .idle_in_transaction_timeout = 80s}};
  BOOST_TEST(!refused([&] { relay r(patient, t, {.lease = 80s, .publish_timeout = 70s}); }));
  BOOST_TEST(!refused([&] { relay r(leasing, t, {.lease = 200s, .publish_timeout = 70s}); }));
  BOOST_TEST(relay::longest_claim_hold({.publish_timeout = 10s}, false) == 11s);
  BOOST_TEST(relay::longest_claim_hold({.publish_timeout = 2s}, false) == 2'200ms);
  BOOST_TEST(relay::longest_claim_hold({.publish_timeout = 10s}, true) == 25s);
}

BOOST_AUTO_TEST_SUITE_END()
