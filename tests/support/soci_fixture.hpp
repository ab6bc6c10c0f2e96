#pragma once
// What every SOCI-based store fixture does the same way: the application's statements (portable
// SQL on the tables each fixture creates: orders, applied) and counting.

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
  /// Records an applied effect (what a consumer's handler writes).
  static void record_applied(session_type& sql, const std::string& consumer,
                             const std::string& event_id, const std::string& aggregate_id) {
    sql << "INSERT INTO applied (consumer, event_id, aggregate_id) VALUES (:c, :e, :a)",
        ::soci::use(consumer), ::soci::use(event_id), ::soci::use(aggregate_id);
  }
};

}  // namespace outbox::test
