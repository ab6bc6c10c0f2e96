#pragma once
// The PostgreSQL store fixture: a fresh schema per fixture (search_path), in the database named
// by OUTBOX_TEST_POSTGRESQL, dropped afterwards. One instantiation per claim policy.

#include <unistd.h>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>

#include <soci/soci.h>

#include <outbox/postgresql/store.hpp>
#include <outbox/testing/manual_clock.hpp>
#include "../support/soci_fixture.hpp"

#include "../support/services.hpp"

namespace outbox::test {

template <outbox::claim_policy Policy>
struct postgresql_fixture : soci_fixture_base {
  using store_type = outbox::postgresql::store;
  static constexpr const char* name =
      Policy == outbox::claim_policy::locking ? "postgresql-locking" : "postgresql-leasing";
  /// What it needs to run (services.hpp).
  static constexpr service_need service{.env = "OUTBOX_TEST_POSTGRESQL"};
  static constexpr bool single_writer = false;
  /// Capability: a claim that is never settled frees its rows when its lease expires (leasing)
  /// rather than when its transaction ends (locking).
  /// Capability: claimed rows show up as in_flight in stats() (a locking claim writes nothing).
  static constexpr bool in_flight_visible = Policy == outbox::claim_policy::leasing;
  static constexpr bool leases_expire = Policy == outbox::claim_policy::leasing;
  static constexpr auto policy = Policy;

  postgresql_fixture() {
    static std::atomic<int> counter{0};
    schema_ = "outbox_t" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
    base_ = service_address("OUTBOX_TEST_POSTGRESQL");
    {
      session_type admin("postgresql", base_);
      admin << "SET client_min_messages = warning";
      admin << "DROP SCHEMA IF EXISTS " + schema_ + " CASCADE";
      admin << "CREATE SCHEMA " + schema_;
    }
    auto sql = open_session();
    outbox::postgresql::store::migrate(*sql);
    *sql << "CREATE TABLE orders (id text PRIMARY KEY, total integer NOT NULL)";
    *sql << "CREATE TABLE applied (seq bigserial PRIMARY KEY, consumer text NOT NULL, "
            "event_id text NOT NULL, aggregate_id text NOT NULL)";
  }
  ~postgresql_fixture() {
    try {
      session_type admin("postgresql", base_);
      admin << "SET client_min_messages = warning";
      admin << "DROP SCHEMA IF EXISTS " + schema_ + " CASCADE";
      admin << "DROP SCHEMA IF EXISTS " + schema_ + "_bare CASCADE";
    } catch (...) {
    }
  }
  /// A session in another, empty schema: never migrated.
  std::unique_ptr<session_type> open_unmigrated_session() {
    {
      session_type admin("postgresql", base_);
      admin << "SET client_min_messages = warning";
      admin << "DROP SCHEMA IF EXISTS " + schema_ + "_bare CASCADE";
      admin << "CREATE SCHEMA " + schema_ + "_bare";
    }
    return std::make_unique<session_type>(
        "postgresql",
        base_ + " options='-c search_path=" + schema_ + "_bare -c client_min_messages=warning'");
  }
  postgresql_fixture(const postgresql_fixture&) = delete;
  postgresql_fixture& operator=(const postgresql_fixture&) = delete;

  /// The connect string of a session in the fixture's schema.
  [[nodiscard]] std::string connect_string() const {
    return base_ + " options='-c search_path=" + schema_ + " -c client_min_messages=warning'";
  }
  std::unique_ptr<session_type> open_session() {
    return std::make_unique<session_type>("postgresql", connect_string());
  }
  /// The same, to 127.0.0.1:`port` instead (a proxy in front of the server; libpq takes the
  /// last value of a repeated keyword).
  std::unique_ptr<session_type> open_session_via(int port) {
    return std::make_unique<session_type>(
        "postgresql", connect_string() + " host=127.0.0.1 port=" + std::to_string(port));
  }
  /// The server's TCP port, from OUTBOX_TEST_POSTGRESQL (5432 when it names none).
  [[nodiscard]] int server_port() const {
    const auto at = base_.find("port=");
    return at == std::string::npos ? 5432 : std::stoi(base_.substr(at + 5));
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
  static constexpr const char* now_literal = "now()";
  /// The schema `insert_raw_previous_schema` writes for: before migration 4 (payload jsonb, no
  /// content type). Migration 5 (the log-tailing relay's state 3) changes nothing the writer or
  /// an old row needs, so "one behind" is the release before 4.
  static constexpr int previous_schema_version = 3;
  /// The largest attempt count the outbox column holds.
  static constexpr const char* max_attempts_literal = "2147483647";
  /// Sets every outbox row's attempt count to the largest value the column holds, as another
  /// program might.
  static void max_out_attempts(session_type& sql) {
    sql << std::string("UPDATE outbox SET attempts = ") + max_attempts_literal;
  }
  /// Writes an outbox row directly, as another program would (no validation).
  static void insert_raw(session_type& sql, const std::string& event_id,
                         const std::string& aggregate_id, const std::string& headers) {
    sql << "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, "
           "payload_bytes, headers, created_at) VALUES (CAST(:e AS uuid), 'order', :a, 'raw', "
           "'{}', CAST(:h AS jsonb), now())",
        ::soci::use(event_id), ::soci::use(aggregate_id), ::soci::use(headers);
  }
  /// The same on the schema before the latest migration (payload jsonb, no content type), as
  /// the previous release wrote rows.
  static void insert_raw_previous_schema(session_type& sql, const std::string& event_id,
                                         const std::string& aggregate_id,
                                         const std::string& headers) {
    sql << "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, "
           "headers, created_at) VALUES (CAST(:e AS uuid), 'order', :a, 'raw', "
           "'{\"total\": 42}', CAST(:h AS jsonb), now())",
        ::soci::use(event_id), ::soci::use(aggregate_id), ::soci::use(headers);
  }
  /// Runs a statement that fails and takes the open transaction down with it, and swallows
  /// the error (a handler's "insert, ignore the duplicate"): any error aborts a PostgreSQL
  /// transaction.
  static void swallow_a_failure_that_aborts_the_transaction(session_type& sql) {
    const std::string id = "swallowed-duplicate";
    sql << "INSERT INTO orders (id, total) VALUES (:id, 1) ON CONFLICT DO NOTHING", ::soci::use(id);
    try {
      sql << "INSERT INTO orders (id, total) VALUES (:id, 2)", ::soci::use(id);
    } catch (const ::soci::soci_error&) {
    }
  }
  /// Makes the server raise a serialization failure (SQLSTATE 40001) on a statement.
  static void raise_transient_sql_error(session_type& sql) {
    sql << "DO $$ BEGIN RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001'; "
           "END $$";
  }

  // ---- the writer transaction's faults (writer_transaction_conformance.hpp) ----
  static constexpr bool commit_can_fail = true;
  static constexpr bool commit_answer_can_be_lost = false;
  static constexpr bool connection_can_be_cut = true;
  /// The outbox refuses every row (a BEFORE INSERT trigger raising P0001) until `heal`.
  static void fail_event_inserts(session_type& sql) {
    refusal_function(sql);
    sql << "CREATE TRIGGER outbox_test_refuse BEFORE INSERT ON outbox FOR EACH ROW "
           "EXECUTE FUNCTION outbox_test_refuse()";
  }
  /// COMMIT is refused after an order was written (a deferred constraint trigger on orders,
  /// checked at COMMIT) until `heal`.
  static void fail_commits(session_type& sql) {
    refusal_function(sql);
    sql << "CREATE CONSTRAINT TRIGGER outbox_test_refuse_at_commit AFTER INSERT ON orders "
           "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION outbox_test_refuse()";
  }
  /// Drops what `fail_event_inserts` and `fail_commits` made.
  static void heal(session_type& sql) {
    sql << "DROP TRIGGER IF EXISTS outbox_test_refuse ON outbox";
    sql << "DROP TRIGGER IF EXISTS outbox_test_refuse_at_commit ON orders";
  }
  /// The server ends `sql`'s connection (pg_terminate_backend, waiting until it is gone).
  void cut(session_type& sql) const {
    const int pid = PQbackendPID(outbox::postgresql::detail::handle(sql));
    session_type admin("postgresql", base_);
    admin << "SELECT pg_terminate_backend(" + std::to_string(pid) + ", 30000)";
  }

  static void refusal_function(session_type& sql) {
    sql << "CREATE OR REPLACE FUNCTION outbox_test_refuse() RETURNS trigger LANGUAGE plpgsql AS "
           "$$ BEGIN RAISE EXCEPTION 'refused by the test' USING ERRCODE = 'P0001'; END $$";
  }

 private:
  std::string base_;
  std::string schema_;
};

using postgresql_locking_fixture = postgresql_fixture<outbox::claim_policy::locking>;
using postgresql_leasing_fixture = postgresql_fixture<outbox::claim_policy::leasing>;

/// The PostgreSQL store fixtures of the end-to-end matrix: both claim policies.
using postgresql_fixtures = std::tuple<postgresql_locking_fixture, postgresql_leasing_fixture>;

}  // namespace outbox::test
