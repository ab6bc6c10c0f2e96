// PostgreSQL-specific behaviour: migrations, error mapping, LISTEN/NOTIFY wake-up, reconnection
// after pg_terminate_backend, four relays on 20,000 events.
#define BOOST_TEST_MODULE postgresql
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <outbox/outbox.hpp>
#include <outbox/testing/faulty_transport.hpp>
#include <outbox/testing/memory_transport.hpp>

#include "../support/server_store_helpers.hpp"
#include "../support/tcp_proxy.hpp"
#include "fixture.hpp"
#include "listening_relay.hpp"

using namespace std::chrono_literals;
using outbox::claim_policy;
using outbox::test::postgresql_leasing_fixture;
using outbox::test::postgresql_locking_fixture;
using policies = std::tuple<postgresql_locking_fixture, postgresql_leasing_fixture>;

namespace {

using outbox::test::enqueue_many;
using outbox::test::eventually;
using outbox::test::listening_relay;

}  // namespace

BOOST_AUTO_TEST_CASE(migrate_is_idempotent_and_records_every_version) {
  postgresql_locking_fixture fx;
  auto sql = fx.open_session();
  const int n = static_cast<int>(std::size(outbox::postgresql::migrations));
  BOOST_TEST(outbox::postgresql::store::migrate(*sql) == n);
  BOOST_TEST(outbox::postgresql::store::migrate(*sql) == n);
  BOOST_TEST(postgresql_locking_fixture::count(
                 *sql, "SELECT count(*) FROM outbox_schema_migrations") == n);
}

BOOST_AUTO_TEST_CASE(errors_are_mapped_by_sqlstate) {
  postgresql_locking_fixture fx;
  auto sql = fx.open_session();
  outbox::postgresql::store st(*sql);
  const outbox::event e{"order", "1", "placed", "{}", {}};
  const outbox::outgoing row{outbox::make_uuid_v7(), &e, "{}", std::chrono::system_clock::now()};
  st.append(*sql, std::span(&row, 1));
  try {
    st.append(*sql, std::span(&row, 1));
    BOOST_ERROR("expected a duplicate");
  } catch (const outbox::error& err) {
    BOOST_TEST((err.kind() == outbox::errc::duplicate));
    BOOST_TEST(err.native_code() == "23505");
    BOOST_TEST(err.adapter() == "postgresql");
  }
  // A database that was never migrated: misconfigured, not retried forever.
  soci::session bare("postgresql", outbox::test::service_address("OUTBOX_TEST_POSTGRESQL") +
                                       " options='-c search_path=outbox_no_such_schema'");
  outbox::postgresql::store unmigrated(bare);
  try {
    (void)unmigrated.claim({"r", 10, std::chrono::system_clock::now(), 30s});
    BOOST_ERROR("expected an error");
  } catch (const outbox::error& err) {
    BOOST_TEST((err.kind() == outbox::errc::misconfigured), err.what());
  }
}

BOOST_AUTO_TEST_CASE(the_claim_uses_the_pending_indexes_and_never_scans_the_outbox) {
  postgresql_leasing_fixture fx;
  enqueue_many(fx, 5000, 5000);
  const auto now =
      std::to_string(outbox::postgresql::detail::to_us(std::chrono::system_clock::now()));
  for (auto policy : {claim_policy::leasing, claim_policy::locking}) {
    auto sql = fx.open_session();
    *sql << "ANALYZE outbox";
    outbox::postgresql::store st(*sql, {.policy = policy});
    st.release(st.claim({"r", 1, std::chrono::system_clock::now(), 30s}));  // prepares it
    *sql << "SET plan_cache_mode = force_generic_plan";  // the plan the relay reuses
    const std::string args = policy == claim_policy::leasing
                                 ? now + " + 30000000, 'r', 1, " + now + ", 500, 0"
                                 : now + ", 500, 0, '{}', '{}', 0";
    soci::rowset<std::string> rows = (sql->prepare << "EXPLAIN EXECUTE outbox_claim(" + args + ")");
    std::string plan;
    for (const auto& line : rows) plan += line + "\n";
    BOOST_TEST_MESSAGE(plan);
    BOOST_TEST(plan.find("Index Scan using outbox_pending on outbox") != std::string::npos);
    BOOST_TEST(plan.find("outbox_pending_by_aggregate") != std::string::npos);
    BOOST_TEST(plan.find("Seq Scan on outbox") == std::string::npos);
  }
}

// One hot aggregate: its statistics say one aggregate_id matches every row. The per-aggregate
// check used to walk every earlier candidate for each one (leasing: 259,000 buffers per claim
// of 500; the relay drained 10,000 such events at 370-540/s). The claim must stay on the
// aggregate's index and its cost must not grow with the backlog: the buffers one claim of 500
// touches are counted on a backlog of 2,000 and one of 20,000 rows of the same aggregate (a count,
// not a time: it does not depend on the machine's load).
namespace {
/// The buffers `EXPLAIN (ANALYZE, BUFFERS)` of `outbox_claim(args)` touched (rolled back), and
/// its plan.
std::pair<long long, std::string> claim_buffers(soci::session& sql, const std::string& args) {
  std::string plan;
  {
    soci::transaction tx(sql);  // EXPLAIN ANALYZE runs it: rolled back
    soci::rowset<std::string> rows =
        (sql.prepare << "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) EXECUTE outbox_claim(" + args +
                            ")");
    for (const auto& line : rows) plan += line + "\n";
    tx.rollback();
  }
  // The top node's buffers: the whole statement's.
  const auto at = plan.find("Buffers: shared hit=");
  if (at == std::string::npos) return {-1, plan};
  return {std::stoll(plan.substr(at + std::strlen("Buffers: shared hit="))), plan};
}

/// The claim's arguments (a claim of 500 at `now`, scan limit `scan`) under `policy`.
std::string claim_args(claim_policy policy, const std::string& now, int scan) {
  return policy == claim_policy::leasing
             ? now + " + 30000000, 'r', 1, " + now + ", 500, " + std::to_string(scan)
             : now + ", 500, 0, '{}', '{}', " + std::to_string(scan);
}
}  // namespace

// One hot aggregate: its statistics say one aggregate_id matches every row. The per-aggregate
// check used to walk every earlier candidate for each one (leasing: 259,000 buffers per claim
// of 500; the relay drained 10,000 such events at 370-540/s). The claim must stay on the
// aggregate's index and its cost must not grow with the backlog: the buffers one claim of 500
// touches are counted on a backlog of 2,000 and one of 20,000 rows of the same aggregate (a count,
// not a time: it does not depend on the machine's load). So are those of the claim a pipelined
// relay makes ahead while the aggregate's first 500 are in flight (on a second session, scan
// limit one batch plus the batch in flight, as the relay sets it): everything it looks at is
// held back, and unbounded it walked the whole backlog (leasing, pipelined: 1,700 events/s).
BOOST_AUTO_TEST_CASE(a_hot_aggregate_claim_stays_on_the_index_whatever_its_backlog) {
  for (auto policy : {claim_policy::leasing, claim_policy::locking}) {
    std::vector<long long> hits, ahead_hits;
    for (const int backlog : {2000, 20000}) {
      postgresql_leasing_fixture fx;
      enqueue_many(fx, backlog, 1);       // one aggregate
      enqueue_many(fx, 50, 50, backlog);  // and a few others behind it
      auto sql = fx.open_session();
      *sql << "ANALYZE outbox";
      outbox::postgresql::store st(*sql, {.policy = policy});
      st.release(st.claim({"r", 1, std::chrono::system_clock::now(), 30s}));  // prepares it
      *sql << "SET plan_cache_mode = force_generic_plan";  // the plan the relay reuses
      const auto now =
          std::to_string(outbox::postgresql::detail::to_us(std::chrono::system_clock::now()));
      const auto [n, plan] = claim_buffers(*sql, claim_args(policy, now, 0));
      BOOST_TEST_MESSAGE(plan);
      BOOST_TEST(plan.find("Seq Scan on outbox") == std::string::npos, plan);
      BOOST_TEST(plan.find("Backward using outbox_pending_by_aggregate") != std::string::npos,
                 plan);
      BOOST_TEST_REQUIRE(n >= 0, plan);
      hits.push_back(n);
      // All 500 claimed (locking: each passed the per-aggregate check), and held: in flight.
      auto batch = st.claim({"r", 500, std::chrono::system_clock::now(), 30s});
      BOOST_TEST(batch.size() == 500u);
      auto sql2 = fx.open_session();
      outbox::postgresql::store ahead(*sql2, {.policy = policy});
      BOOST_TEST(ahead.claim({"r", 1, std::chrono::system_clock::now(), 30s, 1000}).empty());
      *sql2 << "SET plan_cache_mode = force_generic_plan";
      const auto later =
          std::to_string(outbox::postgresql::detail::to_us(std::chrono::system_clock::now()));
      const auto [m, ahead_plan] = claim_buffers(*sql2, claim_args(policy, later, 1000));
      BOOST_TEST_MESSAGE(ahead_plan);
      BOOST_TEST(ahead_plan.find("Seq Scan on outbox") == std::string::npos, ahead_plan);
      BOOST_TEST_REQUIRE(m >= 0, ahead_plan);
      ahead_hits.push_back(m);
      st.release(batch);
    }
    BOOST_TEST_MESSAGE("claim of 500, buffers hit: backlog 2,000 "
                       << hits[0] << ", 20,000 " << hits[1]
                       << "; the claim ahead: " << ahead_hits[0] << ", " << ahead_hits[1]);
    BOOST_TEST(hits[1] < hits[0] * 3 / 2, "the claim's cost grows with the aggregate's backlog");
    BOOST_TEST(hits[1] < 40 * 500, "more than 40 buffers per claimed row");
    BOOST_TEST(ahead_hits[1] < ahead_hits[0] * 3 / 2,
               "the claim ahead's cost grows with the backlog held back");
  }
}

// The writer's one-event INSERT is prepared once per connection (postgresql_writer_bench: parsing
// and planning it every time cost about 10 points of the business transaction's rate).
BOOST_AUTO_TEST_CASE(one_event_is_appended_through_a_statement_prepared_once_per_connection) {
  using fx_t = postgresql_leasing_fixture;
  fx_t fx;
  const auto prepared = [](soci::session& s) {
    return fx_t::count(s,
                       "SELECT count(*) FROM pg_prepared_statements WHERE name = 'outbox_append'");
  };
  const auto enqueue = [](soci::session& s, outbox::writer<outbox::postgresql::store>& w,
                          std::size_t n, bool commit) {
    soci::transaction tx(s);
    std::vector<outbox::event> events(n, outbox::event{"order", "1", "placed", R"({"n":1})", {}});
    w.enqueue(s, events);
    if (commit)
      tx.commit();
    else
      tx.rollback();
  };
  auto sql = fx.open_session();
  outbox::writer<outbox::postgresql::store> w;
  BOOST_TEST(prepared(*sql) == 0);
  enqueue(*sql, w, 1, false);  // prepared inside a transaction that rolls back: it stays
  BOOST_TEST(prepared(*sql) == 1);
  enqueue(*sql, w, 1, true);
  enqueue(*sql, w, 1, true);
  BOOST_TEST(prepared(*sql) == 1);
  enqueue(*sql, w, 3, true);  // several events: one multi-row statement, not prepared
  // A new server session behind the same soci::session: prepared again there.
  sql->reconnect();
  BOOST_TEST(prepared(*sql) == 0);
  enqueue(*sql, w, 1, true);
  BOOST_TEST(prepared(*sql) == 1);
  // Deallocated behind the writer's back: that transaction fails, the next one prepares again.
  *sql << "DEALLOCATE ALL";
  try {
    enqueue(*sql, w, 1, true);
    BOOST_ERROR("an append through a deallocated statement succeeded");
  } catch (const outbox::error& e) {
    BOOST_TEST(e.native_code().find("26000") == 0u, e.what());
  }
  enqueue(*sql, w, 1, true);
  BOOST_TEST(prepared(*sql) == 1);
  // Opted out (a pooler in transaction mode): nothing prepared.
  auto other = fx.open_session();
  outbox::writer<outbox::postgresql::store> plain({.prepare_statements = false});
  enqueue(*other, plain, 1, true);
  BOOST_TEST(prepared(*other) == 0);
  BOOST_TEST(fx_t::count(*sql, "SELECT count(*) FROM outbox") == 8);
}

BOOST_AUTO_TEST_CASE(user_text_is_bound_and_bad_json_is_refused_before_sql) {
  postgresql_leasing_fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::writer w(*st);
  soci::transaction tx(*sql);
  postgresql_leasing_fixture::insert_order(*sql, "o-1", 1);
  for (const char* bad : {"{not json", R"({"s":"a\u0000b"})"}) {
    try {
      w.enqueue(*sql, outbox::event{"order", "1", "placed", bad, {}});
      BOOST_ERROR("accepted " << bad);
    } catch (const outbox::error& e) {
      BOOST_TEST(e.field() == "payload");
    }
  }
  // Quotes and SQL in every field travel as data.
  const std::string nasty = "'; DROP TABLE outbox; --";
  w.enqueue(
      *sql,
      outbox::event{nasty, nasty, nasty, R"({"q":"'; DROP TABLE outbox; --"})", {{nasty, nasty}}});
  postgresql_leasing_fixture::insert_order(*sql, "o-2", 2);
  tx.commit();  // still usable after the refusals
  BOOST_TEST(postgresql_leasing_fixture::count(*sql, "SELECT count(*) FROM orders") == 2);
  auto batch = st->claim({"r", 10, std::chrono::system_clock::now(), 30s});
  BOOST_TEST_REQUIRE(batch.size() == 1u);
  BOOST_TEST(batch.messages[0].aggregate_type == nasty);
  BOOST_TEST(batch.messages[0].headers.at(nasty) == nasty);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(notify_wakes_an_idle_relay_on_commit_even_for_rows_written_by_others,
                              Fixture, policies) {
  Fixture fx;
  listening_relay r(fx);
  BOOST_TEST_REQUIRE(r.asleep());

  auto other = fx.open_session();  // another program, plain SQL, no library
  {
    soci::transaction tx(*other);
    *other
        << "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload_bytes, "
           "created_at) VALUES ('" +
               outbox::make_uuid_v7().to_string() + "', 'order', '9', 'placed', '{}', now())";
    // Woken by hand before the commit: the relay looks, and finds nothing to publish.
    const auto steps = r.relay.stats().steps;
    auto waker = fx.open_session();
    *waker << "NOTIFY outbox";
    BOOST_TEST_REQUIRE(eventually([&] { return r.relay.stats().steps > steps; }));
    BOOST_TEST(r.transport.published_count() == 0u);  // not before the commit
    tx.commit();
  }
  BOOST_TEST(eventually([&] { return r.transport.published_count() == 1; }, 10s));
  r.runner.request_stop();
  r.runner.join();  // the stop callback interrupts the 30 s wait
  BOOST_TEST(r.relay.stats().published == 1u);
}

BOOST_AUTO_TEST_CASE(a_store_listens_again_on_the_connection_it_reconnects) {
  // LISTEN belongs to a connection: after a reconnect the store must issue it again, or a relay
  // sleeps its whole idle poll through every commit.
  postgresql_locking_fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  auto admin = fx.open_session();
  (void)st->wait_for_work(1ms);  // LISTEN on the first connection
  const int pid = st->backend_pid();
  *admin << "SELECT pg_terminate_backend(" + std::to_string(pid) + ")";
  const outbox::claim_request req{"r", 10, std::chrono::system_clock::now(), 30s};
  for (int attempt = 0; attempt < 3; ++attempt) {
    try {
      BOOST_TEST(st->claim(req).size() == 0u);
      break;
    } catch (const outbox::error& e) {
      BOOST_TEST_REQUIRE((e.kind() == outbox::errc::transient), e.what());
    }
  }
  BOOST_TEST_REQUIRE(st->backend_pid() != pid);
  (void)st->wait_for_work(1ms);  // LISTEN on the new connection, if the store issues it
  {
    auto writer_store = fx.make_store(*admin);
    outbox::writer w(*writer_store);
    soci::transaction tx(*admin);
    w.enqueue(*admin, outbox::event{"order", "l-1", "placed", "{}", {}});
    tx.commit();  // its NOTIFY reaches only listening connections
  }
  BOOST_TEST(st->wait_for_work(60s));  // woken by the notification, not the 60 s timeout
}

BOOST_AUTO_TEST_CASE_TEMPLATE(
    a_relay_whose_backend_is_terminated_mid_batch_reconnects_and_loses_nothing, Fixture, policies) {
  Fixture fx;
  constexpr int n = 300;
  enqueue_many(fx, n, 300);
  auto relay_sql = fx.open_session();
  auto relay_store = fx.make_store(*relay_sql);
  const int pid = relay_store->backend_pid();
  // Slow confirms keep each batch in flight long enough to be cut in the middle.
  outbox::testing::memory_transport t({.confirm_latency = 300ms, .record = true});
  outbox::relay relay(*relay_store, t,
                      {.batch_size = 50,
                       .lease = 5s,
                       .publish_timeout = 2s,
                       .idle_poll_min = 5ms,
                       .idle_poll_max = 50ms},
                      outbox::exponential_backoff{.initial = 10ms, .max_delay = 100ms});
  std::jthread runner([&](std::stop_token st) { relay.run(st); });
  BOOST_TEST_REQUIRE(eventually([&] { return t.published_count() > 0; }));
  {
    auto admin = fx.open_session();
    int killed = 0;
    *admin << "SELECT pg_terminate_backend(" + std::to_string(pid) + ")::int", soci::into(killed);
    BOOST_TEST(killed == 1);
  }
  auto check_sql = fx.open_session();
  auto check = fx.make_store(*check_sql);
  BOOST_TEST(eventually([&] {
    return check->stats(std::chrono::system_clock::now()).pending == 0 &&
           check->stats(std::chrono::system_clock::now()).in_flight == 0;
  }));
  runner.request_stop();
  runner.join();
  // Locking: the claim transaction died with the connection, the batch was rolled back and the
  // relay backed off. Leasing: the lease survived, so the settle retry reconnected and settled it.
  if constexpr (Fixture::policy == claim_policy::locking) BOOST_TEST(relay.stats().errors >= 1u);
  BOOST_TEST(relay_store->backend_pid() != pid);  // back on a new connection
  // Every event reached the wire; the cut batch may have gone twice (at-least-once), never lost.
  std::set<outbox::uuid> ids;
  for (const auto& m : t.wire()) ids.insert(m.id);
  BOOST_TEST(ids.size() == static_cast<std::size_t>(n));
  BOOST_TEST(fx.count(*check_sql, "SELECT count(*) FROM outbox WHERE state = 1") == n);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(four_relays_drain_20000_events_each_published_once, Fixture,
                              policies) {
  Fixture fx;
  constexpr int n = 20'000;
  enqueue_many(fx, n, 1000);
  outbox::testing::memory_transport t({.confirm_latency = 100us, .deliver = false, .record = true});
  std::vector<std::thread> relays;
  std::atomic<std::uint64_t> published{0};
  for (int r = 0; r < 4; ++r) {
    relays.emplace_back([&, r] {
      auto sql = fx.open_session();
      auto st = fx.make_store(*sql);
      outbox::relay relay(*st, t, {.batch_size = 200, .owner = "relay-" + std::to_string(r)});
      eventually([&] {
        if (relay.run_once() > 0) return false;
        return st->stats(std::chrono::system_clock::now()).pending == 0;
      });
      published += relay.stats().published;
    });
  }
  for (auto& r : relays) r.join();
  BOOST_TEST(published.load() == static_cast<std::uint64_t>(n));
  const auto wire = t.wire();
  std::set<outbox::uuid> ids;
  for (const auto& m : wire) ids.insert(m.id);
  BOOST_TEST(wire.size() == static_cast<std::size_t>(n));  // no crash here: nothing twice
  BOOST_TEST(ids.size() == static_cast<std::size_t>(n));
}

// Two pipelined relays, each on two sessions (locking claims the next batch on the other
// session; leasing could use one): every event published once, and each aggregate's events on
// the wire in commit order, although each relay claims a batch while another is in flight and
// the other relay claims beside them. A message failing in the middle (twice) too.
BOOST_AUTO_TEST_CASE_TEMPLATE(two_pipelined_relays_keep_each_aggregates_order, Fixture, policies) {
  Fixture fx;
  constexpr int n = 6'000;
  enqueue_many(fx, n, 40);
  outbox::testing::memory_transport broker(
      {.confirm_latency = 1ms, .deliver = false, .record = true});
  outbox::testing::faulty_transport<outbox::testing::memory_transport> faulty(broker);
  std::atomic<int> failures{0};
  faulty.fail_when(
      [&](const outbox::message& m) {
        return m.payload == R"({"i":3001})" && failures.fetch_add(1) < 2;
      },
      outbox::errc::transient);
  std::vector<std::jthread> relays;
  std::atomic<int> pipelining{0};
  for (int r = 0; r < 2; ++r) {
    relays.emplace_back([&, r](std::stop_token stop) {
      auto sql = fx.open_session();
      auto sql2 = fx.open_session();
      auto st = fx.make_store(*sql);
      auto second = fx.make_store(*sql2);
      outbox::relay relay(*st, *second, faulty,
                          {.batch_size = 150,
                           .idle_poll_min = 1ms,
                           .idle_poll_max = 5ms,
                           .owner = "relay-" + std::to_string(r)},
                          outbox::exponential_backoff{.initial = 1ms, .max_delay = 5ms});
      pipelining += relay.pipelines() ? 1 : 0;
      relay.run(stop);
    });
  }
  BOOST_TEST(eventually([&] { return broker.published_count() >= static_cast<std::size_t>(n); }));
  relays.clear();  // stop and join
  BOOST_TEST(pipelining.load() == 2);
  BOOST_TEST(failures.load() >= 3);  // failed twice, then went through
  auto sql = fx.open_session();
  BOOST_TEST(fx.count(*sql, "SELECT count(*) FROM outbox WHERE state <> 1") == 0);
  // Each aggregate's events on the wire in commit order, each once.
  std::map<std::string, std::vector<int>> seen;
  std::set<outbox::uuid> ids;
  for (const auto& m : broker.wire()) {
    ids.insert(m.id);
    seen[m.aggregate_id].push_back(std::stoi(m.payload.substr(5)));
  }
  BOOST_TEST(ids.size() == static_cast<std::size_t>(n));
  BOOST_TEST(broker.wire().size() == static_cast<std::size_t>(n));
  for (const auto& [aggregate, order] : seen)
    BOOST_TEST(std::is_sorted(order.begin(), order.end()), "aggregate " << aggregate);
}

// ---- failure paths (issue 9) ------------------------------------------------------------------

BOOST_AUTO_TEST_CASE_TEMPLATE(relay_and_consumer_carry_on_after_the_server_is_away_for_seconds,
                              Fixture, policies) {
  // SOCI's reconnect closes the old backend before it opens the new one; when the server is
  // still away the session is left with no backend, and every later call failed as
  // `misconfigured`, which run rethrew: one outage longer than one reconnect stopped the relay
  // and the consumer for good. Here the server is unreachable (a proxy refuses connections)
  // for many reconnects (the relay failed 10 times in a row), then back.
  Fixture fx;
  outbox::test::tcp_proxy proxy(fx.server_port());
  auto relay_sql = fx.open_session_via(proxy.port());
  auto relay_store = fx.make_store(*relay_sql);
  auto consumer_sql = fx.open_session_via(proxy.port());
  auto consumer_store = fx.make_store(*consumer_sql);
  outbox::testing::memory_transport t;
  const outbox::exponential_backoff quick{.initial = 20ms, .max_delay = 300ms, .jitter = 0};
  outbox::relay relay(*relay_store, t, {.idle_poll_min = 5ms, .idle_poll_max = 50ms}, quick);
  outbox::consumer consumer(
      *consumer_store, t,
      [](soci::session& sql, const outbox::message& m) {
        Fixture::record_applied(sql, "billing", m.id.to_string(), m.aggregate_id);
      },
      {.name = "billing", .poll_timeout = 20ms}, quick);
  std::exception_ptr relay_failed, consumer_failed;
  std::jthread relay_thread([&](std::stop_token st) {
    try {
      relay.run(st);
    } catch (...) {
      relay_failed = std::current_exception();
    }
  });
  std::jthread consumer_thread([&](std::stop_token st) {
    try {
      consumer.run(st);
    } catch (...) {
      consumer_failed = std::current_exception();
    }
  });
  auto check_sql = fx.open_session();
  const auto applied = [&] {
    return Fixture::count(*check_sql, "SELECT count(DISTINCT event_id) FROM applied");
  };
  enqueue_many(fx, 50, 10);
  BOOST_TEST_REQUIRE(eventually([&] { return applied() == 50; }, 30s));

  proxy.cut();
  enqueue_many(fx, 50, 10);  // the application writes on while the relay cannot reach it
  BOOST_TEST_REQUIRE(eventually([&] { return relay.stats().consecutive_errors >= 10; }));
  proxy.restore();
  BOOST_TEST(eventually([&] { return applied() == 100; }, 60s));
  relay_thread.request_stop();
  consumer_thread.request_stop();
  relay_thread.join();
  consumer_thread.join();
  BOOST_TEST(!relay_failed, "relay.run threw");
  BOOST_TEST(!consumer_failed, "consumer.run threw");
  BOOST_TEST(relay.stats().errors >= 1u);  // it did see the outage
  BOOST_TEST(Fixture::count(*check_sql, "SELECT count(*) FROM applied") == 100);  // once each
  BOOST_TEST(Fixture::count(*check_sql, "SELECT count(*) FROM outbox WHERE state <> 1") == 0);
  BOOST_TEST(Fixture::count(*check_sql, "SELECT count(*) FROM outbox_inbox_dead") == 0);
}

// A session that cannot be opened fails as the store's statements do, classified: a server
// away is transient 08001 (libpq gives no SQLSTATE for a connection it could not make), a
// refused password misconfigured 28P01, a connection string libpq refuses misconfigured 22023;
// a lost connection that cannot be made again stays transient, with its code.
BOOST_AUTO_TEST_CASE(a_session_that_cannot_be_opened_fails_with_its_class_and_code) {
  postgresql_locking_fixture fx;
  outbox::test::tcp_proxy proxy(fx.server_port());
  const auto via_proxy = fx.connect_string() +
                         " host=127.0.0.1 port=" + std::to_string(proxy.port()) +
                         " connect_timeout=10";
  const auto connect_error = [](const std::string& connect) -> outbox::error {
    soci::session sql;
    try {
      outbox::postgresql::store::connect(sql, connect);
    } catch (const outbox::error& e) {
      return e;
    }
    BOOST_FAIL("connected with " << connect);
    throw;
  };
  const auto refused = connect_error(fx.connect_string() + " password=wrong-Secret-4711");
  BOOST_TEST((refused.kind() == outbox::errc::misconfigured), refused.what());
  BOOST_TEST(refused.native_code() == "28P01", refused.what());
  BOOST_TEST(refused.adapter() == "postgresql");
  // A connection string libpq refuses before dialling: no try can succeed.
  for (const std::string bad : {" sslmode=bogus", " nosuchoption=1", " port=abc"}) {
    const auto e = connect_error(fx.connect_string() + bad);
    BOOST_TEST((e.kind() == outbox::errc::misconfigured), bad << ": " << e.what());
    BOOST_TEST(e.native_code() == "22023", e.what());
  }

  soci::session sql;
  outbox::postgresql::store::connect(sql, via_proxy);
  outbox::postgresql::store st(sql);
  (void)st.stats(std::chrono::system_clock::now());
  proxy.cut();  // connections closed, new ones refused
  const auto away = connect_error(via_proxy);
  BOOST_TEST((away.kind() == outbox::errc::transient), away.what());
  BOOST_TEST(away.native_code() == "08001", away.what());
  // The store's next call finds its connection lost; the one after fails to make it again.
  std::string reconnect_code = "none";
  for (int i = 0; i < 3 && reconnect_code == "none"; ++i) {
    try {
      (void)st.stats(std::chrono::system_clock::now());
    } catch (const outbox::error& e) {
      BOOST_TEST((e.kind() == outbox::errc::transient), e.what());
      if (std::string_view(e.what()).find("reconnect: ") != std::string_view::npos)
        reconnect_code = e.native_code();
    }
  }
  BOOST_TEST(reconnect_code == "08001");
  proxy.restore();
  BOOST_TEST(st.stats(std::chrono::system_clock::now()).pending >= 0);  // and back
}

BOOST_AUTO_TEST_CASE(a_connection_lost_inside_a_transaction_never_commits_on_a_new_one) {
  // The old commit went through the store's reconnecting path: with the connection gone, it
  // reconnected and sent COMMIT on the new session, where it committed nothing and succeeded.
  postgresql_locking_fixture fx;
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  const int pid = st->backend_pid();
  const auto id = outbox::make_uuid_v7();
  auto admin = fx.open_session();
  {
    auto tx = st->begin();
    BOOST_TEST(st->record_delivery("billing", id, std::chrono::system_clock::now()));
    postgresql_locking_fixture::insert_order(st->session(), "lost", 1);
    *admin << "SELECT pg_terminate_backend(" + std::to_string(pid) + ")";
    BOOST_TEST_REQUIRE(eventually(
        [&] {
          return fx.count(*admin, "SELECT count(*) FROM pg_stat_activity WHERE pid = " +
                                      std::to_string(pid)) == 0;
        },
        20s));
    try {  // the handler's next statement fails, and it swallows the error
      st->session() << "SELECT 1";
    } catch (const std::exception&) {
    }
    try {
      tx.commit();
      BOOST_ERROR("commit reported success on a lost connection");
    } catch (const outbox::error& e) {
      BOOST_TEST((e.kind() == outbox::errc::transient || e.kind() == outbox::errc::in_doubt),
                 e.what());
    }
  }
  BOOST_TEST(fx.count(*admin, "SELECT count(*) FROM outbox_inbox") == 0);
  BOOST_TEST(fx.count(*admin, "SELECT count(*) FROM orders") == 0);
  auto tx = st->begin();  // the store reconnects for the next delivery
  BOOST_TEST(st->record_delivery("billing", id, std::chrono::system_clock::now()));
  tx.commit();
  BOOST_TEST(fx.count(*admin, "SELECT count(*) FROM outbox_inbox") == 1);
  BOOST_TEST(st->backend_pid() != pid);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(notify_still_wakes_the_relay_while_an_aggregate_waits_for_a_retry,
                              Fixture, policies) {
  // x1 waits for a retry an hour away and x2 sits behind it. x2 counted as "an older claimable
  // row", so the trigger stayed silent and the relay slept through its 30 s poll.
  Fixture fx;
  {
    auto sql = fx.open_session();
    auto st = fx.make_store(*sql);
    outbox::writer w(*st);
    soci::transaction tx(*sql);
    w.enqueue(*sql, outbox::event{"order", "x", "e1", "{}", {}});
    w.enqueue(*sql, outbox::event{"order", "x", "e2", "{}", {}});
    tx.commit();
    auto head = st->claim({"r", 1, std::chrono::system_clock::now(), 30s});
    BOOST_TEST_REQUIRE(head.size() == 1u);
    std::vector<outbox::settlement> f(1);
    f[0].what = outbox::settlement::kind::retry;
    f[0].retry_at = std::chrono::system_clock::now() + 1h;
    BOOST_TEST_REQUIRE(st->settle(head, f, std::chrono::system_clock::now()).retried == 1u);
  }
  listening_relay r(fx);
  BOOST_TEST_REQUIRE(r.asleep());
  BOOST_TEST(r.transport.published_count() == 0u);
  {
    auto sql = fx.open_session();
    auto st = fx.make_store(*sql);
    outbox::writer w(*st);
    soci::transaction tx(*sql);
    w.enqueue(*sql, outbox::event{"order", "y", "e1", "{}", {}});
    tx.commit();
  }
  BOOST_TEST(eventually([&] { return r.transport.published_count() == 1; }, 10s));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(rows_with_infinite_timestamps_do_not_stop_the_relay, Fixture,
                              policies) {
  // created_at = 'infinity' made outbox_us fail inside the claim, dead_letters and stats
  // ("cannot convert infinity to bigint"): every claim threw and nothing flowed.
  Fixture fx;
  enqueue_many(fx, 3, 3);
  auto sql = fx.open_session();
  for (const char* t : {"infinity", "-infinity"})
    *sql
        << "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload_bytes, "
           "created_at) VALUES ('" +
               outbox::make_uuid_v7().to_string() + "', 'order', 'inf', 'placed', '{}', '" + t +
               "')";
  auto st = fx.make_store(*sql);
  const auto s = st->stats(std::chrono::system_clock::now());
  BOOST_TEST(s.pending == 5);
  BOOST_TEST(s.oldest_pending_age.count() > 0);
  outbox::testing::memory_transport t;
  outbox::relay relay(*st, t);
  while (relay.run_once() > 0) {
  }
  BOOST_TEST(t.published_count() == 5u);
  BOOST_TEST(st->stats(std::chrono::system_clock::now()).pending == 0);
  BOOST_CHECK_NO_THROW((void)st->dead_letters(10));
}

BOOST_AUTO_TEST_CASE(an_idle_timeout_postgresql_cannot_take_is_refused_at_construction) {
  postgresql_locking_fixture fx;
  auto sql = fx.open_session();
  for (const auto bad : {std::chrono::milliseconds(-1), std::chrono::milliseconds(0),
                         std::chrono::milliseconds(std::int64_t{1} << 31)}) {
    try {
      outbox::postgresql::store st(*sql, {.idle_in_transaction_timeout = bad});
      BOOST_ERROR("accepted " << bad.count() << " ms");
    } catch (const outbox::error& e) {
      BOOST_TEST((e.kind() == outbox::errc::misconfigured));
    }
  }
}

BOOST_AUTO_TEST_CASE(
    a_migration_that_cannot_get_its_lock_rolls_back_and_leaves_the_session_usable) {
  postgresql_locking_fixture fx;
  auto holder = fx.open_session();
  *holder << "SELECT pg_advisory_lock(7231350017261240901)";  // another process migrating
  auto sql = fx.open_session();
  *sql << "SET statement_timeout = 300";
  try {
    outbox::postgresql::store::migrate(*sql);
    BOOST_ERROR("migrated without the lock");
  } catch (const outbox::error& e) {
    BOOST_TEST((e.kind() == outbox::errc::transient), e.what());  // 57014: try again later
  }
  *holder << "SELECT pg_advisory_unlock(7231350017261240901)";
  *sql << "SET statement_timeout = 0";  // would fail (25P02) on an aborted transaction
  BOOST_TEST(outbox::postgresql::store::migrate(*sql) == outbox::postgresql::store::schema_version);
}

OUTBOX_TEST_MAIN_REQUIRING("OUTBOX_TEST_POSTGRESQL")
