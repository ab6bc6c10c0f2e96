#pragma once
/// @file
/// The PostgreSQL dialect's connection layer: the libpq connection under a `soci::session`,
/// prepared statements with text (and binary bytea) parameters, results, SQLSTATE translation.

#include <array>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <libpq-events.h>
#include <libpq-fe.h>
#include <soci/postgresql/soci-postgresql.h>
#include <soci/soci.h>

#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/sql/backend.hpp>
#include <outbox/time.hpp>
#include <outbox/validate.hpp>

namespace outbox::postgresql::detail {

/// Classifies a SQLSTATE: class 08 (connection), 57P01-03 (server shutting down or the backend
/// terminated), 40001 (serialization), 40P01 (deadlock), 25P03 (idle-in-transaction timeout),
/// 57014 (statement cancelled), 55P03 (lock not available), 53xxx (insufficient resources)
/// -> transient; 23505 -> duplicate; 28xxx (authentication),
/// 3D000 (no database), 42P01, 42703, 42883 (no such table, column or function: the schema is
/// not migrated, or behind) -> misconfigured; others -> permanent.
inline errc classify(std::string_view sqlstate) {
  if (sqlstate.size() != 5) return errc::transient;  // no SQLSTATE: the connection broke
  if (sqlstate.substr(0, 2) == "08" || sqlstate.substr(0, 2) == "53" || sqlstate == "57P01" ||
      sqlstate == "57P02" || sqlstate == "57P03" || sqlstate == "40001" || sqlstate == "40P01" ||
      sqlstate == "25P03" || sqlstate == "57014" || sqlstate == "55P03")
    return errc::transient;
  if (sqlstate == "23505") return errc::duplicate;
  if (sqlstate.substr(0, 2) == "28" || sqlstate == "3D000" || sqlstate == "42P01" ||
      sqlstate == "42703" || sqlstate == "42883")
    return errc::misconfigured;
  return errc::permanent;
}

/// True for failures after which the connection must be re-established.
inline bool connection_lost(PGconn* conn, std::string_view sqlstate) {
  return PQstatus(conn) != CONNECTION_OK || sqlstate.substr(0, 2) == "08" ||
         sqlstate.substr(0, 3) == "57P";
}

/// An owned `PGresult`.
class result {
 public:
  result() = default;
  explicit result(PGresult* r) noexcept : r_(r) {}
  result(result&& o) noexcept : r_(std::exchange(o.r_, nullptr)) {}
  result& operator=(result&& o) noexcept {
    if (this != &o) {
      if (r_) PQclear(r_);
      r_ = std::exchange(o.r_, nullptr);
    }
    return *this;
  }
  result(const result&) = delete;
  result& operator=(const result&) = delete;
  ~result() {
    if (r_) PQclear(r_);
  }

  [[nodiscard]] PGresult* get() const noexcept { return r_; }
  [[nodiscard]] int rows() const noexcept { return PQntuples(r_); }
  [[nodiscard]] std::string_view text(int row, int col) const noexcept {
    return {PQgetvalue(r_, row, col), static_cast<std::size_t>(PQgetlength(r_, row, col))};
  }
  [[nodiscard]] bool is_null(int row, int col) const noexcept {
    return PQgetisnull(r_, row, col) != 0;
  }
  [[nodiscard]] std::int64_t int64(int row, int col) const {
    std::int64_t v = 0;
    const auto t = text(row, col);
    std::from_chars(t.data(), t.data() + t.size(), v);
    return v;
  }
  /// Rows affected by an INSERT/UPDATE/DELETE.
  [[nodiscard]] std::int64_t affected() const {
    std::int64_t v = 0;
    const char* t = PQcmdTuples(r_);
    std::from_chars(t, t + std::strlen(t), v);
    return v;
  }

 private:
  PGresult* r_ = nullptr;
};

/// Throws the `outbox::error` for a failed result (or a missing one).
[[noreturn]] inline void throw_pg(PGconn* conn, const result& r, std::string_view what) {
  const char* state = r.get() ? PQresultErrorField(r.get(), PG_DIAG_SQLSTATE) : nullptr;
  const std::string sqlstate = state ? state : "";
  std::string msg(what);
  msg += ": ";
  const char* text = r.get() ? PQresultErrorMessage(r.get()) : nullptr;
  msg += (text && *text) ? text : PQerrorMessage(conn);
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  throw error(classify(sqlstate), "postgresql", sqlstate, msg);
}

/// Checks a result; throws unless it is COMMAND_OK or TUPLES_OK.
inline result check(PGconn* conn, PGresult* raw, std::string_view what) {
  result r(raw);
  const auto status = raw ? PQresultStatus(raw) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) throw_pg(conn, r, what);
  return r;
}

/// Runs a statement without parameters.
inline result exec(PGconn* conn, const char* sql) { return check(conn, PQexec(conn, sql), sql); }

/// Parameters of one statement: text, or bytes sent in binary (bytea, exact). Values are copied,
/// so temporaries are fine.
class params {
 public:
  params& add(std::string v) {
    values_.push_back(std::move(v));
    kinds_.push_back(kind::text);
    return *this;
  }
  params& add(std::string_view v) { return add(std::string(v)); }
  params& add(const char* v) { return add(std::string(v)); }
  params& add(std::int64_t v) { return add(std::to_string(v)); }
  /// Bytes for a bytea parameter, sent in binary format: no escaping, NUL bytes included.
  params& add_bytes(std::string_view v) {
    values_.emplace_back(v);
    kinds_.push_back(kind::binary);
    return *this;
  }
  params& add_null() {
    values_.emplace_back();
    kinds_.push_back(kind::null);
    return *this;
  }
  [[nodiscard]] int size() const noexcept { return static_cast<int>(values_.size()); }
  /// Pointers for libpq; valid while this object lives and is not changed.
  [[nodiscard]] std::vector<const char*> pointers() const {
    std::vector<const char*> p(values_.size());
    for (std::size_t i = 0; i < values_.size(); ++i)
      p[i] = kinds_[i] == kind::null ? nullptr : values_[i].data();
    return p;
  }
  /// Lengths and formats for libpq (null when every parameter is text: the common case).
  [[nodiscard]] bool any_binary() const noexcept {
    for (const auto k : kinds_)
      if (k == kind::binary) return true;
    return false;
  }
  [[nodiscard]] std::vector<int> lengths() const {
    std::vector<int> l(values_.size());
    for (std::size_t i = 0; i < values_.size(); ++i) l[i] = static_cast<int>(values_[i].size());
    return l;
  }
  [[nodiscard]] std::vector<int> formats() const {
    std::vector<int> f(values_.size());
    for (std::size_t i = 0; i < values_.size(); ++i) f[i] = kinds_[i] == kind::binary ? 1 : 0;
    return f;
  }

 private:
  enum class kind : unsigned char { text, binary, null };
  std::vector<std::string> values_;
  std::vector<kind> kinds_;
};

/// A PostgreSQL array literal (`{1,2}`, `{"a","b"}`) built one element at a time, so that a
/// whole list binds as one text parameter.
class array_literal {
 public:
  /// Appends a number.
  array_literal& add(std::int64_t v) {
    separate();
    text_ += std::to_string(v);
    return *this;
  }
  /// Appends `s` as a double-quoted, escaped element, made valid UTF-8 without NUL first (or
  /// the statement would fail on it).
  array_literal& add_text(std::string_view s) {
    separate();
    text_ += '"';
    for (char ch : sanitize_text(s)) {
      if (ch == '"' || ch == '\\') text_ += '\\';
      text_ += ch;
    }
    text_ += '"';
    return *this;
  }
  /// How many elements were added.
  [[nodiscard]] std::size_t size() const noexcept { return n_; }
  /// The literal, closed.
  [[nodiscard]] std::string str() const { return text_ + '}'; }

 private:
  void separate() {
    if (n_++ > 0) text_ += ',';
  }
  std::string text_ = "{";
  std::size_t n_ = 0;
};

/// Runs an unnamed statement (one round trip).
inline result exec(PGconn* conn, const std::string& sql, const params& p, std::string_view what) {
  const auto ptrs = p.pointers();
  if (!p.any_binary())
    return check(
        conn, PQexecParams(conn, sql.c_str(), p.size(), nullptr, ptrs.data(), nullptr, nullptr, 0),
        what);
  const auto lengths = p.lengths();
  const auto formats = p.formats();
  return check(conn,
               PQexecParams(conn, sql.c_str(), p.size(), nullptr, ptrs.data(), lengths.data(),
                            formats.data(), 0),
               what);
}

/// Runs a statement prepared on this connection under `name`.
inline result exec_prepared(PGconn* conn, const char* name, const params& p,
                            std::string_view what) {
  const auto ptrs = p.pointers();
  if (!p.any_binary())
    return check(conn, PQexecPrepared(conn, name, p.size(), ptrs.data(), nullptr, nullptr, 0),
                 what);
  const auto lengths = p.lengths();
  const auto formats = p.formats();
  return check(conn,
               PQexecPrepared(conn, name, p.size(), ptrs.data(), lengths.data(), formats.data(), 0),
               what);
}

/// Prepares `sql` under `name` on this connection.
inline void prepare(PGconn* conn, const char* name, std::string_view sql) {
  check(conn, PQprepare(conn, name, std::string(sql).c_str(), 0, nullptr), name);
}

/// The libpq event procedure that marks, per connection, the statement `Name` as prepared
/// (instance data non-null); a PQreset (a new server session) clears the mark.
template <const char* Name>
int prepared_mark_events(PGEventId id, void* info, void* /*pass_through*/) {
  if (id == PGEVT_CONNRESET)
    PQsetInstanceData(static_cast<PGEventConnReset*>(info)->conn, &prepared_mark_events<Name>,
                      nullptr);
  return 1;
}

/// The name `Name` of `sql`, prepared on `conn` the first time it is asked for on this
/// connection (a round trip, inside the caller's transaction; a prepared statement outlives a
/// rollback). The mark lives in the PGconn itself (libpq's event system), so a new connection at
/// the address of a closed one starts unprepared.
/// @throws outbox::error when preparing fails (the caller's transaction is then aborted).
template <const char* Name>
const char* prepared_once(PGconn* conn, std::string_view sql) {
  static char prepared_mark = 0;
  if (PQinstanceData(conn, &prepared_mark_events<Name>) == nullptr) {
    (void)PQregisterEventProc(conn, &prepared_mark_events<Name>, Name, nullptr);  // 0: already
    prepare(conn, Name, sql);
    PQsetInstanceData(conn, &prepared_mark_events<Name>, &prepared_mark);
  }
  return Name;
}

/// Clears the mark of `prepared_once<Name>` on `conn` (the statement is gone from the server).
template <const char* Name>
void forget_prepared(PGconn* conn) {
  PQsetInstanceData(conn, &prepared_mark_events<Name>, nullptr);
}

/// The writers' statements prepared once per connection: the table writer's one-row INSERT,
/// the table-free writer's one logical decoding message, and the table mode's INSERT; and the
/// log-tailing relay's look for pending rows before each stream batch.
inline constexpr char append_statement[] = "outbox_append";
inline constexpr char emit_statement[] = "outbox_emit";
inline constexpr char append_streamed_statement[] = "outbox_append_streamed";
inline constexpr char parked_aggregates_statement[] = "outbox_parked_aggregates";
inline constexpr char wake_statement[] = "outbox_wake";  ///< the writer transaction's wake-up

/// Runs a statement prepared once per connection (`prepared_once<Name>`); when the server no
/// longer has it (DISCARD ALL, DEALLOCATE ALL: 26000), the caller's transaction is aborted and
/// the next call on this connection prepares it again.
template <const char* Name>
result exec_prepared_once(PGconn* conn, std::string_view sql, const params& p,
                          std::string_view what) {
  try {
    return exec_prepared(conn, prepared_once<Name>(conn, sql), p, what);
  } catch (const error& e) {
    if (e.native_code().starts_with("26000")) forget_prepared<Name>(conn);
    throw;
  }
}

/// The SQLSTATE of a failure to open a session (`e`: what SOCI threw). libpq gives none for a
/// connection it could not make (SOCI throws a plain `soci_error` with libpq's message): a
/// refusal the server sent is known by its message (in English; under another lc_messages it
/// is not recognized); a connection string libpq refuses before dialling (an unknown option or
/// a bad value: `sslmode=bogus`) is 22023; anything else, a server away, refusing or not
/// answering, is 08001 (the standard's "unable to establish connection").
[[nodiscard]] inline std::string connect_sqlstate(const std::exception& e) {
  if (const auto* p = dynamic_cast<const ::soci::postgresql_soci_error*>(&e)) {
    std::string s = p->sqlstate();
    if (s.size() == 5) return s;
  }
  const std::string_view why = e.what();
  const auto has = [&why](std::string_view a, std::string_view b = {}) {
    const auto at = why.find(a);
    return at != std::string_view::npos && why.find(b, at + a.size()) != std::string_view::npos;
  };
  if (has("password authentication failed")) return "28P01";
  if (has("no pg_hba.conf entry") || has("FATAL:  role \"", "\" does not exist")) return "28000";
  if (has("FATAL:  database \"", "\" does not exist")) return "3D000";
  if (has("FATAL:  the database system is")) return "57P03";  // starting up, shutting down
  if (has("too many clients already") || has("remaining connection slots are reserved"))
    return "53300";
  // libpq's refusals of the connection string itself (fe-connect.c): no try could succeed.
  for (const std::string_view conninfo :
       {"invalid connection option \"", "missing \"=\" after \"", "unterminated quoted string",
        "invalid integer value \"", "invalid port number", "invalid URI", "invalid percent-encoded",
        "forbidden value %00", "key/value separator", "could not match ",
        "could not parse network address", "invalid when SSL support is not compiled in"})
    if (has(conninfo)) return "22023";
  if (has("invalid ", " value: \"")) return "22023";  // invalid sslmode value: "bogus"
  return "08001";
}

/// The `outbox::error` of a failure to open a session, classified by `connect_sqlstate`:
/// transient for a server away (08001), misconfigured for a refused login or database or a
/// connection string libpq refuses (22023).
[[nodiscard]] inline error connect_error(const std::exception& e, std::string_view what) {
  const std::string sqlstate = connect_sqlstate(e);
  std::string msg = sanitize_text(e.what());
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  const errc kind = sqlstate == "22023" ? errc::misconfigured : classify(sqlstate);
  return error(kind, "postgresql", sqlstate, std::string(what) + ": " + msg);
}

/// The libpq connection of a SOCI session.
/// @throws outbox::error `misconfigured` when the session does not use the postgresql backend.
inline PGconn* handle(::soci::session& sql) {
  return outbox::sql::soci_backend<::soci::postgresql_session_backend>(sql, "postgresql",
                                                                       "postgresql")
      .conn_;
}

/// Microseconds since the Unix epoch: the wire form of every timestamp we pass. Read back
/// clamped, since `outbox_us` of a row another program wrote may be any bigint
/// (`outbox/time.hpp`).
inline std::int64_t to_us(time_point t) { return to_unix<std::micro>(t); }
inline time_point from_us(std::int64_t us) { return from_unix_clamped<std::micro>(us); }

/// The bytes of a bytea value in text result format (hex, "\\x0a1b..."); a value that is not
/// hex (the server's bytea_output set to 'escape') is returned as it is.
inline std::string bytea_from_text(std::string_view t) {
  // A table, not branches: a claim decodes every payload it returns.
  static constexpr auto nibbles = [] {
    std::array<signed char, 256> n{};
    n.fill(-1);
    for (int c = '0'; c <= '9'; ++c)
      n[static_cast<std::size_t>(c)] = static_cast<signed char>(c - '0');
    for (int c = 'a'; c <= 'f'; ++c)
      n[static_cast<std::size_t>(c)] = static_cast<signed char>(c - 'a' + 10);
    for (int c = 'A'; c <= 'F'; ++c)
      n[static_cast<std::size_t>(c)] = static_cast<signed char>(c - 'A' + 10);
    return n;
  }();
  if (t.size() < 2 || t[0] != '\\' || t[1] != 'x' || t.size() % 2 != 0) return std::string(t);
  std::string out(t.size() / 2 - 1, '\0');
  const auto* in = reinterpret_cast<const unsigned char*>(t.data()) + 2;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = nibbles[in[2 * i]];
    const int lo = nibbles[in[2 * i + 1]];
    if ((hi | lo) < 0) return std::string(t);
    out[i] = static_cast<char>((hi << 4) | lo);
  }
  return out;
}

/// Row `i` of a result, as `outbox::sql::read_message` reads it.
struct row {
  const result& r;
  int i;
  [[nodiscard]] std::int64_t int64(int c) const { return r.int64(i, c); }
  [[nodiscard]] std::string_view text(int c) const { return r.text(i, c); }
  [[nodiscard]] std::string bytes(int c) const { return bytea_from_text(r.text(i, c)); }
  [[nodiscard]] time_point time(int c) const { return from_us(r.int64(i, c)); }
};

}  // namespace outbox::postgresql::detail
