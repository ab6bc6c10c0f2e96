#pragma once
// PostgreSQL: a schema of the run's own (outbox_faults_<run>) in the database at --postgresql,
// claimed under --policy locking or leasing; a database kill ends the sessions of a role by
// their application_name; the server restarted by --db-restarts.

#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <soci/soci.h>
#include <outbox/postgresql/store.hpp>

#include "../args.hpp"
#include "../basics.hpp"
#include "../concepts.hpp"

namespace fault_harness {

struct postgresql_kind {
  using store_type = outbox::postgresql::store;
  static constexpr const char* name = "postgresql";
  /// Its server: --postgresql CONNSTR (libpq's connect string), default OUTBOX_TEST_POSTGRESQL.
  static constexpr const char* server_flag = "postgresql";
  static constexpr const char* server_env = "OUTBOX_TEST_POSTGRESQL";
  static constexpr const char* server_form = "CONNSTR";
  static constexpr bool claim_policies = true;  ///< --policy locking|leasing
  static constexpr bool db_kills = true;        ///< --db-kills: terminate()
  static constexpr const char* id_type = "uuid";
  static constexpr const char* seq_type = "bigint";
  static constexpr const char* order_key = "bigserial PRIMARY KEY";
  static const char* missing(const args& a) {
    return a.address(server_flag).empty() ? "PostgreSQL (--postgresql or OUTBOX_TEST_POSTGRESQL)"
                                          : nullptr;
  }
  static std::string schema(const args& a) { return "outbox_faults_" + a.run; }
  /// The server --db-restarts restarts: its name for scripts/services.sh restart.
  static constexpr const char* server = "postgresql";
  /// The application_name of a role's sessions: what a database kill terminates.
  static std::string application(const std::string& role, const args& a) {
    return "outbox_faults_" + role + "_" + a.run;
  }
  static std::unique_ptr<soci::session> open(const args& a) {
    return std::make_unique<soci::session>(
        "postgresql", a.address(server_flag) + " application_name=" + application(a.role, a) +
                          " options='-c search_path=" + schema(a) +
                          " -c client_min_messages=warning'");
  }
  /// Terminates every session of `role` in the run; returns how many.
  static long long terminate(soci::session& sql, const std::string& role, const args& a) {
    const std::string name = application(role, a);
    long long n = 0;
    sql << "SELECT count(*) FILTER (WHERE t) FROM (SELECT pg_terminate_backend(pid) AS t FROM "
           "pg_stat_activity WHERE application_name = :n) s",
        soci::use(name), soci::into(n);
    return n;
  }
  /// Locking: the server ends a claim transaction idle for the relay's lease (above its publish
  /// timeout), so that a relay paused past its lease is cut off, as the pause fault means it to
  /// be (the default, a minute, would outlast every pause: the relay resumed and settled).
  static outbox::store_options options(const args& a) {
    return {.policy = a.policy == "leasing" ? outbox::claim_policy::leasing
                                            : outbox::claim_policy::locking,
            .idle_in_transaction_timeout = relay_lease};
  }
  static void migrate(soci::session& sql) { outbox::postgresql::store::migrate(sql); }
  static void create(const args& a) {
    soci::session admin("postgresql", a.address(server_flag));
    admin << "SET client_min_messages = warning";
    admin << "DROP SCHEMA IF EXISTS " + schema(a) + " CASCADE";
    admin << "CREATE SCHEMA " + schema(a);
  }
  static void drop(const args& a) {
    soci::session admin("postgresql", a.address(server_flag));
    admin << "SET client_min_messages = warning";
    admin << "DROP SCHEMA IF EXISTS " + schema(a) + " CASCADE";
  }
  static std::string where(const args& a) { return "schema " + schema(a); }
  /// A COMMIT in doubt: sent, and the connection cut before its answer was read (the writer's
  /// `writer-commit` database kill). Throws; whether it committed is for the writer to find out.
  static void commit_unanswered(soci::session& sql) {
    PGconn* c = static_cast<soci::postgresql_session_backend*>(sql.get_backend())->conn_;
    if (PQsendQuery(c, "COMMIT") != 1 || PQflush(c) != 0)
      throw std::runtime_error("COMMIT could not be sent");
    std::this_thread::sleep_for(20ms);
    ::shutdown(PQsocket(c), SHUT_RDWR);
    throw std::runtime_error("COMMIT sent, the connection cut before its answer: in doubt");
  }
};
static_assert(store_kind<postgresql_kind>);

}  // namespace fault_harness
