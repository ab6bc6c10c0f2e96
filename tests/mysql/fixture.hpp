#pragma once
// The MySQL store fixture: a fresh database per fixture, on the server named by
// OUTBOX_TEST_MYSQL (a SOCI mysql connect string), dropped afterwards. One instantiation per
// claim policy.

#include <unistd.h>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>

#include <soci/soci.h>

#include <outbox/mysql/store.hpp>
#include "../support/soci_fixture.hpp"

#include "../support/services.hpp"

namespace outbox::test {

/// `connect` without the keywords in `drop` (SOCI's mysql backend takes the first value of a
/// repeated keyword, so one cannot simply be appended to override it).
inline std::string mysql_connect_without(const std::string& connect,
                                         std::initializer_list<std::string_view> drop) {
  std::istringstream in(connect);
  std::string word, out;
  while (in >> word) {
    const auto eq = word.find('=');
    const std::string_view key = std::string_view(word).substr(0, eq);
    bool skip = false;
    for (const auto d : drop) skip = skip || key == d;
    if (skip) continue;
    out += (out.empty() ? "" : " ") + word;
  }
  return out;
}

template <outbox::claim_policy Policy>
struct mysql_fixture : soci_fixture_base {
  using store_type = outbox::mysql::store;
  static constexpr const char* name =
      Policy == outbox::claim_policy::locking ? "mysql-locking" : "mysql-leasing";
  /// What it needs to run (services.hpp).
  static constexpr service_need service{.env = "OUTBOX_TEST_MYSQL"};
  static constexpr bool single_writer = false;
  /// Capability: claimed rows show up as in_flight in stats() (a locking claim writes nothing).
  static constexpr bool in_flight_visible = Policy == outbox::claim_policy::leasing;
  /// Capability: a claim that is never settled frees its rows when its lease expires (leasing)
  /// rather than when its transaction ends (locking).
  static constexpr bool leases_expire = Policy == outbox::claim_policy::leasing;
  static constexpr auto policy = Policy;

  mysql_fixture() {
    static std::atomic<int> counter{0};
    database_ = "outbox_t" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
    base_ = mysql_connect_without(service_address("OUTBOX_TEST_MYSQL"), {"db", "dbname"});
    recreate(database_);
    auto sql = open_session();
    outbox::mysql::store::migrate(*sql);
    *sql << "CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY, total INT NOT NULL)";
    *sql << "CREATE TABLE applied (seq BIGINT AUTO_INCREMENT PRIMARY KEY, consumer "
            "VARCHAR(255) NOT NULL, event_id VARCHAR(64) NOT NULL, aggregate_id VARCHAR(255) "
            "NOT NULL)";
    // For swallow_a_failure_that_aborts_the_transaction: two rows to deadlock on, and ballast
    // that makes the other transaction the heavier one (InnoDB rolls back the lighter).
    *sql << "CREATE TABLE deadlock_rows (id INT PRIMARY KEY, n INT NOT NULL)";
    *sql << "INSERT INTO deadlock_rows VALUES (1, 0), (2, 0)";
    *sql << "CREATE TABLE deadlock_ballast (id INT AUTO_INCREMENT PRIMARY KEY, pad INT)";
  }
  ~mysql_fixture() {
    try {
      session_type admin("mysql", base_);
      admin << "DROP DATABASE IF EXISTS " + database_;
      admin << "DROP DATABASE IF EXISTS " + database_ + "_bare";
    } catch (...) {
    }
  }
  mysql_fixture(const mysql_fixture&) = delete;
  mysql_fixture& operator=(const mysql_fixture&) = delete;

  /// A session in another, empty database: never migrated.
  std::unique_ptr<session_type> open_unmigrated_session() {
    recreate(database_ + "_bare");
    return std::make_unique<session_type>("mysql",
                                          base_ + " db=" + database_ + "_bare charset=utf8mb4");
  }

  /// The connect string of a session on the fixture's database.
  [[nodiscard]] std::string connect_string() const {
    return base_ + " db=" + database_ + " charset=utf8mb4";
  }
  [[nodiscard]] const std::string& database() const { return database_; }
  std::unique_ptr<session_type> open_session() {
    return std::make_unique<session_type>("mysql", connect_string());
  }
  /// The same, to 127.0.0.1:`port` instead (a proxy in front of the server).
  std::unique_ptr<session_type> open_session_via(int port) {
    return std::make_unique<session_type>(
        "mysql", mysql_connect_without(connect_string(), {"host", "port"}) +
                     " host=127.0.0.1 port=" + std::to_string(port));
  }
  /// The server's TCP port, from OUTBOX_TEST_MYSQL (3306 when it names none).
  [[nodiscard]] int server_port() const {
    const auto at = base_.find("port=");
    return at == std::string::npos ? 3306 : std::stoi(base_.substr(at + 5));
  }
  std::unique_ptr<store_type> make_store(session_type& sql,
                                         outbox::retention r = outbox::retention::keep) {
    return std::make_unique<store_type>(sql,
                                        outbox::store_options{.policy = Policy, .retention = r});
  }
  static constexpr auto retentions() {
    return std::array{outbox::retention::keep, outbox::retention::delete_on_publish};
  }

  /// A time for `outbox_schema_migrations.applied_at` in SQL text.
  static constexpr const char* now_literal = "CURRENT_TIMESTAMP(6)";
  /// The schema `insert_raw_previous_schema` writes for: before migration 2 (no content type).
  /// Migration 3 (dead-letter triage) changes nothing the writer or an old row needs, so "one
  /// behind" is the release before 2.
  static constexpr int previous_schema_version = 1;
  /// Sets every outbox row's attempt count to the largest value the column holds, as another
  /// program might.
  static void max_out_attempts(session_type& sql) {
    sql << "UPDATE outbox SET attempts = 2147483647";
  }
  /// Writes an outbox row directly, as another program would (no validation).
  static void insert_raw(session_type& sql, const std::string& event_id,
                         const std::string& aggregate_id, const std::string& headers) {
    sql << "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, "
           "headers, created_at) VALUES (:e, 'order', :a, 'raw', '{}', :h, "
           "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))",
        ::soci::use(event_id), ::soci::use(aggregate_id), ::soci::use(headers);
  }
  /// The same on the schema before the latest migration (0001: the outbox, no inbox yet).
  static void insert_raw_previous_schema(session_type& sql, const std::string& event_id,
                                         const std::string& aggregate_id,
                                         const std::string& headers) {
    sql << "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, "
           "headers, created_at) VALUES (:e, 'order', :a, 'raw', '{\"total\": 42}', :h, "
           "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))",
        ::soci::use(event_id), ::soci::use(aggregate_id), ::soci::use(headers);
  }
  /// Makes the handler's transaction a deadlock victim and swallows the 1213: InnoDB rolls back
  /// the victim's whole transaction (other errors roll back only their statement on MySQL).
  static void swallow_a_failure_that_aborts_the_transaction(session_type& sql) {
    std::string database;
    sql << "SELECT DATABASE()", ::soci::into(database);
    sql << "UPDATE deadlock_rows SET n = n + 1 WHERE id = 1";
    std::atomic<long long> other_id{0};  // set once the other holds row 2
    std::atomic<bool> done{false};
    std::jthread other([&] {  // joined on the way out whatever happens
      session_type b("mysql",
                     mysql_connect_without(service_address("OUTBOX_TEST_MYSQL"), {"db", "dbname"}) +
                         " db=" + database);
      long long id = 0;
      b << "SELECT CONNECTION_ID()", ::soci::into(id);
      b << "START TRANSACTION";
      for (int i = 0; i < 20; ++i) b << "INSERT INTO deadlock_ballast (pad) VALUES (1)";
      b << "UPDATE deadlock_rows SET n = n + 1 WHERE id = 2";
      other_id = id;
      try {
        b << "UPDATE deadlock_rows SET n = n + 1 WHERE id = 1";  // waits for the handler's
      } catch (const ::soci::soci_error&) {
      }
      done = true;
      b << "ROLLBACK";
    });
    // Until the other holds row 2 (bounded, as a safety net). Then the cycle forms in either
    // order: the handler's next statement waits for row 2, or closes the cycle if the other
    // already waits for row 1; InnoDB rolls back the lighter transaction, the handler's. (A
    // wait for the other's LOCK WAIT in information_schema.innodb_trx missed it once for the
    // whole lock wait timeout, 50 s, in the sanitizer build.)
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (other_id == 0 && !done && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    try {
      sql << "UPDATE deadlock_rows SET n = n + 1 WHERE id = 2";  // the cycle: 1213 here
    } catch (const ::soci::soci_error&) {
    }
    other.join();
  }
  /// Makes the server raise a deadlock error (1213) on a statement.
  static void raise_transient_sql_error(session_type& sql) {
    sql << "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'deadlock raised by "
           "the test'";
  }

  // ---- the writer transaction's faults (writer_transaction_conformance.hpp) ----
  /// MariaDB has no deferred constraint: COMMIT cannot be made to fail from SQL.
  static constexpr bool commit_can_fail = false;
  static constexpr bool commit_answer_can_be_lost = false;
  static constexpr bool connection_can_be_cut = true;
  /// The outbox refuses every row (a BEFORE INSERT trigger signalling 45000) until `heal`.
  static void fail_event_inserts(session_type& sql) {
    sql << "CREATE TRIGGER outbox_test_refuse BEFORE INSERT ON outbox FOR EACH ROW "
           "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by the test'";
  }
  /// Drops what `fail_event_inserts` made.
  static void heal(session_type& sql) { sql << "DROP TRIGGER IF EXISTS outbox_test_refuse"; }
  /// The server ends `sql`'s connection (KILL CONNECTION from another session).
  void cut(session_type& sql) const {
    long long id = 0;
    sql << "SELECT CONNECTION_ID()", ::soci::into(id);
    session_type admin("mysql", base_);
    admin << "KILL CONNECTION " + std::to_string(id);
  }

 private:
  void recreate(const std::string& db) {
    session_type admin("mysql", base_);
    admin << "DROP DATABASE IF EXISTS " + db;
    admin << "CREATE DATABASE " + db + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin";
  }

  std::string base_;
  std::string database_;
};

using mysql_locking_fixture = mysql_fixture<outbox::claim_policy::locking>;
using mysql_leasing_fixture = mysql_fixture<outbox::claim_policy::leasing>;

/// The MySQL store fixtures of the end-to-end matrix: both claim policies.
using mysql_fixtures = std::tuple<mysql_locking_fixture, mysql_leasing_fixture>;

}  // namespace outbox::test
