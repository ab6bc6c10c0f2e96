#pragma once
/// @file
/// The MySQL store's host for `outbox::sql::run_migrations`.

#include <string>
#include <vector>

#include <outbox/error.hpp>
#include <outbox/migration.hpp>
#include <outbox/mysql/detail/connection.hpp>
#include <outbox/mysql/detail/link.hpp>
#include <outbox/mysql/schema.hpp>

namespace outbox::mysql::detail {

/// The migration runner's host. MySQL commits DDL implicitly, so a migration is not one
/// transaction: a named lock keeps migrations apart, each file's statements run one by one
/// (each may run again after a failure half-way: IF NOT EXISTS), and the version is recorded
/// after the file.
class migration_host {
 public:
  explicit migration_host(::soci::session& sql) : sql_(sql), c_(handle(sql)) {}
  void begin_exclusive() {
    if (in_transaction(c_, "migrate"))
      throw error(errc::misconfigured, "mysql", {},
                  "migrate: the session is in a transaction; call migrate outside one (MySQL "
                  "commits DDL implicitly, so it would commit the caller's work)");
    std::string version, wsrep;
    translated("migrate: server version", [&] {
      sql_ << std::string(statements::server_version), ::soci::into(version), ::soci::into(wsrep);
    });
    require_supported_server(version, wsrep);
    long long got = 0;
    translated("migrate: lock",
               [&] { sql_ << std::string(statements::migrations_lock), ::soci::into(got); });
    if (got != 1)
      throw error(errc::transient, "mysql", {},
                  "migrate: another migration held the lock for 60 s; try again");
    locked_ = true;
  }
  std::vector<int> applied() {
    return translated("migrate", [&] {
      std::vector<int> out;
      long long exists = 0;
      sql_ << std::string(statements::migrations_table_exists), ::soci::into(exists);
      if (exists == 0) return out;
      ::soci::rowset<int> rs = (sql_.prepare << std::string(statements::migrations_applied));
      for (const int v : rs) out.push_back(v);
      return out;
    });
  }
  void apply(const migration& m) {
    for (const auto& s : split_statements(m.sql)) exec(c_, s, "migrate: " + std::string(m.name));
  }
  void record(const migration& m) {
    int version = m.version;
    std::string name(m.name);
    translated("migrate: record", [&] {
      execute(sql_, statements::migrations_record, ::soci::use(version, "version"),
              ::soci::use(name, "name"));
    });
  }
  void commit() { unlock(); }
  void rollback() noexcept {
    try {
      unlock();
    } catch (...) {
    }
  }

 private:
  void unlock() {
    if (!locked_) return;
    locked_ = false;
    long long released = 0;
    translated("migrate: unlock",
               [&] { sql_ << std::string(statements::migrations_unlock), ::soci::into(released); });
  }

  ::soci::session& sql_;
  MYSQL* c_;
  bool locked_ = false;
};

}  // namespace outbox::mysql::detail
