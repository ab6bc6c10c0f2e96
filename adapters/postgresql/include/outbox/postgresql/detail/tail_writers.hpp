#pragma once
/// @file
/// The log-tailing store's writers (`tailing_store::appender`, `tailing_store::table_mode`): the
/// events of the caller's transaction as logical decoding messages, or as outbox rows the relay
/// reads from the WAL.

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <outbox/message.hpp>
#include <outbox/postgresql/detail/connection.hpp>
#include <outbox/postgresql/detail/pipeline.hpp>
#include <outbox/postgresql/detail/wal.hpp>
#include <outbox/postgresql/schema.hpp>
#include <outbox/postgresql/store.hpp>

namespace outbox::postgresql::detail {

/// The table-free writer (`tailing_store::appender`).
class tail_appender {
 public:
  using session_type = ::soci::session;
  /// Emits `rows` on `sql` inside the caller's open transaction: one statement per 500 rows,
  /// each event bound in binary (never spliced into the SQL text), in the order given. A
  /// scheduled event carries its time in the message (`wal::scheduled_event_format`): the
  /// relay parks it in the outbox table until then. One
  /// event goes as a statement prepared once per connection (sql/postgresql/emit.sql),
  /// unless `o.prepare_statements` is false (poolers in transaction mode).
  void append(session_type& sql, std::span<const outgoing> rows, const writer_options& o = {}) {
    each_emit(rows, o.prepare_statements,
              run_each<emit_statement>(handle(sql), statements::emit, "append"));
  }

  /// Opens the writer transaction on `sql`, as the table writer does (`store::appender::open`).
  static void open(session_type& sql) { store::appender::open(sql); }

  /// The events of the caller's open transaction on `sql` and COMMIT in one round trip (one
  /// libpq pipeline: `detail::commit_made`), emitted as `append` emits them.
  /// @throws outbox::error as `detail::commit_in_pipeline`: nothing committed, or `in_doubt`.
  void commit(session_type& sql, std::span<const outgoing> rows, const writer_options& o = {}) {
    PGconn* c = handle(sql);
    commit_made<emit_statement>(c, [&] {
      std::vector<piped_statement> out;
      each_emit(rows, may_prepare(c, o.prepare_statements),
                collect_each<emit_statement>(c, statements::emit, out));
      return out;
    });
  }

 private:
  /// Hands `sink` the statements that emit `rows` one by one as it makes them: one event as
  /// emit.sql, marked prepared (`emit_statement`) when `prepare`; more as one per 500.
  template <class Sink>
  static void each_emit(std::span<const outgoing> rows, bool prepare, Sink&& sink) {
    if (rows.size() == 1) {
      piped_statement s;
      s.values.add_bytes(wal::encode_event(rows.front()));
      if (prepare)
        s.prepared = emit_statement;
      else
        s.text = statements::emit;
      sink(std::move(s));
      return;
    }
    for (std::size_t off = 0; off < rows.size(); off += 500) {
      const auto part = rows.subspan(off, std::min<std::size_t>(500, rows.size() - off));
      // emit.sql's function over a VALUES list; the select list runs after the ORDER BY (a
      // volatile function), so the messages go in the order given.
      piped_statement s;
      s.text = "SELECT pg_catalog.pg_logical_emit_message(true, 'outbox', e.v) FROM (VALUES ";
      for (std::size_t i = 0; i < part.size(); ++i) {
        if (i > 0) s.text += ", ";
        s.text += "($" + std::to_string(i + 1) + "::bytea, " + std::to_string(i) + ")";
      }
      s.text += ") AS e(v, o) ORDER BY e.o";
      for (const outgoing& r : part) s.values.add_bytes(wal::encode_event(r));
      sink(std::move(s));
    }
  }
};

/// The table-mode writer (`tailing_store::table_mode::appender`).
class tail_table_appender {
 public:
  using session_type = ::soci::session;
  /// Inserts `rows` on `sql` inside the caller's open transaction, as `store::appender`
  /// does (one prepared statement for one event, else multi-row INSERTs of 500). A scheduled
  /// event's row keeps its time as available_at: the relay parks it until then.
  void append(session_type& sql, std::span<const outgoing> rows, const writer_options& o = {}) {
    store::appender::insert<append_streamed_statement>(sql, rows, o, statements::append_streamed);
  }
  /// Opens the writer transaction on `sql`, as the table writer does (`store::appender::open`).
  static void open(session_type& sql) { store::appender::open(sql); }
  /// The rows of the caller's open transaction on `sql` and COMMIT in one round trip, written
  /// as `append` writes them (`detail::commit_made`).
  /// @throws outbox::error as `detail::commit_in_pipeline`: nothing committed, or `in_doubt`.
  void commit(session_type& sql, std::span<const outgoing> rows, const writer_options& o = {}) {
    PGconn* c = handle(sql);
    commit_made<append_streamed_statement>(c, [&] {
      std::vector<piped_statement> out;
      store::appender::inserts_for<append_streamed_statement>(
          c, rows, may_prepare(c, o.prepare_statements), statements::append_streamed, out);
      return out;
    });
  }
};

}  // namespace outbox::postgresql::detail
