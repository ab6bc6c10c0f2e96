#pragma once
/// @file
/// The SQLite store's writer side: rows appended on the application's session, inside its
/// transaction (`outbox::writer<sqlite::store>`).

#include <chrono>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include <outbox/concepts/store.hpp>
#include <outbox/error.hpp>
#include <outbox/schedule.hpp>
#include <outbox/sql/migrate.hpp>
#include <outbox/sql/statements.hpp>
#include <outbox/sqlite/detail/connection.hpp>
#include <outbox/sqlite/schema.hpp>

namespace outbox::sqlite {

/// What the writer needs: an append on the application's session, nothing else (no store, no
/// session set-up). `outbox::writer<sqlite::store>` uses it.
class appender {
 public:
  using session_type = ::soci::session;  ///< The connection type of the application.
  /// Inserts `rows` on `sql` inside the caller's open transaction: one multi-row INSERT per
  /// 500 rows (SQLite's parameter limit), payloads as BLOBs (exact bytes).
  void append(session_type& sql, std::span<const outgoing> rows) {
    auto* db = detail::handle(sql);
    constexpr int per_row = 9;
    outbox::sql::insert_in_chunks(
        statements::append, per_row, rows, 500,
        [&](const std::string& text, std::span<const outgoing> part) {
          detail::statement st(db, text);
          std::vector<std::string> ids;  // bound SQLITE_STATIC: alive until the run
          ids.reserve(part.size());
          for (std::size_t i = 0; i < part.size(); ++i) {
            const outgoing& r = part[i];
            const int b = static_cast<int>(i) * per_row;
            ids.push_back(r.id.to_string());
            st.bind(b + 1, ids.back())
                .bind(b + 2, r.source->aggregate_type)
                .bind(b + 3, r.source->aggregate_id)
                .bind(b + 4, r.source->event_type)
                .bind_blob(b + 5, r.source->payload)
                .bind(b + 6, r.headers_json)
                .bind(b + 7, detail::to_ms(r.created_at))
                .bind(b + 8, r.source->content_type)
                .bind(b + 9,
                      outbox::detail::to_unix_ceil<std::chrono::milliseconds>(r.available_at));
          }
          st.run();
        });
    // Stateless, so checked on every append (one indexed read): a database behind the library
    // is refused even where its rows would still fit (the caller's rollback takes them back).
    // After the INSERT, not before: a transaction whose first statement reads must upgrade
    // to a write lock, and SQLite fails that at once (SQLITE_BUSY, no busy wait) when another
    // connection wrote meanwhile; one whose first statement writes waits its busy timeout.
    detail::statement v(db, statements::schema_version);
    outbox::sql::require_schema_version(v.step() ? v.column_int64(0) : 0,
                                        static_cast<int>(std::size(migrations)), "sqlite");
  }
  /// BEGIN (`writer::begin`); a session in a transaction already: `permanent`, nothing run.
  static void open(session_type& sql) {
    if (detail::sq::sqlite3_get_autocommit(detail::handle(sql)) == 0)
      outbox::detail::throw_transaction_open("sqlite");
    sql.begin();
  }
  /// `append`, then COMMIT (`writer::transaction::commit`; no round trip to save here). A
  /// refused COMMIT (a deferred constraint, busy) is rolled back; none open: nothing written.
  /// @throws outbox::error as `append` or COMMIT (nothing committed); `permanent` without one.
  void commit(session_type& sql, std::span<const outgoing> rows) {
    auto* db = detail::handle(sql);
    if (detail::sq::sqlite3_get_autocommit(db) != 0) outbox::detail::throw_no_transaction("sqlite");
    try {
      if (!rows.empty()) append(sql, rows);
      detail::exec(db, "COMMIT");
    } catch (...) {
      if (detail::sq::sqlite3_get_autocommit(db) == 0)
        detail::sq::sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }
};

}  // namespace outbox::sqlite
