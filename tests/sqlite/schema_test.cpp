// SQLite-specific checks: migrations, connection settings, query plans, error mapping.
#define BOOST_TEST_MODULE sqlite schema
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include <outbox/writer.hpp>

#include "fixture.hpp"

using outbox::test::sqlite_fixture;

namespace {
std::string plan_of(soci::session& sql, const std::string& query) {
  soci::rowset<soci::row> rows = (sql.prepare << "EXPLAIN QUERY PLAN " + query);
  std::string plan;
  for (const auto& r : rows) plan += r.get<std::string>(3) + "\n";
  return plan;
}
}  // namespace

BOOST_AUTO_TEST_CASE(migrate_is_idempotent_and_records_every_version) {
  sqlite_fixture fx;  // migrated once already
  auto sql = fx.open_session();
  const int n = static_cast<int>(std::size(outbox::sqlite::migrations));
  BOOST_TEST(outbox::sqlite::store::migrate(*sql) == n);
  BOOST_TEST(outbox::sqlite::store::migrate(*sql) == n);
  BOOST_TEST(sqlite_fixture::count(*sql, "SELECT count(*) FROM outbox_schema_migrations") == n);
  std::string name;
  *sql << "SELECT name FROM outbox_schema_migrations WHERE version = 1", soci::into(name);
  BOOST_TEST(name == "0001_outbox");
}

BOOST_AUTO_TEST_CASE(configure_turns_on_wal) {
  sqlite_fixture fx;
  auto sql = fx.open_session();
  std::string mode;
  *sql << "PRAGMA journal_mode", soci::into(mode);
  BOOST_TEST(mode == "wal");
}

BOOST_AUTO_TEST_CASE(the_claim_walks_the_state_index_and_never_scans_the_table) {
  sqlite_fixture fx;
  auto sql = fx.open_session();
  // Skewed and analyzed: 2,000 pending rows of one aggregate, its first 10 under a lease, so the
  // statistics say one aggregate_id matches every row.
  outbox::sqlite::store st(*sql);
  outbox::writer<outbox::sqlite::store> w;
  std::vector<outbox::event> events(2'000, outbox::event{"order", "hot", "placed", "{}", {}});
  {
    soci::transaction tx(*sql);
    w.enqueue(*sql, events);
    tx.commit();
  }
  BOOST_TEST(st.claim({"r", 10, outbox::system_clock{}.now(), std::chrono::seconds(30)}).size() ==
             10u);
  *sql << "ANALYZE";
  std::string claim(outbox::sqlite::statements::claim);
  const auto plan = plan_of(*sql, claim);
  BOOST_TEST_MESSAGE(plan);
  BOOST_TEST(plan.find("USING INDEX outbox_by_state") != std::string::npos);
  BOOST_TEST(plan.find("USING INDEX outbox_waiting_by_aggregate") != std::string::npos);
  BOOST_TEST(plan.find("SCAN o") == std::string::npos);
  BOOST_TEST(plan.find("SCAN outbox") == std::string::npos);
  // Behind the leased rows nothing of the aggregate is claimable.
  BOOST_TEST(st.claim({"r", 10, outbox::system_clock{}.now(), std::chrono::seconds(30)}).empty());
}

BOOST_AUTO_TEST_CASE(a_scan_limit_bounds_the_rows_a_claim_looks_at_and_no_limit_looks_past_them) {
  sqlite_fixture fx;
  auto sql = fx.open_session();
  outbox::sqlite::store st(*sql);
  outbox::writer<outbox::sqlite::store> w;
  // 20 rows of one aggregate, then 5 of five others.
  std::vector<outbox::event> events(20, outbox::event{"order", "hot", "placed", "{}", {}});
  for (int i = 0; i < 5; ++i)
    events.push_back({"order", "cold-" + std::to_string(i), "p", "{}", {}});
  {
    soci::transaction tx(*sql);
    w.enqueue(*sql, events);
    tx.commit();
  }
  const auto now = outbox::system_clock{}.now();
  const auto claim = [&](std::size_t limit, std::size_t scan) {
    return st.claim({"r", limit, now, std::chrono::seconds(30), scan});
  };
  // Only the 3 oldest claimable rows are looked at.
  const auto first = claim(100, 3);
  BOOST_TEST(first.size() == 3u);
  for (const auto& m : first.messages) BOOST_TEST(m.aggregate_id == "hot");
  // The hot aggregate is held back behind them: a bounded claim looks at its rows only.
  BOOST_TEST(claim(100, 10).empty());
  // Unbounded, the claim looks past them and takes the other aggregates' rows.
  const auto rest = claim(100, 0);
  BOOST_TEST(rest.size() == 5u);
  for (const auto& m : rest.messages) BOOST_TEST(m.aggregate_id.rfind("cold-", 0) == 0u);
}

BOOST_AUTO_TEST_CASE(a_session_not_connected_to_sqlite_is_refused_as_misconfigured) {
  soci::session unconnected;
  try {
    outbox::sqlite::store st(unconnected);
    BOOST_FAIL("expected an error");
  } catch (const outbox::error& e) {
    BOOST_TEST((e.kind() == outbox::errc::misconfigured));
    BOOST_TEST(e.adapter() == "sqlite");
  }
}

// A session that cannot be opened fails as the store's statements do, classified by its
// result code: a file in a directory that does not exist cannot be opened (14), misconfigured.
BOOST_AUTO_TEST_CASE(a_session_that_cannot_be_opened_fails_with_its_class_and_code) {
  soci::session sql;
  try {
    outbox::sqlite::store::connect(sql, "/nonexistent-dir-outbox/x.db");
    BOOST_ERROR("expected an error");
  } catch (const outbox::error& err) {
    BOOST_TEST((err.kind() == outbox::errc::misconfigured), err.what());
    BOOST_TEST(err.native_code().starts_with("14 "), err.native_code());
    BOOST_TEST(err.adapter() == "sqlite");
  }
}

BOOST_AUTO_TEST_CASE(a_reused_event_id_is_reported_as_duplicate_with_the_native_code) {
  sqlite_fixture fx;
  auto sql = fx.open_session();
  outbox::sqlite::store st(*sql);
  const outbox::event e{"order", "1", "placed", "{}", {}};
  const outbox::outgoing row{outbox::make_uuid_v7(), &e, "{}", std::chrono::system_clock::now()};
  st.append(*sql, std::span(&row, 1));
  try {
    st.append(*sql, std::span(&row, 1));
    BOOST_FAIL("expected an error");
  } catch (const outbox::error& err) {
    BOOST_TEST((err.kind() == outbox::errc::duplicate));
    BOOST_TEST(err.native_code().find("2067") == 0u);
  }
}

BOOST_AUTO_TEST_CASE(a_claim_blocked_past_the_busy_timeout_gets_a_transient_error) {
  sqlite_fixture fx;
  auto holder = fx.open_session();
  auto other = std::make_unique<soci::session>(
      "sqlite3", "db=" + [&] {
        std::string path;
        *holder << "SELECT file FROM pragma_database_list WHERE name = 'main'", soci::into(path);
        return path;
      }());
  outbox::sqlite::store::configure(*other, {.lock_timeout = std::chrono::milliseconds(50)});
  *holder << "BEGIN IMMEDIATE";
  outbox::sqlite::store st(*other, {.session = {.lock_timeout = std::chrono::milliseconds(50)}});
  outbox::testing::manual_clock clock;
  try {
    (void)st.claim({"r", 10, clock.now(), std::chrono::seconds(30)});
    BOOST_FAIL("expected an error");
  } catch (const outbox::error& err) {
    BOOST_TEST((err.kind() == outbox::errc::transient));
  }
  *holder << "ROLLBACK";
  BOOST_TEST(st.claim({"r", 10, clock.now(), std::chrono::seconds(30)}).empty());
}
