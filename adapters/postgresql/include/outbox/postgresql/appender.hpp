#pragma once
/// @file
/// The PostgreSQL store's writer side: rows appended on the application's session, inside its
/// transaction (`outbox::writer<postgresql::store>`).

#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <outbox/concepts/store.hpp>
#include <outbox/postgresql/detail/connection.hpp>
#include <outbox/postgresql/detail/pipeline.hpp>
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

  /// Opens the writer transaction on `sql` (`writer::begin`): BEGIN, refused, nothing sent, on
  /// a session already in a transaction (PostgreSQL would only warn and nest the writer's in
  /// it). @throws outbox::error `permanent` then (`detail::throw_transaction_open`).
  static void open(session_type& sql) {
    if (const auto status = PQtransactionStatus(detail::handle(sql));
        status == PQTRANS_INTRANS || status == PQTRANS_INERROR)
      outbox::detail::throw_transaction_open("postgresql");
    sql.begin();
  }

  /// Commits the caller's open transaction on `sql` with `rows` in it, in one round trip: the
  /// INSERTs of `append` (bound values, payloads in binary; one row as the statement prepared
  /// once per connection) and COMMIT go as one libpq pipeline with one sync
  /// (`writer::transaction::commit`), after wake.sql: the relay's wake-up, once per transaction
  /// (a NOTIFY only when no relay is busy), which keeps the wake-up trigger out of it (schema
  /// version 9). Without rows, COMMIT alone.
  /// @throws outbox::error as `detail::commit_in_pipeline`: nothing committed, or `in_doubt`.
  void commit(session_type& sql, std::span<const outgoing> rows, const writer_options& o = {}) {
    PGconn* c = detail::handle(sql);
    detail::commit_made<detail::append_statement, detail::wake_statement>(
        c, [&] { return pipeline_for(c, rows, detail::may_prepare(c, o.prepare_statements)); });
  }

  /// The statements of `commit`'s pipeline: the wake-up, then the INSERTs; the wake-up and the
  /// one-row INSERT prepared on `c` (once per connection) when `prepare`.
  static std::vector<detail::piped_statement> pipeline_for(PGconn* c,
                                                           std::span<const outgoing> rows,
                                                           bool prepare) {
    std::vector<detail::piped_statement> statements;
    if (rows.empty()) return statements;
    detail::piped_statement wake;  // first: the trigger then skips the INSERTs
    if (prepare)
      wake.prepared = detail::prepared_once<detail::wake_statement>(c, statements::wake);
    else
      wake.text = statements::wake;
    statements.push_back(std::move(wake));
    inserts_for<detail::append_statement>(c, rows, prepare, statements::append, statements);
    return statements;
  }

  /// Adds to `out` the INSERTs of `rows` with `single_row_insert` (append.sql's parameters):
  /// one row as the statement prepared under `Name` when `prepare`, else one per 500 rows.
  template <const char* Name>
  static void inserts_for(PGconn* c, std::span<const outgoing> rows, bool prepare,
                          std::string_view single_row_insert,
                          std::vector<detail::piped_statement>& out) {
    each_insert<Name>(rows, prepare, single_row_insert,
                      detail::collect_each<Name>(c, single_row_insert, out));
  }

  /// Hands `sink` the INSERTs of `rows` one by one as it makes them: one row as
  /// `single_row_insert` marked prepared under `Name` when `prepare`, else one per 500 rows.
  template <const char* Name, class Sink>
  static void each_insert(std::span<const outgoing> rows, bool prepare,
                          std::string_view single_row_insert, Sink&& sink) {
    if (rows.size() == 1 && prepare) {
      detail::piped_statement s;
      add_row(s.values, rows.front());
      s.prepared = Name;
      sink(std::move(s));
      return;
    }
    outbox::sql::insert_in_chunks(single_row_insert, 9, rows, 500,
                                  [&](const std::string& text, std::span<const outgoing> part) {
                                    detail::piped_statement s;
                                    s.text = text;
                                    for (const outgoing& r : part) add_row(s.values, r);
                                    sink(std::move(s));
                                  });
  }

  /// Adds `r`'s values in append.sql's order.
  static void add_row(detail::params& p, const outgoing& r) {
    p.add(r.id.to_string())
        .add(r.source->aggregate_type)
        .add(r.source->aggregate_id)
        .add(r.source->event_type)
        .add_bytes(r.source->payload)
        .add(r.headers_json)
        .add(detail::to_us(r.created_at))
        .add(r.source->content_type)
        .add(outbox::detail::to_unix_ceil<std::chrono::microseconds>(r.available_at));
  }

  /// `append` with another insert of append.sql's parameters (`single_row_insert`, a file of
  /// sql/postgresql/), prepared under `Name` (the log-tailing relay's table mode).
  template <const char* Name>
  static void insert(session_type& sql, std::span<const outgoing> rows, const writer_options& o,
                     std::string_view single_row_insert) {
    each_insert<Name>(rows, o.prepare_statements, single_row_insert,
                      detail::run_each<Name>(detail::handle(sql), single_row_insert, "append"));
  }
};

}  // namespace outbox::postgresql
