#pragma once
/// @file
/// A PostgreSQL store's connection: the libpq handle under its SOCI session, re-established
/// after a loss with the store's statements prepared again, and the transactions that belong to
/// one connection. Not movable: the store owns it by pointer, so transactions and claims keep
/// their link when the store moves.

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <outbox/error.hpp>
#include <outbox/postgresql/detail/connection.hpp>
#include <outbox/store/migrate.hpp>
#include <outbox/validate.hpp>

namespace outbox::postgresql::detail {

/// A statement prepared on every connection the link makes.
struct prepared_statement {
  const char* name;
  std::string_view sql;
};

class link {
 public:
  /// @param version_check a statement returning the database's schema version, run on each new
  ///        connection before the statements are prepared; @param schema_version what they
  ///        need.
  link(::soci::session& sql, std::vector<prepared_statement> statements,
       std::string_view version_check, int schema_version)
      : sql_(&sql),
        conn_(handle(sql)),
        statements_(std::move(statements)),
        version_check_(version_check),
        schema_version_(schema_version) {}
  link(const link&) = delete;
  link& operator=(const link&) = delete;
  ~link() {
    if (in_claim_ && !broken_ && conn_ && PQstatus(conn_) == CONNECTION_OK)
      PQclear(PQexec(conn_, "ROLLBACK"));
  }

  [[nodiscard]] ::soci::session& session() noexcept { return *sql_; }

  /// The connection, re-established after a loss and with its statements prepared.
  ///
  /// SOCI's `reconnect` closes the old backend before it opens the new one, so a reconnect
  /// that fails (the server still away) leaves the session with no backend at all. That is
  /// still our lost connection, not a misconfiguration: each call tries again, and fails as
  /// `transient` until the server is back.
  PGconn* connection() {
    const bool gone = sql_->get_backend() == nullptr;
    if (broken_ || gone || PQstatus(handle(*sql_)) != CONNECTION_OK) {
      broken_ = true;
      in_claim_ = false;
      listening_ = false;
      conn_ = nullptr;  // freed by the reconnect below, whether it succeeds or not
      try {
        sql_->reconnect();
      } catch (const std::exception& e) {
        // Transient whatever the server said (it took this connection before), with its code.
        throw error(errc::transient, "postgresql", connect_sqlstate(e),
                    std::string("reconnect: ") + sanitize_text(e.what()));
      }
      broken_ = false;
      // A new connection, even if the allocator handed back the same address: nothing of the
      // old one (prepared statements, LISTEN, an open claim) exists on it.
      prepared_ = false;
      ++generation_;
    }
    PGconn* c = handle(*sql_);
    if (c != conn_ || !prepared_) {
      if (c != conn_) ++generation_;
      conn_ = c;
      prepared_ = false;
      listening_ = false;
      in_claim_ = false;
      outbox::store::require_schema_version(
          exec(c, std::string(version_check_).c_str()).int64(0, 0), schema_version_, "postgresql");
      // Idempotent: a preparation cut short by an error may have left some of them behind.
      std::string names;
      for (const auto& s : statements_)
        names += (names.empty() ? "'" : ", '") + std::string(s.name) + "'";
      auto left = exec(
          c, ("SELECT name FROM pg_prepared_statements WHERE name IN (" + names + ")").c_str());
      for (int i = 0; i < left.rows(); ++i)
        exec(c, ("DEALLOCATE " + std::string(left.text(i, 0))).c_str());
      for (const auto& s : statements_) prepare(c, s.name, s.sql);
      prepared_ = true;
    }
    return c;
  }

  /// Runs `f` on the live connection; on a connection loss, marks the link for reconnection
  /// (the open claim, if any, is gone with it) and rethrows as `transient`. A failed statement
  /// inside an open claim transaction ends it, so the batch is free again.
  template <class F>
  std::invoke_result_t<F&, PGconn*> run(std::string_view what, F&& f) {
    PGconn* c = connection();
    try {
      return f(c);
    } catch (const error& e) {
      if (connection_lost(c, e.native_code())) {
        broken_ = true;
        in_claim_ = false;
        if (e.kind() != errc::transient)
          throw error(errc::transient, "postgresql", e.native_code(),
                      std::string(what) + ": connection lost");
      } else if (in_claim_) {
        rollback_claim(c);
      }
      throw;
    }
  }

  // ---- the open claim transaction (locking) ----------------------------------------------------

  void begin_claim(std::int64_t token) noexcept {
    in_claim_ = true;
    claim_token_ = token;
  }
  [[nodiscard]] bool in_claim() const noexcept { return in_claim_; }
  [[nodiscard]] bool is_open_claim(std::int64_t token) const noexcept {
    return in_claim_ && claim_token_ == token;
  }
  void end_claim() noexcept { in_claim_ = false; }
  void rollback_claim(PGconn* c) {
    in_claim_ = false;
    PQclear(PQexec(c, "ROLLBACK"));
  }

  // ---- LISTEN
  // ------------------------------------------------------------------------------------

  [[nodiscard]] bool listening() const noexcept { return listening_; }
  void set_listening() noexcept { listening_ = true; }
  /// The connection the last call used (null while lost): for reading input after a wait.
  [[nodiscard]] PGconn* current() const noexcept { return conn_; }
  void mark_broken() noexcept { broken_ = true; }

  // ---- transactions
  // ------------------------------------------------------------------------------

  /// A transaction on the link's session; rolls back on destruction unless committed.
  ///
  /// It belongs to the connection that began it: if that connection is lost (and the link
  /// reconnects), `commit` fails instead of sending COMMIT on a new session where it would
  /// commit nothing and report success.
  class transaction {
   public:
    explicit transaction(link& l) : l_(&l) {
      l_->run("begin", [&](PGconn* c) { exec(c, "BEGIN"); });
      generation_ = l_->generation_;
    }
    transaction(transaction&& o) noexcept
        : l_(std::exchange(o.l_, nullptr)), generation_(o.generation_) {}
    transaction& operator=(transaction&&) = delete;
    ~transaction() {
      if (l_ && still_ours()) PQclear(PQexec(l_->conn_, "ROLLBACK"));
    }

    /// Commits, after checking that the transaction is the one this object began and that no
    /// statement in it failed. A handler that caught a SQL error and carried on leaves the
    /// transaction aborted; PostgreSQL then answers COMMIT with the tag ROLLBACK and no error,
    /// which would report an effect as applied that was thrown away.
    /// @throws outbox::error `transient` (the connection was lost before COMMIT: nothing was
    ///         committed), `in_doubt` (lost during COMMIT: the inbox makes a redelivery
    ///         harmless), `permanent` (a statement failed inside the transaction: rolled back).
    void commit() {
      link* s = std::exchange(l_, nullptr);
      if (s->generation_ != generation_ || s->broken_ || PQstatus(s->conn_) != CONNECTION_OK) {
        s->broken_ = true;
        throw error(errc::transient, "postgresql", {},
                    "commit: the connection of this transaction was lost; nothing was committed");
      }
      PGconn* c = s->conn_;
      const auto status = PQtransactionStatus(c);
      if (status != PQTRANS_INTRANS) {
        const bool failed = status == PQTRANS_INERROR;
        if (failed) PQclear(PQexec(c, "ROLLBACK"));
        throw error(errc::permanent, "postgresql", {},
                    failed ? "commit: a statement failed inside the transaction (its error was "
                             "caught and not rethrown), so PostgreSQL rolled it back; nothing "
                             "was committed"
                           : "commit: no transaction is open on the session (it was ended "
                             "behind the store's back); nothing was committed");
      }
      result r(PQexec(c, "COMMIT"));
      const auto rs = r.get() ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
      if (rs != PGRES_COMMAND_OK) {
        if (PQstatus(c) != CONNECTION_OK) {
          s->broken_ = true;
          throw error(errc::in_doubt, "postgresql", {},
                      "commit: the connection was lost during COMMIT; the outcome is unknown");
        }
        throw_pg(c, r, "commit");  // e.g. a deferred constraint: rolled back
      }
      if (std::string_view(PQcmdStatus(r.get())) != "COMMIT")
        throw error(errc::permanent, "postgresql", {},
                    std::string("commit: the server answered ") + PQcmdStatus(r.get()) +
                        "; nothing was committed");
    }

   private:
    [[nodiscard]] bool still_ours() const noexcept {
      return l_->generation_ == generation_ && !l_->broken_ && l_->conn_ != nullptr &&
             PQstatus(l_->conn_) == CONNECTION_OK;
    }

    link* l_;
    std::uint64_t generation_ = 0;
  };

 private:
  ::soci::session* sql_;
  PGconn* conn_;  // the connection statements were prepared on; null while it is lost
  std::uint64_t generation_ = 0;  // counts connections: a transaction belongs to one
  std::vector<prepared_statement> statements_;
  std::string_view version_check_;
  int schema_version_;
  bool prepared_ = false;
  bool broken_ = false;
  bool listening_ = false;
  bool in_claim_ = false;
  std::int64_t claim_token_ = 0;  // the open locking claim's
};

}  // namespace outbox::postgresql::detail
