#pragma once
/// @file
/// A PostgreSQL store's connection: `outbox::sql::link` over the libpq handle under its SOCI
/// session, with the store's statements prepared again on each new connection.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <outbox/error.hpp>
#include <outbox/postgresql/detail/connection.hpp>
#include <outbox/sql/link.hpp>
#include <outbox/sql/migrate.hpp>

namespace outbox::postgresql::detail {

/// A statement prepared on every connection the link makes.
struct prepared_statement {
  const char* name;
  std::string_view sql;
};

/// PostgreSQL for `outbox::sql::link`.
struct dialect {
  using handle = PGconn*;
  static constexpr const char* adapter = "postgresql";

  std::vector<prepared_statement> statements;
  std::string_view version_check;  ///< returns the database's schema version
  int schema_version = 0;          ///< what the statements need

  static void check(::soci::session& sql) { (void)detail::handle(sql); }
  static void reconnect(::soci::session& sql) { sql.reconnect(); }
  static PGconn* current(::soci::session& sql) noexcept {
    return sql.get_backend() == nullptr
               ? nullptr
               : static_cast<::soci::postgresql_session_backend*>(sql.get_backend())->conn_;
  }
  static bool alive(PGconn* c) noexcept { return PQstatus(c) == CONNECTION_OK; }
  static std::string reconnect_code(const std::exception& e) { return connect_sqlstate(e); }
  static bool lost(PGconn* c, const error& e) noexcept {
    return connection_lost(c, e.native_code());
  }
  static bool rollback(PGconn* c) noexcept {
    const result r(PQexec(c, "ROLLBACK"));
    return r.get() != nullptr && PQresultStatus(r.get()) == PGRES_COMMAND_OK;
  }
  static void begin(PGconn* c) { exec(c, "BEGIN"); }
  static void finish(PGconn* c) { exec(c, "COMMIT"); }
  template <class F>
  static decltype(auto) guard(std::string_view, F&& f) {
    return std::forward<F>(f)();
  }

  /// Checks that the transaction is open and that no statement in it failed, then commits. A
  /// handler that caught a SQL error and carried on leaves the transaction aborted; PostgreSQL
  /// then answers COMMIT with the tag ROLLBACK and no error, which would report an effect as
  /// applied that was thrown away.
  static void commit(PGconn* c) {
    const auto status = PQtransactionStatus(c);
    if (status != PQTRANS_INTRANS)
      throw error(errc::permanent, adapter, {},
                  status == PQTRANS_INERROR
                      ? "commit: a statement failed inside the transaction (its error was caught "
                        "and not rethrown), so PostgreSQL rolled it back; nothing was committed"
                      : "commit: no transaction is open on the session (it was ended behind the "
                        "store's back); nothing was committed");
    const result r(PQexec(c, "COMMIT"));
    const auto rs = r.get() != nullptr ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
    if (rs != PGRES_COMMAND_OK) {
      if (PQstatus(c) != CONNECTION_OK)
        throw error(errc::in_doubt, adapter, {},
                    "commit: the connection was lost during COMMIT; the outcome is unknown");
      throw_pg(c, r, "commit");  // e.g. a deferred constraint: rolled back
    }
    if (std::string_view(PQcmdStatus(r.get())) != "COMMIT")
      throw error(errc::permanent, adapter, {},
                  std::string("commit: the server answered ") + PQcmdStatus(r.get()) +
                      "; nothing was committed");
  }

  /// The schema check, then the statements prepared. Idempotent: a preparation cut short by
  /// an error may have left some of them behind.
  void set_up(::soci::session&, PGconn* c) const {
    outbox::sql::require_schema_version(exec(c, std::string(version_check).c_str()).int64(0, 0),
                                        schema_version, adapter);
    std::string names;
    for (const auto& s : statements)
      names += (names.empty() ? "'" : ", '") + std::string(s.name) + "'";
    auto left =
        exec(c, ("SELECT name FROM pg_prepared_statements WHERE name IN (" + names + ")").c_str());
    for (int i = 0; i < left.rows(); ++i)
      exec(c, ("DEALLOCATE " + std::string(left.text(i, 0))).c_str());
    for (const auto& s : statements) prepare(c, s.name, s.sql);
  }
};

using link = outbox::sql::link<dialect>;

}  // namespace outbox::postgresql::detail
