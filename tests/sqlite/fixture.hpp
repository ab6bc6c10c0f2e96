#pragma once
// The SQLite store fixture of the conformance suites and the end-to-end tests.

#include <unistd.h>
#include <array>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>

#include <soci/soci.h>

#include <outbox/sqlite/store.hpp>
#include <outbox/testing/manual_clock.hpp>
#include "../support/services.hpp"
#include "../support/soci_fixture.hpp"

namespace outbox::test {

/// A fresh SQLite file per fixture, migrated; removed afterwards.
struct sqlite_fixture : soci_fixture_base {
  using store_type = outbox::sqlite::store;
  static constexpr const char* name = "sqlite";
  /// What it needs to run (services.hpp).
  static constexpr service_need service{};
  /// Capability: one writer at a time (concurrent relays serialize).
  static constexpr bool single_writer = true;
  /// Capability: an unsettled claim frees its rows when its lease expires.
  /// Capability: claimed rows show up as in_flight in stats() (a locking claim writes nothing).
  static constexpr bool in_flight_visible = true;
  static constexpr bool leases_expire = true;

  sqlite_fixture() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("outbox-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".db");
    std::filesystem::remove(path_);
    auto sql = open_session();
    outbox::sqlite::store::migrate(*sql);
    *sql << "CREATE TABLE orders (id TEXT PRIMARY KEY, total INTEGER NOT NULL)";
    *sql << "CREATE TABLE applied (consumer TEXT NOT NULL, event_id TEXT NOT NULL, "
            "aggregate_id TEXT NOT NULL, seq INTEGER PRIMARY KEY)";
  }
  ~sqlite_fixture() {
    std::error_code ec;
    for (const auto& p : {path_, bare_path()})
      for (const char* suffix : {"", "-wal", "-shm"})
        std::filesystem::remove(p.string() + suffix, ec);
  }
  /// A connection to another, empty database: never migrated.
  std::unique_ptr<session_type> open_unmigrated_session() {
    auto sql = std::make_unique<session_type>("sqlite3", "db=" + bare_path().string());
    outbox::sqlite::store::configure(*sql);
    return sql;
  }
  sqlite_fixture(const sqlite_fixture&) = delete;
  sqlite_fixture& operator=(const sqlite_fixture&) = delete;

  /// The database file.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// A new connection to the fixture's database, configured (WAL, busy timeout).
  std::unique_ptr<session_type> open_session() {
    auto sql = std::make_unique<session_type>("sqlite3", "db=" + path_.string());
    outbox::sqlite::store::configure(*sql);
    return sql;
  }
  std::unique_ptr<store_type> make_store(session_type& sql,
                                         outbox::retention r = outbox::retention::keep) {
    return std::make_unique<store_type>(sql, outbox::store_options{.retention = r});
  }
  static constexpr auto retentions() {
    return std::array{outbox::retention::keep, outbox::retention::delete_on_publish};
  }

  /// A time for `outbox_schema_migrations.applied_at` in SQL text.
  static constexpr const char* now_literal = "0";
  /// The schema `insert_raw_previous_schema` writes for: the one before the latest.
  static constexpr int previous_schema_version = store_type::schema_version - 1;
  /// The largest attempt count the outbox column holds.
  static constexpr const char* max_attempts_literal = "9223372036854775807";
  /// Sets every outbox row's attempt count to the largest value the column holds, as another
  /// program might.
  static void max_out_attempts(session_type& sql) {
    sql << std::string("UPDATE outbox SET attempts = ") + max_attempts_literal;
  }
  /// Writes an outbox row directly, as another program would (no validation).
  static void insert_raw(session_type& sql, const std::string& event_id,
                         const std::string& aggregate_id, const std::string& headers) {
    sql << "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, "
           "headers, created_at) VALUES (:e, 'order', :a, 'raw', '{}', :h, "
           "CAST(strftime('%s','now') AS INTEGER) * 1000)",
        ::soci::use(event_id), ::soci::use(aggregate_id), ::soci::use(headers);
  }
  /// The same on the schema before the latest migration (no content type), as the previous
  /// release wrote rows.
  static void insert_raw_previous_schema(session_type& sql, const std::string& event_id,
                                         const std::string& aggregate_id,
                                         const std::string& headers) {
    sql << "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, "
           "headers, created_at) VALUES (:e, 'order', :a, 'raw', '{\"total\": 42}', :h, "
           "CAST(strftime('%s','now') AS INTEGER) * 1000)",
        ::soci::use(event_id), ::soci::use(aggregate_id), ::soci::use(headers);
  }
  /// Runs a statement that fails and takes the open transaction down with it, and swallows
  /// the error (a handler's "insert, ignore the duplicate"): INSERT OR ROLLBACK.
  static void swallow_a_failure_that_aborts_the_transaction(session_type& sql) {
    const std::string id = "swallowed-duplicate";
    sql << "INSERT OR IGNORE INTO orders (id, total) VALUES (:id, 1)", ::soci::use(id);
    try {
      sql << "INSERT OR ROLLBACK INTO orders (id, total) VALUES (:id, 2)", ::soci::use(id);
    } catch (const ::soci::soci_error&) {
    }
  }
  /// Throws what SOCI throws when a statement finds the database locked.
  [[noreturn]] static void raise_transient_sql_error(session_type&) {
    throw ::soci::sqlite3_soci_error("database is locked", 5 /* SQLITE_BUSY */);
  }

  // ---- the writer transaction's faults (writer_transaction_conformance.hpp) ----
  static constexpr bool commit_can_fail = true;
  static constexpr bool commit_answer_can_be_lost = false;
  static constexpr bool connection_can_be_cut = false;  ///< no connection: a file
  /// The outbox refuses every row (a BEFORE INSERT trigger, RAISE(ABORT)) until `heal`.
  static void fail_event_inserts(session_type& sql) {
    sql << "CREATE TRIGGER outbox_test_refuse BEFORE INSERT ON outbox "
           "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END";
  }
  /// COMMIT is refused after an order was written (a deferred foreign key, checked at COMMIT,
  /// which SQLite leaves open on that failure) until `heal`.
  static void fail_commits(session_type& sql) {
    sql << "PRAGMA foreign_keys = ON";
    sql << "CREATE TABLE IF NOT EXISTS test_parent (id INTEGER PRIMARY KEY)";
    sql << "CREATE TABLE IF NOT EXISTS test_child (parent INTEGER REFERENCES test_parent (id) "
           "DEFERRABLE INITIALLY DEFERRED)";
    sql << "CREATE TRIGGER outbox_test_refuse_at_commit AFTER INSERT ON orders "
           "BEGIN INSERT INTO test_child VALUES (42); END";
  }
  /// Drops what `fail_event_inserts` and `fail_commits` made.
  static void heal(session_type& sql) {
    sql << "DROP TRIGGER IF EXISTS outbox_test_refuse";
    sql << "DROP TRIGGER IF EXISTS outbox_test_refuse_at_commit";
  }

 private:
  [[nodiscard]] std::filesystem::path bare_path() const { return path_.string() + ".bare"; }
  std::filesystem::path path_;
};

/// The SQLite store fixtures of the end-to-end matrix.
using sqlite_fixtures = std::tuple<sqlite_fixture>;

}  // namespace outbox::test
