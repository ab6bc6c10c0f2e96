#pragma once
// The in-memory store fixture of the conformance suites and the end-to-end tests: one
// memory_database per fixture; sessions and stores on it. The same interface as the SQL
// fixtures (tests/support/soci_fixture.hpp): the business tables "orders" and "applied" are
// memory tables, the observation hooks read the database's committed state.

#include <array>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include <outbox/testing/memory_store.hpp>
#include <outbox/uuid.hpp>
#include "services.hpp"

namespace outbox::test {

struct memory_store_fixture {
  using session_type = outbox::testing::memory_session;
  using store_type = outbox::testing::memory_store<>;
  static constexpr const char* name = "memory";
  /// What it needs to run (services.hpp).
  static constexpr service_need service{};
  /// Capability: one writer at a time (concurrent relays serialize).
  static constexpr bool single_writer = false;
  /// Capability: claimed rows show up as in_flight in stats() (a locking claim writes nothing).
  static constexpr bool in_flight_visible = true;
  /// Capability: an unsettled claim frees its rows when its lease expires.
  static constexpr bool leases_expire = true;

  memory_store_fixture() = default;
  memory_store_fixture(const memory_store_fixture&) = delete;
  memory_store_fixture& operator=(const memory_store_fixture&) = delete;

  std::unique_ptr<session_type> open_session() { return std::make_unique<session_type>(*db_); }
  std::unique_ptr<store_type> make_store(
      session_type& sql, outbox::testing::retention r = outbox::testing::retention::keep) {
    return std::make_unique<store_type>(sql, outbox::testing::memory_store_options{.retention = r});
  }
  static constexpr auto retentions() {
    return std::array{outbox::testing::retention::keep,
                      outbox::testing::retention::delete_on_publish};
  }
  [[nodiscard]] outbox::testing::memory_database& database() { return *db_; }

  // ---- the application's statements ----------------------------------------------------------

  /// Starts a transaction the way an application would.
  static auto begin(session_type& sql) { return std::make_unique<session_type::transaction>(sql); }
  /// Inserts a business row: the statement a service would run beside enqueue.
  static void insert_order(session_type& sql, const std::string& id, int total) {
    sql.insert("orders", id, std::to_string(total));
  }
  /// Records an applied effect (what a consumer's handler writes): a row of its own (a fresh
  /// key) whose value is the event id, so a second application shows as a second row.
  static void record_applied(session_type& sql, const std::string& consumer,
                             const std::string& event_id, const std::string& aggregate_id) {
    sql.insert("applied", consumer + "/" + aggregate_id + "/" + outbox::make_uuid_v7().to_string(),
               event_id);
  }

  // ---- observation hooks (committed state) ---------------------------------------------------

  static std::int64_t outbox_rows(session_type& sql) { return size(sql.database().outbox()); }
  static std::int64_t published_rows(session_type& sql) {
    std::int64_t n = 0;
    for (const auto& r : sql.database().outbox()) n += r.published_at.has_value();
    return n;
  }
  static std::int64_t orders(session_type& sql) { return size(sql.database().table("orders")); }
  static std::int64_t inbox_rows(session_type& sql) { return size(sql.database().inbox()); }
  static std::int64_t inbox_dead_rows(session_type& sql) {
    return size(sql.database().inbox_dead());
  }
  static std::int64_t inbox_dead_rows_with_error(session_type& sql, const std::string& text) {
    std::int64_t n = 0;
    for (const auto& r : sql.database().inbox_dead()) n += r.error == text;
    return n;
  }
  static std::int64_t applied_rows(session_type& sql) {
    return size(sql.database().table("applied"));
  }
  static std::int64_t applied_rows_for(session_type& sql, const std::string& event_id) {
    std::int64_t n = 0;
    for (const auto& [key, value] : sql.database().table("applied")) n += value == event_id;
    return n;
  }
  static std::int64_t applied_events(session_type& sql) {
    std::set<std::string> ids;
    for (const auto& [key, value] : sql.database().table("applied")) ids.insert(value);
    return size(ids);
  }

  // ---- what another program (or a failing statement) does -----------------------------------

  /// Sets every outbox row's attempt count to the largest value the column holds.
  static void max_out_attempts(session_type& sql) {
    sql.database().update_rows([](outbox::testing::memory_row& r) {
      r.attempts = std::numeric_limits<std::int64_t>::max();
    });
  }
  /// Writes an outbox row directly, as another program would (no validation).
  static void insert_raw(session_type& sql, const std::string& event_id,
                         const std::string& aggregate_id, const std::string& headers) {
    outbox::testing::memory_row row;
    row.id = outbox::uuid::parse(event_id).value_or(outbox::uuid{});
    row.aggregate_type = "order";
    row.aggregate_id = aggregate_id;
    row.event_type = "raw";
    row.payload = "{}";
    row.headers_json = headers;
    row.created_at = std::chrono::system_clock::now();
    sql.database().insert_raw(std::move(row));
  }
  /// Runs a statement that fails and takes the open transaction down with it, and swallows
  /// the error (a handler's "insert, ignore the duplicate"): a failed statement aborts a memory
  /// transaction, as it does a PostgreSQL one.
  static void swallow_a_failure_that_aborts_the_transaction(session_type& sql) {
    const std::string id = "swallowed-duplicate";
    sql.put("orders", id, "1");
    try {
      sql.insert("orders", id, "2");
    } catch (const outbox::testing::memory_statement_error&) {
    }
  }
  /// Makes the next statement on the session fail as transient (an injected fault), and runs it.
  static void raise_transient_sql_error(session_type& sql) {
    sql.database().fail_next(1, outbox::errc::transient,
                             outbox::testing::memory_operation::statement);
    (void)sql.find("orders", "any");
  }

  // ---- the writer transaction's faults (writer_transaction_conformance.hpp) ----
  static constexpr bool commit_can_fail = true;
  static constexpr bool commit_answer_can_be_lost = true;
  /// The next commit happens, and reports `in_doubt` (its answer lost).
  static void lose_commit_answer(session_type& sql) {
    sql.database().fail_next(1, outbox::errc::in_doubt, outbox::testing::memory_operation::commit);
  }
  static constexpr bool connection_can_be_cut = false;  ///< no connection
  /// The next event append fails (`permanent`).
  static void fail_event_inserts(session_type& sql) {
    sql.database().fail_next(1, outbox::errc::permanent, outbox::testing::memory_operation::append);
  }
  /// The next commit fails (`transient`, rolled back).
  static void fail_commits(session_type& sql) {
    sql.database().fail_next(1, outbox::errc::transient, outbox::testing::memory_operation::commit);
  }
  /// No more injected failures.
  static void heal(session_type& sql) { sql.database().heal(); }

 private:
  template <class C>
  static std::int64_t size(const C& c) {
    return static_cast<std::int64_t>(c.size());
  }

  std::unique_ptr<outbox::testing::memory_database> db_ =
      std::make_unique<outbox::testing::memory_database>();
};

/// The memory store fixtures of the end-to-end matrix.
using memory_store_fixtures = std::tuple<memory_store_fixture>;

}  // namespace outbox::test
