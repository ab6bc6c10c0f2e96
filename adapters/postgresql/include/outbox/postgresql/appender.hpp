#pragma once
/// @file
/// The PostgreSQL store's writer side: rows appended on the application's session, inside its
/// transaction (`outbox::writer<postgresql::store>`).

#include <chrono>
#include <span>
#include <string>
#include <string_view>

#include <outbox/concepts/store.hpp>
#include <outbox/postgresql/detail/connection.hpp>
#include <outbox/postgresql/schema.hpp>
#include <outbox/schedule.hpp>
#include <outbox/sql/statements.hpp>
#include <outbox/writer.hpp>

namespace outbox::postgresql {

/// What the writer needs: an append on the application's session, nothing else (no store, no
/// eventfd, no statement prepared). `outbox::writer<postgresql::store>` uses it.
class appender {
 public:
  using session_type = ::soci::session;  ///< The connection type of the application.
  /// Inserts `rows` on `sql` inside the caller's open transaction: one multi-row INSERT per
  /// 500 rows, every value bound (never spliced into the SQL text), payloads in binary. One
  /// row (an `enqueue` of one event) goes as a statement prepared once per connection
  /// (`detail::exec_prepared_once`), unless `o.prepare_statements` is false: parsed and planned
  /// every time, it cost the business transaction about 10 of its 38 points
  /// (postgresql_writer_bench).
  void append(session_type& sql, std::span<const outgoing> rows, const writer_options& o = {}) {
    insert<detail::append_statement>(sql, rows, o, statements::append);
  }

  /// `append` with another insert of append.sql's parameters (`single_row_insert`, a file of
  /// sql/postgresql/), prepared under `Name` (the log-tailing relay's table mode).
  template <const char* Name>
  static void insert(session_type& sql, std::span<const outgoing> rows, const writer_options& o,
                     std::string_view single_row_insert) {
    PGconn* c = detail::handle(sql);
    const auto add = [](detail::params& p, const outgoing& r) {
      p.add(r.id.to_string())
          .add(r.source->aggregate_type)
          .add(r.source->aggregate_id)
          .add(r.source->event_type)
          .add_bytes(r.source->payload)
          .add(r.headers_json)
          .add(detail::to_us(r.created_at))
          .add(r.source->content_type)
          .add(outbox::detail::to_unix_ceil<std::chrono::microseconds>(r.available_at));
    };
    if (rows.size() == 1 && o.prepare_statements) {
      detail::params p;
      add(p, rows.front());
      detail::exec_prepared_once<Name>(c, single_row_insert, p, "append");
      return;
    }
    outbox::sql::insert_in_chunks(single_row_insert, 9, rows, 500,
                                  [&](const std::string& text, std::span<const outgoing> part) {
                                    detail::params p;
                                    for (const outgoing& r : part) add(p, r);
                                    detail::exec(c, text, p, "append");
                                  });
  }
};

}  // namespace outbox::postgresql
