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
    PGconn* c = handle(sql);
    if (rows.size() == 1 && o.prepare_statements) {
      params p;
      p.add_bytes(wal::encode_event(rows.front()));
      exec_prepared_once<emit_statement>(c, statements::emit, p, "append");
      return;
    }
    for (const piped_statement& s : statements_for(c, rows, false))
      exec(c, s.text, s.values, "append (logical decoding messages)");
  }

  /// Opens the writer transaction on `sql`, as the table writer does (`store::appender::open`).
  static void open(session_type& sql) { store::appender::open(sql); }

  /// The events of the caller's open transaction on `sql` and COMMIT in one round trip (one
  /// libpq pipeline: `detail::commit_made`), emitted as `append` emits them.
  /// @throws outbox::error as `detail::commit_in_pipeline`: nothing committed, or `in_doubt`.
  void commit(session_type& sql, std::span<const outgoing> rows, const writer_options& o = {}) {
    PGconn* c = handle(sql);
    commit_made<emit_statement>(
        c, [&] { return statements_for(c, rows, may_prepare(c, o.prepare_statements)); });
  }

 private:
  /// The statements that emit `rows`: one event as emit.sql, prepared on `c` (once per
  /// connection) when `prepare`; more as one statement per 500.
  static std::vector<piped_statement> statements_for(PGconn* c, std::span<const outgoing> rows,
                                                     bool prepare) {
    std::vector<piped_statement> out;
    if (rows.size() == 1) {
      piped_statement s;
      s.values.add_bytes(wal::encode_event(rows.front()));
      if (prepare)
        s.prepared = prepared_once<emit_statement>(c, statements::emit);
      else
        s.text = statements::emit;
      out.push_back(std::move(s));
      return out;
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
      out.push_back(std::move(s));
    }
    return out;
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
