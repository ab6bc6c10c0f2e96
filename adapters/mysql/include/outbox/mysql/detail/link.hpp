#pragma once
/// @file
/// A MySQL store's connection: `outbox::sql::link` over the client handle under its SOCI
/// session, set up again after a loss; and the server checks of `migrate`.

#include <cctype>
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
#include <outbox/sql/backend.hpp>
#include <outbox/sql/link.hpp>
#include <outbox/sql/migrate.hpp>
#include <outbox/store_options.hpp>
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
/// connection, which SOCI does not do. A line `DELIMITER x` between statements makes `x` end
/// them instead, until the next such line, as in the mysql client: a stored procedure's body
/// holds semicolons (0004_writer_commit.sql).
inline std::vector<std::string> split_statements(std::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  std::string delimiter = ";";
  bool has_code = false;
  bool line_start = true;
  char quote = 0;
  const auto starts_with_keyword = [&](std::size_t i) {
    constexpr std::string_view keyword = "delimiter";
    if (text.size() - i <= keyword.size()) return false;
    for (std::size_t k = 0; k < keyword.size(); ++k)
      if (std::tolower(static_cast<unsigned char>(text[i + k])) != keyword[k]) return false;
    const char after = text[i + keyword.size()];
    return after == ' ' || after == '\t';
  };
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
    if (!has_code && line_start && starts_with_keyword(i)) {
      std::size_t end = text.find('\n', i);
      if (end == std::string_view::npos) end = text.size();
      std::string_view word = text.substr(i + 9, end - i - 9);
      while (!word.empty() && std::isspace(static_cast<unsigned char>(word.front())))
        word.remove_prefix(1);
      while (!word.empty() && std::isspace(static_cast<unsigned char>(word.back())))
        word.remove_suffix(1);
      if (!word.empty()) delimiter = std::string(word);
      i = end;
      cur.clear();
      continue;
    }
    line_start = ch == '\n' || (line_start && (ch == ' ' || ch == '\t' || ch == '\r'));
    if (ch == '-' && i + 1 < text.size() && text[i + 1] == '-') {
      while (i < text.size() && text[i] != '\n') ++i;
      cur += '\n';
      line_start = true;
      continue;
    }
    if (text.compare(i, delimiter.size(), delimiter) == 0) {
      if (has_code) out.push_back(cur);
      cur.clear();
      has_code = false;
      i += delimiter.size() - 1;
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

/// MySQL and MariaDB for `outbox::sql::link`: a new connection (after 2006, 2013, `KILL`) is
/// set up as `store::configure` does and its schema version checked.
struct dialect {
  using handle = MYSQL*;
  static constexpr const char* adapter = "mysql";

  session_setup setup;
  int schema_version = 0;  ///< what the store's statements need

  static void check(::soci::session& sql) {
    (void)outbox::sql::soci_backend<::soci::mysql_session_backend>(sql, "mysql", "mysql");
  }
  static void reconnect(::soci::session& sql) { sql.reconnect(); }
  static MYSQL* current(::soci::session& sql) noexcept {
    auto* backend = static_cast<::soci::mysql_session_backend*>(sql.get_backend());
    return backend == nullptr ? nullptr : backend->conn_;
  }
  static bool alive(MYSQL*) noexcept { return true; }  // a loss shows as an error number
  static std::string reconnect_code(const std::exception& e) {
    const unsigned n = connect_errno(e);
    return n == 0 ? std::string() : std::to_string(n);
  }
  static bool lost(MYSQL*, const error& e) noexcept { return connection_lost(native_number(e)); }
  static bool rollback(MYSQL* c) noexcept { return mysql_real_query(c, "ROLLBACK", 8) == 0; }
  static void begin(MYSQL* c) { exec(c, "START TRANSACTION", "begin"); }
  static void finish(MYSQL* c) { exec(c, "COMMIT", "commit"); }
  template <class F>
  static decltype(auto) guard(std::string_view what, F&& f) {
    return translated(what, std::forward<F>(f));
  }

  /// Checks that the transaction is still open, then commits. A statement inside it may have
  /// ended it: InnoDB rolls back the whole transaction of a deadlock victim (1213), and DDL
  /// commits implicitly; a handler that caught such an error and carried on would otherwise see
  /// COMMIT succeed, committing nothing (or only what ran after, in autocommit). A COMMIT that
  /// fails without losing the connection (KILL QUERY: 1317) does not say whether it happened.
  static void commit(MYSQL* c) {
    if (!in_transaction(c, "commit"))
      throw error(errc::permanent, adapter, {},
                  "commit: the transaction was rolled back (a deadlock victim, 1213, whose "
                  "error was caught and not rethrown) or ended by a statement inside it (DDL "
                  "commits implicitly); nothing was committed by this call");
    if (mysql_real_query(c, "COMMIT", 6) != 0) {
      const unsigned code = mysql_errno(c);
      throw error(errc::in_doubt, adapter, std::to_string(code),
                  connection_lost(code)
                      ? std::string("commit: the connection was lost during COMMIT; the outcome "
                                    "is unknown")
                      : "commit: " + sanitize_text(mysql_error(c)) +
                            "; COMMIT failed, the outcome is unknown");
    }
  }

  /// The session set up (when the store configures it) and the schema version checked.
  void set_up(::soci::session& sql, MYSQL* c) const {
    if (setup.configure) {
      configure_connection(sql, c, setup.session);
      const bool mariadb = parse_server_version(mysql_get_server_info(c)).mariadb;
      if (mariadb || setup.locking) {
        long long idle = whole_seconds(setup.idle);
        translated("configure", [&] {
          sql << std::string(mariadb ? statements::session_idle_mariadb
                                     : statements::session_idle_mysql),
              ::soci::use(idle, "idle");
        });
      }
    }
    long long version = 0;
    translated("schema version",
               [&] { sql << std::string(statements::schema_version), ::soci::into(version); });
    outbox::sql::require_schema_version(version, schema_version, adapter);
  }
};

using link = outbox::sql::link<dialect>;

}  // namespace outbox::mysql::detail
