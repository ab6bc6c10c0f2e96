#pragma once
/// @file
/// A MySQL store's connection: the client handle under its SOCI session, re-established after a
/// loss (2006, 2013, `KILL`) with the session set up again, the server checks of `migrate`, and
/// the transactions that belong to one connection. Not movable: the store owns it by pointer,
/// so transactions and claims keep their link when the store moves.

#include <charconv>
#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <outbox/error.hpp>
#include <outbox/mysql/detail/connection.hpp>
#include <outbox/mysql/schema.hpp>
#include <outbox/store/migrate.hpp>
#include <outbox/store/options.hpp>
#include <outbox/validate.hpp>

namespace outbox::mysql::detail {

/// The error number of an `outbox::error` made by this adapter (0 when it has none).
inline unsigned native_number(const error& e) noexcept {
  unsigned n = 0;
  const auto& code = e.native_code();
  std::from_chars(code.data(), code.data() + code.size(), n);
  return n;
}

/// What `VERSION()` says about the server.
struct server_version {
  bool mariadb = false;
  bool tidb = false;
  int major = 0, minor = 0, patch = 0;
};

/// Parses a `VERSION()` text: "8.0.36", "10.11.6-MariaDB-0+deb12u1", "5.7.25-TiDB-v7.5.0".
inline server_version parse_server_version(std::string_view v) {
  server_version out;
  out.mariadb = v.find("MariaDB") != std::string_view::npos;
  out.tidb = v.find("TiDB") != std::string_view::npos;
  int* parts[] = {&out.major, &out.minor, &out.patch};
  const char* p = v.data();
  const char* end = v.data() + v.size();
  for (int* part : parts) {
    const auto r = std::from_chars(p, end, *part);
    if (r.ec != std::errc{} || r.ptr == end || *r.ptr != '.') {
      p = r.ptr;
      break;
    }
    p = r.ptr + 1;
  }
  return out;
}

/// Refuses a server whose `FOR UPDATE SKIP LOCKED` is missing or unsafe, as `misconfigured`:
/// MySQL before 8.0 and MariaDB before 10.6 (no SKIP LOCKED, no JSON_TABLE), TiDB (SKIP LOCKED
/// is accepted and ignored in its optimistic mode), and Galera replication (`wsrep_on`:
/// MariaDB Galera Cluster, Percona XtraDB Cluster), where a row lock is local to one node, so two
/// relays on two nodes claim the same rows and one of them fails at commit.
inline void require_supported_server(std::string_view version, std::string_view wsrep_on) {
  const auto v = parse_server_version(version);
  const auto refuse = [&](const std::string& why) {
    throw error(errc::misconfigured, "mysql", {},
                "migrate: the server (" + sanitize_text(version) + ") is not supported: " + why);
  };
  if (v.tidb)
    refuse("TiDB does not honour FOR UPDATE SKIP LOCKED (the claim would not keep relays apart)");
  if (v.mariadb && (v.major < 10 || (v.major == 10 && v.minor < 6)))
    refuse("MariaDB 10.6 or later is needed (FOR UPDATE SKIP LOCKED, JSON_TABLE)");
  if (!v.mariadb && v.major < 8)
    refuse("MySQL 8.0 or later is needed (FOR UPDATE SKIP LOCKED, JSON_TABLE)");
  if (wsrep_on == "ON" || wsrep_on == "1")
    refuse(
        "Galera replication (wsrep_on) is on: its row locks are local to one node, so "
        "SKIP LOCKED does not keep relays on different nodes apart; point the relays at one "
        "node, or use a server without Galera");
}

/// The statements of one migration file, split at the semicolons that end them (outside quotes
/// and comments). MySQL runs one statement per call unless multi-statements are enabled on the
/// connection, which SOCI does not do.
inline std::vector<std::string> split_statements(std::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  bool has_code = false;
  char quote = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (quote != 0) {
      cur += ch;
      if (ch == '\\' && i + 1 < text.size()) {
        cur += text[++i];
      } else if (ch == quote) {
        quote = 0;
      }
      continue;
    }
    if (ch == '-' && i + 1 < text.size() && text[i + 1] == '-') {
      while (i < text.size() && text[i] != '\n') ++i;
      cur += '\n';
      continue;
    }
    if (ch == ';') {
      if (has_code) out.push_back(cur);
      cur.clear();
      has_code = false;
      continue;
    }
    if (ch == '\'' || ch == '"' || ch == '`') quote = ch;
    if (ch != ' ' && ch != '\n' && ch != '\t' && ch != '\r') has_code = true;
    cur += ch;
  }
  if (has_code) out.push_back(cur);
  return out;
}

/// How a store sets up each connection it makes (and each one SOCI makes again).
struct session_setup {
  bool configure = true;      ///< store_options::configure_session
  session_options session{};  ///< the lock wait (and the durability: nothing to set here)
  std::chrono::milliseconds idle{60'000};  ///< store_options::idle_in_transaction_timeout
  bool locking = true;                     ///< MySQL: wait_timeout only for a locking store
};

/// Seconds for a server setting, at least 1 (rounded up: a limit is never made shorter).
inline long long whole_seconds(std::chrono::milliseconds d) {
  const auto s = (d.count() + 999) / 1000;
  return s < 1 ? 1 : s;
}

/// The session set-up of `store::configure`: utf8mb4 (told to the client library, which
/// escapes by it), no silent reconnects (a reconnect inside a claim transaction would run the
/// settle on a new session, in autocommit, on rows no longer locked), READ COMMITTED, no
/// NO_BACKSLASH_ESCAPES, the lock wait (sql/mysql/session_*.sql).
inline void configure_connection(::soci::session& sql, MYSQL* c, const session_options& o) {
  if (mysql_set_character_set(c, "utf8mb4") != 0) throw_native(c, "configure: utf8mb4");
#if defined(MARIADB_VERSION_ID) || defined(MARIADB_BASE_VERSION)
  my_bool off = 0;
#else
  bool off = false;
#endif
  mysql_options(c, MYSQL_OPT_RECONNECT, &off);
  exec(c, statements::session_isolation, "configure: isolation");
  exec(c, statements::session_sql_mode, "configure: sql_mode");
  long long wait = whole_seconds(o.lock_timeout);
  translated("configure", [&] {
    sql << std::string(statements::session_lock_wait), ::soci::use(wait, "lock_wait");
  });
}

class link {
 public:
  /// @param schema_version what the store's statements need, checked on each new connection.
  link(::soci::session& sql, session_setup setup, int schema_version)
      : sql_(&sql), setup_(setup), schema_version_(schema_version) {
    (void)outbox::store::soci_backend<::soci::mysql_session_backend>(sql, "mysql", "mysql");
  }
  link(const link&) = delete;
  link& operator=(const link&) = delete;
  ~link() {
    if (in_claim_ && !broken_ && conn_ != nullptr) mysql_real_query(conn_, "ROLLBACK", 8);
  }

  [[nodiscard]] ::soci::session& session() noexcept { return *sql_; }

  /// The connection, re-established after a loss and set up. SOCI's `reconnect` closes the old
  /// connection before it opens the new one, so a reconnect that fails (the server still away)
  /// leaves the session without one: each call tries again, `transient` until it is back.
  MYSQL* connection() {
    auto* backend = static_cast<::soci::mysql_session_backend*>(sql_->get_backend());
    if (broken_ || backend == nullptr || backend->conn_ == nullptr) {
      broken_ = true;
      in_claim_ = false;
      conn_ = nullptr;
      try {
        sql_->reconnect();
      } catch (const std::exception& e) {
        // Transient whatever the server said (it took this connection before), with its number.
        const unsigned n = connect_errno(e);
        throw error(errc::transient, "mysql", n == 0 ? std::string() : std::to_string(n),
                    std::string("reconnect: ") + sanitize_text(e.what()));
      }
      broken_ = false;
      ready_ = false;
      ++generation_;
    }
    MYSQL* c = handle(*sql_);
    if (c != conn_ || !ready_) {
      if (c != conn_) ++generation_;
      conn_ = c;
      ready_ = false;
      in_claim_ = false;
      try {
        set_up(c);
      } catch (const error& e) {
        if (connection_lost(native_number(e))) broken_ = true;
        throw;
      }
      ready_ = true;
    }
    return c;
  }

  /// Runs `f(MYSQL*)` on the live connection, SOCI's errors translated; on a connection loss,
  /// marks the link for reconnection (the open claim, if any, is gone with it). A failed
  /// statement inside an open claim transaction ends it, so the batch is free again.
  template <class F>
  std::invoke_result_t<F&, MYSQL*> run(std::string_view what, F&& f) {
    MYSQL* c = connection();
    try {
      return translated(what, [&]() -> decltype(auto) { return f(c); });
    } catch (const error& e) {
      if (connection_lost(native_number(e))) {
        broken_ = true;
        in_claim_ = false;
      } else if (in_claim_) {
        rollback_claim(c);
      }
      throw;
    }
  }

  /// The server's id of the current connection (for `KILL`), 0 while it is lost.
  [[nodiscard]] unsigned long connection_id() noexcept {
    return conn_ == nullptr ? 0 : mysql_thread_id(conn_);
  }
  void mark_broken() noexcept { broken_ = true; }

  // ---- the open claim transaction ------------------------------------------------------------

  void begin_claim(std::int64_t token) noexcept {
    in_claim_ = true;
    claim_token_ = token;
  }
  [[nodiscard]] bool in_claim() const noexcept { return in_claim_; }
  [[nodiscard]] bool is_open_claim(std::int64_t token) const noexcept {
    return in_claim_ && claim_token_ == token;
  }
  void end_claim() noexcept { in_claim_ = false; }
  /// Rolls back the open transaction. A ROLLBACK that fails without losing the connection (KILL
  /// QUERY: 1317) leaves it open, and the next START TRANSACTION would commit it: the
  /// connection is made again instead (the server rolls back what a closed one left).
  void rollback_claim(MYSQL* c) noexcept {
    in_claim_ = false;
    if (mysql_real_query(c, "ROLLBACK", 8) != 0) broken_ = true;
  }

  // ---- transactions --------------------------------------------------------------------------

  /// A transaction on the link's session; rolls back on destruction unless committed. It
  /// belongs to the connection that began it: after a reconnect, `commit` fails instead of
  /// sending COMMIT on a new session, where it would commit nothing and report success.
  class transaction {
   public:
    explicit transaction(link& l) : l_(&l) {
      l_->run("begin", [](MYSQL* c) { exec(c, "START TRANSACTION", "begin"); });
      generation_ = l_->generation_;
    }
    transaction(transaction&& o) noexcept
        : l_(std::exchange(o.l_, nullptr)), generation_(o.generation_) {}
    transaction& operator=(transaction&&) = delete;
    ~transaction() {
      if (l_ && still_ours()) l_->rollback_claim(l_->conn_);
    }

    /// Commits, after checking that the transaction is still the one this object began. A
    /// statement inside it may have ended it: InnoDB rolls back the whole transaction of a
    /// deadlock victim (1213), and DDL commits implicitly. A handler that caught such an error
    /// and carried on would otherwise see COMMIT succeed (committing nothing, or only what ran
    /// after the rollback, in autocommit).
    /// @throws outbox::error `transient` (the connection was lost, or the check interrupted,
    ///         before COMMIT: nothing was committed), `in_doubt` (lost during COMMIT, or COMMIT
    ///         failed otherwise), `permanent` (the transaction was already gone: nothing of it
    ///         is committed by this call).
    void commit() {
      link* s = std::exchange(l_, nullptr);
      if (s->generation_ != generation_ || s->broken_ || s->conn_ == nullptr) {
        s->broken_ = true;
        throw error(errc::transient, "mysql", {},
                    "commit: the connection of this transaction was lost; nothing was committed");
      }
      MYSQL* c = s->conn_;
      bool open = false;
      try {
        open = in_transaction(c, "commit");
      } catch (const error& e) {
        // Interrupted (KILL QUERY: 1317): the transaction is still open, and the next
        // START TRANSACTION on this connection would commit it. End it, so that the error's
        // "nothing was committed" holds.
        if (connection_lost(native_number(e)))
          s->broken_ = true;
        else
          s->rollback_claim(c);
        throw;
      }
      if (!open)
        throw error(errc::permanent, "mysql", {},
                    "commit: the transaction was rolled back (a deadlock victim, 1213, whose "
                    "error was caught and not rethrown) or ended by a statement inside it (DDL "
                    "commits implicitly); nothing was committed by this call");
      if (mysql_real_query(c, "COMMIT", 6) != 0) {
        const unsigned code = mysql_errno(c);
        if (connection_lost(code)) {
          s->broken_ = true;
          throw error(errc::in_doubt, "mysql", std::to_string(code),
                      "commit: the connection was lost during COMMIT; the outcome is unknown");
        }
        // COMMIT itself failed (interrupted by KILL QUERY: 1317): the error does not say
        // whether the commit happened. Whatever is left of the transaction is rolled back (not
        // committed by the next START TRANSACTION), and the outcome is reported as unknown.
        std::string why =
            "commit: " + sanitize_text(mysql_error(c)) + "; COMMIT failed, the outcome is unknown";
        s->rollback_claim(c);
        throw error(errc::in_doubt, "mysql", std::to_string(code), why);
      }
    }

   private:
    [[nodiscard]] bool still_ours() const noexcept {
      return l_->generation_ == generation_ && !l_->broken_ && l_->conn_ != nullptr;
    }

    link* l_;
    std::uint64_t generation_ = 0;
  };

 private:
  void set_up(MYSQL* c) {
    if (setup_.configure) {
      configure_connection(*sql_, c, setup_.session);
      const bool mariadb = parse_server_version(mysql_get_server_info(c)).mariadb;
      if (mariadb || setup_.locking) {
        long long idle = whole_seconds(setup_.idle);
        translated("configure", [&] {
          *sql_ << std::string(mariadb ? statements::session_idle_mariadb
                                       : statements::session_idle_mysql),
              ::soci::use(idle, "idle");
        });
      }
    }
    long long version = 0;
    translated("schema version",
               [&] { *sql_ << std::string(statements::schema_version), ::soci::into(version); });
    outbox::store::require_schema_version(version, schema_version_, "mysql");
  }

  ::soci::session* sql_;
  MYSQL* conn_ = nullptr;         // the connection that was set up; null while it is lost
  std::uint64_t generation_ = 0;  // counts connections: a transaction belongs to one
  session_setup setup_;
  int schema_version_;
  bool ready_ = false;
  bool broken_ = false;
  bool in_claim_ = false;
  std::int64_t claim_token_ = 0;  // the open claim's
};

}  // namespace outbox::mysql::detail
