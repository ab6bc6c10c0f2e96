#pragma once
// SQLite: a file in the run's directory; no server, so no database kills or restarts.

#include <filesystem>
#include <memory>
#include <string>

#include <soci/soci.h>
#include <outbox/sqlite/store.hpp>

#include "../args.hpp"
#include "../concepts.hpp"

namespace fault_harness {

struct sqlite_kind {
  static std::string db_path(const args& a) { return a.dir + "/outbox.db"; }
  /// Every connection of every part. SIGKILL of a process is what this harness injects, and WAL
  /// with synchronous=NORMAL survives it (the commit is in the OS's page cache).
  static outbox::session_options connection() {
    return {.lock_timeout = 10s, .durable_commits = false};
  }
  using store_type = outbox::sqlite::store;
  static constexpr const char* name = "sqlite";
  static constexpr const char* id_type = "TEXT";
  static constexpr const char* seq_type = "INTEGER";
  static constexpr const char* order_key = "INTEGER PRIMARY KEY AUTOINCREMENT";
  static const char* missing(const args&) { return nullptr; }
  static std::unique_ptr<soci::session> open(const args& a) {
    auto sql = std::make_unique<soci::session>(soci::sqlite3, "db=" + db_path(a));
    outbox::sqlite::store::configure(*sql, connection());
    return sql;
  }
  static outbox::store_options options(const args&) { return {.session = connection()}; }
  static void migrate(soci::session& sql) { outbox::sqlite::store::migrate(sql); }
  static void create(const args& a) {
    if (std::filesystem::exists(db_path(a)))
      usage(db_path(a) + " exists: give an empty --dir (or none)");
  }
  static void drop(const args&) {}  // the file goes with the run's directory
  static std::string where(const args& a) { return db_path(a); }
  static constexpr const char* server = nullptr;  ///< No server to restart (--db-restarts).
  static long long terminate(soci::session&, const std::string&, const args&) { return 0; }
  static void commit_unanswered(soci::session&) {}  // no database kills on SQLite
};
static_assert(store_kind<sqlite_kind>);

}  // namespace fault_harness
