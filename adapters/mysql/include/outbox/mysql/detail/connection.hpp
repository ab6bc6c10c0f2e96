#pragma once
/// @file
/// The MySQL dialect's connection layer: the client handle under a `soci::session` (MariaDB
/// Connector/C or libmysqlclient), error translation by the server's error number, the wire
/// forms of times and lists, and result columns as `outbox::sql::read_message` reads them.
///
/// Statements with values go through SOCI (`soci::use`): every value is bound, never spliced
/// into the text by us. SOCI's mysql backend sends them in the text protocol, each escaped by
/// `mysql_real_escape_string` for the connection's character set, which the store sets to
/// utf8mb4 with `mysql_set_character_set` (so the client library knows it: escaping by a
/// character set the library does not know is the classic injection hole). Payloads are bytes:
/// the statements prefix them with `_binary`, so no character set conversion touches them.

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include <errmsg.h>
#include <mysql.h>
#include <mysqld_error.h>
#include <soci/mysql/soci-mysql.h>
#include <soci/soci.h>

#include <nlohmann/json.hpp>

#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/sql/backend.hpp>
#include <outbox/sql/row.hpp>
#include <outbox/sql/statements.hpp>
#include <outbox/time.hpp>
#include <outbox/validate.hpp>

namespace outbox::mysql::detail {

/// Error numbers after which the connection is gone and must be made again: the client's
/// "server has gone away" (2006), "lost connection" (2013, 2055), "cannot connect" (2002,
/// 2003), a connection `KILL`ed (1927 on MariaDB; the killed session's next statement sees
/// 2006 or 2013), the server shutting down (1053), and MySQL's "disconnected by the server
/// because of inactivity" (4031, wait_timeout).
inline bool connection_lost(unsigned code) noexcept {
  return code == CR_SERVER_GONE_ERROR || code == CR_SERVER_LOST || code == 2055 ||
         code == CR_CONNECTION_ERROR || code == CR_CONN_HOST_ERROR || code == 1927 ||
         code == ER_SERVER_SHUTDOWN || code == 4031;
}

/// Classifies a server or client error number:
/// - connection loss (`connection_lost`), deadlock 1213, lock wait timeout 1205, too many
///   connections 1040, a query interrupted 1317 (and 1467, an auto-increment read interrupted
///   so) -> transient (the first with a reconnect);
/// - 1062 (duplicate key) -> duplicate;
/// - 1045 (access denied), 1044 (no access to the database), 1049 (unknown database),
///   1146 (no such table), 1054 (unknown column: the schema is behind), 1305 (no such stored
///   procedure) and 1318 (a procedure's arguments differ: the same), 1142 (command denied),
///   1370 (no EXECUTE on a procedure) -> misconfigured;
/// - 0 (no number: the client failed without one) -> transient; others -> permanent.
inline errc classify(unsigned code) noexcept {
  if (code == 0 || connection_lost(code) || code == ER_LOCK_DEADLOCK ||
      code == ER_LOCK_WAIT_TIMEOUT || code == ER_CON_COUNT_ERROR || code == ER_QUERY_INTERRUPTED ||
      code == ER_AUTOINC_READ_FAILED)
    return errc::transient;
  if (code == ER_DUP_ENTRY) return errc::duplicate;
  if (code == ER_ACCESS_DENIED_ERROR || code == ER_DBACCESS_DENIED_ERROR ||
      code == ER_BAD_DB_ERROR || code == ER_NO_SUCH_TABLE || code == ER_BAD_FIELD_ERROR ||
      code == ER_SP_DOES_NOT_EXIST || code == ER_SP_WRONG_NO_OF_ARGS ||
      code == ER_TABLEACCESS_DENIED_ERROR || code == ER_PROCACCESS_DENIED_ERROR)
    return errc::misconfigured;
  return errc::permanent;
}

/// True for the lock conflicts a statement can simply run again (InnoDB rolled back the
/// statement, or, for a deadlock, the whole transaction).
inline bool lock_conflict(unsigned code) noexcept {
  return code == ER_LOCK_DEADLOCK || code == ER_LOCK_WAIT_TIMEOUT;
}

/// The `outbox::error` of error number `code`. The text is made storable (cut to 2 KiB); callers
/// pass the server's words (`soci_error::get_error_message`), never SOCI's context, which
/// quotes the statement's bound values (an event's payload).
[[nodiscard]] inline error make_error(unsigned code, std::string_view what, std::string_view text) {
  std::string msg(what);
  msg += ": ";
  if (code == ER_NO_SUCH_TABLE || code == ER_BAD_FIELD_ERROR || code == ER_SP_DOES_NOT_EXIST ||
      code == ER_SP_WRONG_NO_OF_ARGS)
    msg += "the database is not migrated, or behind this library (call migrate): ";
  msg += sanitize_text(text);
  return error(classify(code), "mysql", code == 0 ? std::string() : std::to_string(code), msg);
}

/// The error number of a failure to open a session (`e`: what SOCI threw; 0 when it has none):
/// the client's 2002 or 2003 for a server away, the server's 1045 for a refused login, ...
[[nodiscard]] inline unsigned connect_errno(const std::exception& e) noexcept {
  const auto* m = dynamic_cast<const ::soci::mysql_soci_error*>(&e);
  return m != nullptr ? m->err_num_ : 0;
}

/// The `outbox::error` of a failure to open a session, classified by its error number
/// (`classify`). Without one, SOCI refused the connect string itself: misconfigured.
[[nodiscard]] inline error connect_error(const std::exception& e, std::string_view what) {
  if (dynamic_cast<const ::soci::mysql_soci_error*>(&e) != nullptr)
    return make_error(connect_errno(e), what, e.what());
  return error(errc::misconfigured, "mysql", {},
               std::string(what) + ": " + sanitize_text(e.what()));
}

/// Throws the error of the last call on `c`.
[[noreturn]] inline void throw_native(MYSQL* c, std::string_view what) {
  throw make_error(mysql_errno(c), what, mysql_error(c));
}

/// Runs `f`, translating SOCI's exceptions into `outbox::error` (by error number for the mysql
/// backend's; anything else SOCI throws, such as a conversion, is permanent), their text
/// without the bound values SOCI adds to it.
template <class F>
decltype(auto) translated(std::string_view what, F&& f) {
  try {
    return f();
  } catch (const ::soci::mysql_soci_error& e) {
    throw make_error(e.err_num_, what, e.get_error_message());
  } catch (const ::soci::soci_error& e) {
    throw error(errc::permanent, "mysql", {},
                std::string(what) + ": " + sanitize_text(e.get_error_message()));
  }
}

/// The client handle of a SOCI session.
/// @throws outbox::error `misconfigured` when the session is not connected with the mysql
///         backend.
inline MYSQL* handle(::soci::session& sql) {
  MYSQL* c = outbox::sql::soci_backend<::soci::mysql_session_backend>(sql, "mysql", "mysql").conn_;
  if (c == nullptr)
    throw error(errc::transient, "mysql", {}, "the session has no connection (a reconnect failed)");
  return c;
}

/// Runs a statement without values (transaction control, session settings) directly on the
/// handle, and discards any result.
inline void exec(MYSQL* c, std::string_view sql_text, std::string_view what) {
  if (mysql_real_query(c, sql_text.data(), static_cast<unsigned long>(sql_text.size())) != 0)
    throw_native(c, what);
  if (MYSQL_RES* r = mysql_store_result(c)) mysql_free_result(r);
}

/// True when the server says a transaction is open on `c`. The status arrives with each OK
/// packet, not with an error: after a failed statement (a deadlock whose rollback ended the
/// transaction) it is stale, so this sends a no-op first (one round trip).
[[nodiscard]] inline bool in_transaction(MYSQL* c, std::string_view what) {
  exec(c, "DO 0", what);
  return (c->server_status & SERVER_STATUS_IN_TRANS) != 0;
}

/// The outbox's name columns hold 255 characters (VARCHAR(255)), its headers 16 MiB - 1 bytes
/// (MEDIUMTEXT).
inline constexpr std::size_t max_name_characters = 255;
inline constexpr std::size_t max_headers_bytes = (std::size_t{1} << 24) - 1;

/// Refuses, as `invalid_input`, a name (valid UTF-8: the writer checked it) longer than its
/// column: a session whose sql_mode is not strict would store it cut, with a warning only.
inline void check_fits(std::string_view field, std::string_view value) {
  std::size_t characters = 0;
  for (const char ch : value) characters += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  if (characters > max_name_characters)
    throw_invalid(std::string(field), "is " + std::to_string(characters) +
                                          " characters, the column holds " +
                                          std::to_string(max_name_characters));
}

/// The bytes `value` takes in a statement as SOCI's mysql backend sends it: quoted, and escaped
/// by `mysql_real_escape_string`, under which NUL, quotes, backslash, CR, LF and Ctrl-Z take
/// two bytes (under NO_BACKSLASH_ESCAPES only a quote doubles: then this is an upper bound).
[[nodiscard]] inline std::size_t sent_size(std::string_view value) noexcept {
  std::size_t n = value.size() + 2;
  for (const char ch : value) {
    switch (ch) {
      case '\0':
      case '\'':
      case '"':
      case '\\':
      case '\n':
      case '\r':
      case '\x1a':
        ++n;
        break;
      default:
        break;
    }
  }
  return n;
}

/// Microseconds since the Unix epoch: the form of every time column. Read back clamped (a row
/// another program wrote may hold any BIGINT).
inline std::int64_t to_us(time_point t) { return to_unix<std::micro>(t); }
inline time_point from_us(std::int64_t us) { return from_unix_clamped<std::micro>(us); }

/// A JSON array of integers (`JSON_TABLE(:seqs, ...)` in the statements).
inline std::string json_seqs(const std::vector<std::int64_t>& seqs) {
  return outbox::sql::json_integer_array(seqs);
}

/// Upper-case hex of `s`'s bytes, as the server's HEX() writes it (the claim's list of
/// aggregates to leave out).
inline void append_hex(std::string& out, std::string_view s) {
  static constexpr char digits[] = "0123456789ABCDEF";
  for (const char ch : s) {
    const auto b = static_cast<unsigned char>(ch);
    out += digits[b >> 4];
    out += digits[b & 15];
  }
}

/// Rows of a backlog count, fetched into column vectors (SOCI's bulk into): the aggregate type
/// (stats_by_type.sql only), then the `outbox::sql::stats_column`s.
struct stats_rows {
  static constexpr std::size_t columns =
      static_cast<std::size_t>(outbox::sql::stats_column::scheduled) + 1;
  std::vector<std::string> aggregate_type;
  std::array<std::vector<long long>, columns> counts;

  /// Sizes every vector to `n` (SOCI fetches as many rows as the vectors hold).
  void resize(std::size_t n, bool by_type) {
    if (by_type) aggregate_type.resize(n);
    for (auto& v : counts) v.resize(n);
  }
  [[nodiscard]] std::size_t size() const noexcept { return counts[0].size(); }

  /// Binds the columns as intos of `st`.
  template <class Statement>
  void into(Statement& st, bool by_type) {
    if (by_type) st.exchange(::soci::into(aggregate_type));
    for (auto& v : counts) st.exchange(::soci::into(v));
  }
};

/// Row `i` of `stats_rows`, as `outbox::sql::read_backlog` reads it (its columns from 0).
struct stats_row {
  const stats_rows& r;
  std::size_t i;
  [[nodiscard]] std::int64_t int64(int c) const { return r.counts[static_cast<std::size_t>(c)][i]; }
};

/// Rows of a claim or a dead-letter listing, fetched into column vectors (SOCI's bulk into).
struct message_rows {
  std::vector<long long> seq, attempts, created_at, dead_at, replays, replayed_at;
  std::vector<std::string> event_id, aggregate_type, aggregate_id, event_type, payload, headers,
      content_type, last_error, dead_cause;

  /// Sizes every vector to `n` (SOCI fetches as many rows as the vectors hold).
  void resize(std::size_t n, bool dead_letter_columns = false) {
    for (auto* v : {&seq, &attempts, &created_at}) v->resize(n);
    for (auto* v : {&event_id, &aggregate_type, &aggregate_id, &event_type, &payload, &headers,
                    &content_type})
      v->resize(n);
    if (dead_letter_columns) {
      for (auto* v : {&dead_at, &replays, &replayed_at}) v->resize(n);
      last_error.resize(n);
      dead_cause.resize(n);
    }
  }
  [[nodiscard]] std::size_t size() const noexcept { return seq.size(); }

  /// Binds the message columns (outbox::sql::column order) as intos of `st`.
  template <class Statement>
  void into(Statement& st, bool dead_letter_columns = false) {
    st.exchange(::soci::into(seq));
    st.exchange(::soci::into(event_id));
    st.exchange(::soci::into(aggregate_type));
    st.exchange(::soci::into(aggregate_id));
    st.exchange(::soci::into(event_type));
    st.exchange(::soci::into(payload));
    st.exchange(::soci::into(headers));
    st.exchange(::soci::into(attempts));
    st.exchange(::soci::into(created_at));
    st.exchange(::soci::into(content_type));
    if (dead_letter_columns) {
      st.exchange(::soci::into(last_error));
      st.exchange(::soci::into(dead_at));
      st.exchange(::soci::into(dead_cause));
      st.exchange(::soci::into(replays));
      st.exchange(::soci::into(replayed_at));
    }
  }
};

/// Row `i` of `message_rows`, as `outbox::sql::read_message` reads it.
struct row {
  const message_rows& r;
  std::size_t i;
  [[nodiscard]] std::int64_t int64(int c) const {
    switch (c) {
      case outbox::sql::column::seq:
        return r.seq[i];
      case outbox::sql::column::attempts:
        return r.attempts[i];
      case outbox::sql::column::created_at:
        return r.created_at[i];
      case outbox::sql::column::after_message + 3:  // of a dead-letter listing
        return r.replays[i];
      case outbox::sql::column::after_message + 4:
        return r.replayed_at[i];
      default:
        return r.dead_at[i];  // after_message + 1 of a dead-letter listing
    }
  }
  [[nodiscard]] std::string_view text(int c) const {
    switch (c) {
      case outbox::sql::column::event_id:
        return r.event_id[i];
      case outbox::sql::column::aggregate_type:
        return r.aggregate_type[i];
      case outbox::sql::column::aggregate_id:
        return r.aggregate_id[i];
      case outbox::sql::column::event_type:
        return r.event_type[i];
      case outbox::sql::column::payload:
        return r.payload[i];
      case outbox::sql::column::headers:
        return r.headers[i];
      case outbox::sql::column::content_type:
        return r.content_type[i];
      case outbox::sql::column::after_message + 2:  // of a dead-letter listing
        return r.dead_cause[i];
      default:
        return r.last_error[i];  // after_message of a dead-letter listing
    }
  }
  [[nodiscard]] std::string bytes(int c) const { return std::string(text(c)); }
  [[nodiscard]] time_point time(int c) const { return from_us(int64(c)); }
};

/// Runs a prepared-by-SOCI statement with the given use/into elements and returns the rows it
/// changed (matched: SOCI connects with CLIENT_FOUND_ROWS).
template <class... Elements>
long long execute(::soci::session& sql, std::string_view text, Elements&&... elements) {
  ::soci::statement st = ((sql.prepare << std::string(text)), ..., elements);
  st.execute(true);
  return st.get_affected_rows();
}

}  // namespace outbox::mysql::detail
