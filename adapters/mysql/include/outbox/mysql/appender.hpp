#pragma once
/// @file
/// The MySQL store's writer side: rows appended on the application's session, inside its
/// transaction (`outbox::writer<mysql::store>`).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <outbox/concepts/store.hpp>
#include <outbox/error.hpp>
#include <outbox/mysql/detail/commit.hpp>
#include <outbox/mysql/detail/connection.hpp>
#include <outbox/mysql/schema.hpp>
#include <outbox/schedule.hpp>
#include <outbox/sql/statements.hpp>
#include <outbox/validate.hpp>

namespace outbox::mysql {

namespace detail {

/// The session's max_allowed_packet: past it the server drops the connection (2006), and the
/// caller's transaction with it. One round trip; the value is fixed when the session connects.
[[nodiscard]] inline std::size_t max_allowed_packet(::soci::session& sql) {
  long long bytes = 0;
  translated("append: max_allowed_packet",
             [&] { sql << std::string(statements::max_allowed_packet), ::soci::into(bytes); });
  return bytes > 0 ? static_cast<std::size_t>(bytes) : 0;
}

}  // namespace detail

/// What the writer needs: an append on the application's session, nothing else.
class appender {
 public:
  using session_type = ::soci::session;  ///< The connection type of the application.
  /// Opens the writer transaction on `sql` (`writer::begin`): START TRANSACTION, refused,
  /// nothing sent, on a session already in one (it would commit the open one implicitly).
  /// @throws outbox::error `permanent` then (`outbox::detail::throw_transaction_open`).
  static void open(session_type& sql) {
    if (detail::transaction_open(detail::handle(sql), "begin"))
      outbox::detail::throw_transaction_open("mysql");
    sql.begin();
  }

  /// Commits the caller's open transaction on `sql` with `rows` in it
  /// (`writer::transaction::commit`) in one round trip: `CALL outbox_commit(:events)`
  /// (migration 0005), the rows as one bound JSON argument (payloads in base64; one row:
  /// `CALL outbox_commit_one`, its values bound as `append` binds them), which inserts them and
  /// commits. If the INSERT fails the procedure stops there: COMMIT does not run, the
  /// transaction is rolled back (one more round trip asks the procedure's stage, on that path
  /// only). Rows that take more than 1 MiB as sent go as `append`, then COMMIT (two round
  /// trips: `append` splits them and checks max_allowed_packet). Checked first as `append`,
  /// and that the session's transaction is still open (`detail::require_open_transaction`).
  /// @throws outbox::error as `append` (nothing committed); `permanent` when no transaction is
  ///         open (nothing sent); `misconfigured` when the database is not migrated to version
  ///         5; `in_doubt` when the connection is lost while the CALL or COMMIT runs, or COMMIT
  ///         fails (KILL QUERY): the outcome is unknown.
  void commit(session_type& sql, std::span<const outgoing> rows) {
    MYSQL* c = detail::handle(sql);
    detail::require_open_transaction(c);
    try {
      if (!rows.empty()) {
        check(c, rows);
        if (detail::call_commit(sql, rows)) return;
        append(sql, rows);
      }
      if (mysql_real_query(c, "COMMIT", 6) != 0)
        detail::throw_commit_in_doubt(mysql_errno(c), mysql_error(c));
    } catch (...) {
      // What is left of the transaction (nothing after a lost connection or a COMMIT that ran).
      (void)mysql_real_query(c, "ROLLBACK", 8);
      throw;
    }
  }

  /// Inserts `rows` on `sql` inside the caller's open transaction: one multi-row INSERT per
  /// 500 rows, every value bound, payloads as bytes. A statement is sized as it is sent
  /// (values quoted and escaped: a binary payload may take twice its bytes): at most 4 MiB,
  /// or one row alone, and never past the session's max_allowed_packet, which is read (one
  /// round trip) when the rows take more than 1 MiB as sent.
  /// @throws outbox::error `misconfigured` when the session's character set is not utf8mb4
  ///         (the text would be stored converted, not as written: utf8mb3 turns a 4-byte
  ///         character into '?' where sql_mode is not strict), or when its sql_mode has
  ///         NO_BACKSLASH_ESCAPES and a payload holds a NUL byte (SOCI cuts its text at a
  ///         NUL, which only backslash escaping keeps out of it); `invalid_input` for a text
  ///         longer than its column (writer limits raised past them: a session whose sql_mode
  ///         is not strict would store it cut), or for a row that alone takes more than
  ///         the session's max_allowed_packet as sent (the server would drop the connection,
  ///         and the transaction with it); nothing is sent then.
  void append(session_type& sql, std::span<const outgoing> rows) {
    check(detail::handle(sql), rows);
    constexpr int per_row = 9;
    constexpr std::size_t max_rows = 500;
    // The statement text without values: `head` once, then `tuple` (",(...)") per row.
    static const std::size_t one_row =
        outbox::sql::multi_row_insert(statements::append, 1, per_row).size();
    static const std::size_t tuple =
        outbox::sql::multi_row_insert(statements::append, 2, per_row).size() - one_row;
    const std::size_t head = one_row - tuple;
    // Each row's bytes as sent: its tuple and its values, quoted and escaped (the number is at
    // most 20 digits); the statement is `head` plus its rows'.
    std::vector<std::size_t> sizes(rows.size());
    std::size_t total = head, largest = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const outgoing& r = rows[i];
      const event& e = *r.source;
      sizes[i] = tuple + 36 + 2 + 20 + 20 + detail::sent_size(e.aggregate_type) +
                 detail::sent_size(e.aggregate_id) + detail::sent_size(e.event_type) +
                 detail::sent_size(e.payload) + detail::sent_size(r.headers_json) +
                 detail::sent_size(e.content_type);
      total += sizes[i];
      largest = std::max(largest, sizes[i]);
    }
    // Under 1 MiB the server's limit is not asked (no server default is below it); above,
    // every row must fit it alone, checked before anything is sent, so a refusal leaves the
    // caller's transaction as it was. The command byte and a margin come off the limit.
    std::size_t max_bytes = std::size_t{4} << 20;
    if (total > (std::size_t{1} << 20)) {
      const std::size_t packet = detail::max_allowed_packet(sql);
      const std::size_t room = packet > 1024 ? packet - 1024 : 0;
      if (head + largest > room)
        throw_invalid("payload", "and the rest of its event take " +
                                     std::to_string(head + largest) +
                                     " bytes in an INSERT as sent (quoted and escaped: a NUL, "
                                     "a quote, a backslash, CR, LF or Ctrl-Z takes two bytes), "
                                     "more than the session's max_allowed_packet of " +
                                     std::to_string(packet) +
                                     " allows; raise max_allowed_packet on the server (the "
                                     "MySQL adapter's README) or send a smaller payload");
      max_bytes = std::min(max_bytes, room);
    }
    std::size_t off = 0;
    while (off < rows.size()) {
      std::size_t n = 0, bytes = head;
      while (off + n < rows.size() && n < max_rows &&
             (n == 0 || bytes + sizes[off + n] <= max_bytes)) {
        bytes += sizes[off + n];
        ++n;
      }
      const auto part = rows.subspan(off, n);
      off += n;
      const std::string text = outbox::sql::multi_row_insert(statements::append, n, per_row);
      detail::translated("append", [&] {
        ::soci::statement st(sql);
        std::vector<std::string> ids;  // alive until the statement ran
        std::vector<long long> times, due;
        ids.reserve(n);
        times.reserve(n);
        due.reserve(n);
        for (const outgoing& r : part) {
          ids.push_back(r.id.to_string());
          times.push_back(detail::to_us(r.created_at));
          st.exchange(::soci::use(ids.back()));
          st.exchange(::soci::use(r.source->aggregate_type));
          st.exchange(::soci::use(r.source->aggregate_id));
          st.exchange(::soci::use(r.source->event_type));
          st.exchange(::soci::use(r.source->payload));
          st.exchange(::soci::use(r.headers_json));
          st.exchange(::soci::use(times.back()));
          st.exchange(::soci::use(r.source->content_type));
          due.push_back(outbox::detail::to_unix_ceil<std::chrono::microseconds>(r.available_at));
          st.exchange(::soci::use(due.back()));
        }
        st.alloc();
        st.prepare(text);
        st.define_and_bind();
        st.execute(true);
      });
    }
  }

 private:
  /// What `append` refuses before sending anything (its @throws).
  static void check(MYSQL* c, std::span<const outgoing> rows) {
    const std::string_view charset = mysql_character_set_name(c);
    if (charset != "utf8mb4")
      throw error(errc::misconfigured, "mysql", {},
                  "append: the session's character set is " + std::string(charset) +
                      "; connect with charset=utf8mb4 (outbox text is UTF-8, up to 4 bytes a "
                      "character)");
    const bool no_backslash_escapes = (c->server_status & SERVER_STATUS_NO_BACKSLASH_ESCAPES) != 0;
    for (const outgoing& r : rows) {
      detail::check_fits("aggregate_type", r.source->aggregate_type);
      detail::check_fits("aggregate_id", r.source->aggregate_id);
      detail::check_fits("event_type", r.source->event_type);
      if (r.headers_json.size() > detail::max_headers_bytes)
        throw_invalid("headers", "take " + std::to_string(r.headers_json.size()) +
                                     " bytes as JSON, the column holds " +
                                     std::to_string(detail::max_headers_bytes));
      if (no_backslash_escapes && r.source->payload.find('\0') != std::string::npos)
        throw error(errc::misconfigured, "mysql", {},
                    "append: the session's sql_mode has NO_BACKSLASH_ESCAPES, under which a "
                    "payload with a NUL byte cannot be sent; remove it from the session's "
                    "sql_mode");
    }
  }
};

}  // namespace outbox::mysql
