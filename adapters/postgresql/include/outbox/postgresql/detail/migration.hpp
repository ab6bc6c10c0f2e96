#pragma once
/// @file
/// The PostgreSQL store's host for `outbox::sql::run_migrations`.

#include <string>
#include <vector>

#include <outbox/error.hpp>
#include <outbox/migration.hpp>
#include <outbox/postgresql/detail/connection.hpp>

namespace outbox::postgresql::detail {

/// The migration runner's host: one transaction, serialized by an advisory lock.
class migration_host {
 public:
  explicit migration_host(PGconn* c) : c_(c) {}
  void begin_exclusive() {
    if (PQtransactionStatus(c_) != PQTRANS_IDLE)
      throw error(errc::misconfigured, "postgresql", {},
                  "migrate: the session is in a transaction; call migrate outside one (its "
                  "COMMIT would commit the caller's work)");
    exec(c_, "BEGIN");
    open_ = true;
    exec(c_, std::string(statements::migrations_lock).c_str());
  }
  std::vector<int> applied() {
    std::vector<int> out;
    auto exists = exec(c_, std::string(statements::migrations_table_exists).c_str());
    if (exists.text(0, 0) != "t") return out;
    auto v = exec(c_, std::string(statements::migrations_applied).c_str());
    for (int i = 0; i < v.rows(); ++i) out.push_back(static_cast<int>(v.int64(i, 0)));
    return out;
  }
  void apply(const migration& m) { exec(c_, std::string(m.sql).c_str()); }
  void record(const migration& m) {
    exec(c_, std::string(statements::migrations_record),
         params().add(std::int64_t{m.version}).add(m.name), "migrate");
  }
  void commit() {
    exec(c_, "COMMIT");
    open_ = false;
  }
  void rollback() noexcept {
    if (open_) PQclear(PQexec(c_, "ROLLBACK"));
    open_ = false;
  }

 private:
  PGconn* c_;
  bool open_ = false;
};

}  // namespace outbox::postgresql::detail
