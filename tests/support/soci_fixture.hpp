#pragma once
// What every SOCI-based store fixture does the same way: the application's statements (portable
// SQL on the tables each fixture creates: orders, applied), counting, and the observation hooks
// the conformance suites use instead of SQL text (so that a store without SQL, the in-memory
// one, runs them too: tests/support/memory_store_fixture.hpp implements the same hooks).

#include <cstdint>
#include <memory>
#include <string>

#include <soci/soci.h>

namespace outbox::test {

struct soci_fixture_base {
  using session_type = ::soci::session;

  static std::int64_t count(session_type& sql, const std::string& query) {
    long long n = 0;
    sql << query, ::soci::into(n);
    return n;
  }
  /// Starts a transaction the way an application would (SOCI's transaction type).
  static auto begin(session_type& sql) { return std::make_unique<::soci::transaction>(sql); }
  /// Inserts a business row: the statement a service would run beside enqueue.
  static void insert_order(session_type& sql, const std::string& id, int total) {
    sql << "INSERT INTO orders (id, total) VALUES (:id, :total)", ::soci::use(id),
        ::soci::use(total);
  }
  // ---- observation hooks: counts of committed rows, as every store fixture provides them ----

  /// Rows in the outbox, in any state.
  static std::int64_t outbox_rows(session_type& sql) {
    return count(sql, "SELECT count(*) FROM outbox");
  }
  /// Outbox rows marked published (kept by retention::keep).
  static std::int64_t published_rows(session_type& sql) {
    return count(sql, "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL");
  }
  /// Business rows written by insert_order.
  static std::int64_t orders(session_type& sql) {
    return count(sql, "SELECT count(*) FROM orders");
  }
  /// Inbox records (consumer, event id).
  static std::int64_t inbox_rows(session_type& sql) {
    return count(sql, "SELECT count(*) FROM outbox_inbox");
  }
  /// Deliveries a consumer dead-lettered in the store.
  static std::int64_t inbox_dead_rows(session_type& sql) {
    return count(sql, "SELECT count(*) FROM outbox_inbox_dead");
  }
  /// Those of them whose error text is `text`.
  static std::int64_t inbox_dead_rows_with_error(session_type& sql, const std::string& text) {
    long long n = 0;
    sql << "SELECT count(*) FROM outbox_inbox_dead WHERE error = :e", ::soci::use(text),
        ::soci::into(n);
    return n;
  }
  /// Effects written by record_applied (one row per application).
  static std::int64_t applied_rows(session_type& sql) {
    return count(sql, "SELECT count(*) FROM applied");
  }
  /// Effects of the event `event_id`.
  static std::int64_t applied_rows_for(session_type& sql, const std::string& event_id) {
    long long n = 0;
    sql << "SELECT count(*) FROM applied WHERE event_id = :e", ::soci::use(event_id),
        ::soci::into(n);
    return n;
  }
  /// Distinct events that have an effect.
  static std::int64_t applied_events(session_type& sql) {
    return count(sql, "SELECT count(DISTINCT event_id) FROM applied");
  }

  /// Records an applied effect (what a consumer's handler writes).
  static void record_applied(session_type& sql, const std::string& consumer,
                             const std::string& event_id, const std::string& aggregate_id) {
    sql << "INSERT INTO applied (consumer, event_id, aggregate_id) VALUES (:c, :e, :a)",
        ::soci::use(consumer), ::soci::use(event_id), ::soci::use(aggregate_id);
  }
};

}  // namespace outbox::test
