#pragma once
/// @file
/// The SQLite dialect's connection layer: the sqlite3 handle under a `soci::session`, prepared
/// statements, classification of result codes, BEGIN IMMEDIATE. The hot statements of the
/// store are prepared once and stepped directly (SOCI re-prepares `session << ...` each time and
/// converts every value through its type layer; see the adapter's README for the measurements).

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <utility>

// SOCI's backend header includes <sqlite3.h> inside `namespace sqlite_api`; it must come first,
// and everything sqlite is then spelt `sqlite_api::` (the macros stay global).
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>

#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/sql/backend.hpp>
#include <outbox/time.hpp>
#include <outbox/validate.hpp>

namespace outbox::sqlite::detail {

namespace sq = ::sqlite_api;

/// Classifies an sqlite3 result code (primary or extended).
inline errc classify(int rc) noexcept {
  const int primary = rc & 0xFF;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED || primary == SQLITE_PROTOCOL ||
      primary == SQLITE_FULL || primary == SQLITE_IOERR || primary == SQLITE_NOMEM)
    return errc::transient;  // may pass: lock released, disk space freed, memory available
  if (primary == SQLITE_READONLY || primary == SQLITE_CANTOPEN || primary == SQLITE_PERM ||
      primary == SQLITE_AUTH || primary == SQLITE_NOTADB)
    return errc::misconfigured;
  if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY) return errc::duplicate;
  return errc::permanent;
}

/// Translates an sqlite3 result code into an `outbox::error` (for the store's own statements).
/// A table or column of the outbox that does not exist means the database was never migrated,
/// or is behind the library: `misconfigured`, as on every store (SQLite reports it as a
/// generic SQLITE_ERROR).
[[noreturn]] inline void throw_sqlite(sq::sqlite3* db, int rc, std::string_view what) {
  errc kind = classify(rc);
  std::string msg(what);
  msg += ": ";
  const std::string native = db ? sq::sqlite3_errmsg(db) : sq::sqlite3_errstr(rc);
  if ((rc & 0xFF) == SQLITE_ERROR &&
      (native.starts_with("no such table: ") || native.starts_with("no such column: ") ||
       native.starts_with("no such index: ") ||
       native.find(" has no column named ") != std::string::npos)) {
    kind = errc::misconfigured;
    msg += "the database is not migrated, or behind this library (call migrate): ";
  }
  msg += native;
  throw error(kind, "sqlite", std::to_string(rc) + " " + sq::sqlite3_errstr(rc), msg);
}

/// The `outbox::error` of a failure to open a session (`e`: what SOCI threw), classified by
/// its result code (`classify`): a file that cannot be opened (14, no such directory, no right)
/// is misconfigured. Without one, SOCI refused the connect string itself: misconfigured.
[[nodiscard]] inline error connect_error(const std::exception& e, std::string_view what) {
  std::string msg = std::string(what) + ": " + sanitize_text(e.what());
  if (const auto* s = dynamic_cast<const ::soci::sqlite3_soci_error*>(&e))
    return error(classify(s->result()), "sqlite",
                 std::to_string(s->result()) + " " + sq::sqlite3_errstr(s->result()), msg);
  return error(errc::misconfigured, "sqlite", {}, msg);
}

/// The sqlite3 handle of a SOCI session.
/// @throws outbox::error `misconfigured` when the session is not connected with the sqlite3
///         backend.
inline sq::sqlite3* handle(::soci::session& sql) {
  return outbox::sql::soci_backend<::soci::sqlite3_session_backend>(sql, "sqlite3", "sqlite").conn_;
}

/// Runs one or more statements with no parameters and no results.
inline void exec(sq::sqlite3* db, const char* sql_text) {
  char* err = nullptr;
  const int rc = sq::sqlite3_exec(db, sql_text, nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    const int code = sq::sqlite3_extended_errcode(db);
    std::string what = err ? err : "exec failed";
    sq::sqlite3_free(err);
    throw_sqlite(db, code, what);
  }
}

/// Unix milliseconds: the form of every timestamp column (`outbox/time.hpp`; read back clamped,
/// since a row another program wrote may hold any integer).
inline std::int64_t to_ms(time_point t) { return to_unix<std::milli>(t); }
inline time_point from_ms(std::int64_t ms) { return from_unix_clamped<std::milli>(ms); }

/// A prepared statement owned by this object (finalized on destruction), reset after each use.
class statement {
 public:
  statement() = default;
  statement(sq::sqlite3* db, std::string_view text, bool persistent = false) : db_(db) {
    const int rc =
        sq::sqlite3_prepare_v3(db, text.data(), static_cast<int>(text.size()),
                               persistent ? SQLITE_PREPARE_PERSISTENT : 0, &stmt_, nullptr);
    if (rc != SQLITE_OK) throw_sqlite(db, rc, "prepare");
  }
  statement(statement&& o) noexcept
      : db_(std::exchange(o.db_, nullptr)), stmt_(std::exchange(o.stmt_, nullptr)) {}
  statement& operator=(statement&& o) noexcept {
    if (this != &o) {
      finalize();
      db_ = std::exchange(o.db_, nullptr);
      stmt_ = std::exchange(o.stmt_, nullptr);
    }
    return *this;
  }
  statement(const statement&) = delete;
  statement& operator=(const statement&) = delete;
  ~statement() { finalize(); }

  [[nodiscard]] explicit operator bool() const noexcept { return stmt_ != nullptr; }

  // Text is bound SQLITE_STATIC: the caller keeps it alive until the statement is reset.
  statement& bind(int i, std::string_view v) {
    check(sq::sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC));
    return *this;
  }
  statement& bind(int i, std::int64_t v) {
    check(sq::sqlite3_bind_int64(stmt_, i, v));
    return *this;
  }
  /// Bytes, kept exactly (a BLOB; an empty one is a zero-length BLOB, not NULL).
  statement& bind_blob(int i, std::string_view v) {
    check(v.empty() ? sq::sqlite3_bind_zeroblob(stmt_, i, 0)
                    : sq::sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()),
                                            SQLITE_STATIC));
    return *this;
  }
  statement& bind_null(int i) {
    check(sq::sqlite3_bind_null(stmt_, i));
    return *this;
  }

  /// Steps once: true when a row is available, false when done.
  bool step() {
    const int rc = sq::sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    const int err = sq::sqlite3_extended_errcode(db_);
    reset();
    throw_sqlite(db_, err, "step");
  }
  /// Runs a statement that returns no rows; returns the number of rows it changed.
  std::int64_t run() {
    while (step()) {
    }
    const auto n = sq::sqlite3_changes64(db_);
    reset();
    return n;
  }
  void reset() noexcept {
    sq::sqlite3_reset(stmt_);
    sq::sqlite3_clear_bindings(stmt_);
  }

  [[nodiscard]] std::int64_t column_int64(int i) const {
    return sq::sqlite3_column_int64(stmt_, i);
  }
  [[nodiscard]] std::string column_text(int i) const {
    const auto* p = reinterpret_cast<const char*>(sq::sqlite3_column_text(stmt_, i));
    return p ? std::string(p, static_cast<std::size_t>(sq::sqlite3_column_bytes(stmt_, i)))
             : std::string();
  }
  /// The text of a column without a copy; valid until the next step or reset.
  [[nodiscard]] std::string_view column_view(int i) const {
    const auto* p = reinterpret_cast<const char*>(sq::sqlite3_column_text(stmt_, i));
    return p ? std::string_view(p, static_cast<std::size_t>(sq::sqlite3_column_bytes(stmt_, i)))
             : std::string_view();
  }
  /// The bytes of a column (BLOB or TEXT), exactly.
  [[nodiscard]] std::string column_bytes(int i) const {
    const auto* p = static_cast<const char*>(sq::sqlite3_column_blob(stmt_, i));
    return p ? std::string(p, static_cast<std::size_t>(sq::sqlite3_column_bytes(stmt_, i)))
             : std::string();
  }
  [[nodiscard]] bool column_is_null(int i) const {
    return sq::sqlite3_column_type(stmt_, i) == SQLITE_NULL;
  }

 private:
  void check(int rc) {
    if (rc != SQLITE_OK) throw_sqlite(db_, rc, "bind");
  }
  void finalize() noexcept {
    if (stmt_) sq::sqlite3_finalize(stmt_);
    stmt_ = nullptr;
  }

  sq::sqlite3* db_ = nullptr;
  sq::sqlite3_stmt* stmt_ = nullptr;
};

/// A write transaction begun with BEGIN IMMEDIATE (the write lock is taken at once, so the busy
/// timeout applies instead of a deadlock-prone upgrade); rolled back unless committed.
class immediate_transaction {
 public:
  explicit immediate_transaction(sq::sqlite3* db) : db_(db) { exec(db_, "BEGIN IMMEDIATE"); }
  immediate_transaction(immediate_transaction&& o) noexcept : db_(std::exchange(o.db_, nullptr)) {}
  immediate_transaction& operator=(immediate_transaction&&) = delete;
  ~immediate_transaction() {
    if (db_) sq::sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  /// @throws outbox::error `transient` when the commit is refused as busy (still rolled back);
  ///         `permanent` when the transaction is already gone: a statement rolled it back
  ///         (e.g. `INSERT OR ROLLBACK`, or SQLite's own rollback on a full disk) and the caller
  ///         carried on, so nothing it wrote since BEGIN would be committed.
  void commit() {
    if (sq::sqlite3_get_autocommit(db_) != 0) {
      db_ = nullptr;
      throw error(errc::permanent, "sqlite", {},
                  "commit: the transaction was rolled back by a failed statement before the "
                  "commit (an error was swallowed); nothing was committed");
    }
    exec(db_, "COMMIT");
    db_ = nullptr;
  }

 private:
  sq::sqlite3* db_;
};

}  // namespace outbox::sqlite::detail
