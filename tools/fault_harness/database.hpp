#pragma once
// The run's database: a connection that rides out a part's start during a database fault, and
// the harness's own tables, which the parts write and the ledger reads.

#include <exception>
#include <memory>
#include <string>
#include <thread>

#include <soci/soci.h>

#include "args.hpp"
#include "basics.hpp"

namespace fault_harness {

/// A new connection to the run's database, tried for 30 s: a part that starts while its role's
/// sessions are being terminated (a database kill that found it connecting), or while the
/// database server is away (a restart), must not die of it, as a service under a supervisor
/// would not.
template <class S>
std::unique_ptr<soci::session> open_retrying(const args& a) {
  const auto give_up = steady::now() + 30s;
  for (;;) {
    try {
      return S::open(a);
    } catch (const std::exception&) {
      if (steady::now() > give_up) throw;
      std::this_thread::sleep_for(100ms);
    }
  }
}

/// A configured connection to the run's database.
template <class S>
struct database {
  std::unique_ptr<soci::session> owned;
  soci::session& sql;
  explicit database(const args& a) : owned(open_retrying<S>(a)), sql(*owned) {}
};

inline long long scalar(soci::session& sql, const std::string& query) {
  long long n = 0;
  sql << query, soci::into(n);
  return n;
}

/// The run's database, made by the orchestrator: the store's migration and the harness's tables.
template <class S>
void prepare(const args& a) {
  S::create(a);
  database<S> db(a);
  soci::session& sql = db.sql;
  S::migrate(sql);
  if constexpr (requires { S::after_migrate(sql, a); }) S::after_migrate(sql, a);
  const std::string id = S::id_type;
  const std::string seq = S::seq_type;
  sql << "CREATE TABLE harness_business (event_id " + id +
             " PRIMARY KEY, aggregate TEXT NOT NULL, seq " + seq + " NOT NULL)";
  sql << "CREATE TABLE harness_rolled_back (event_id " + id + " PRIMARY KEY)";
  // The poison and uncarriable events, and where their dead letter must be: inbox or outbox.
  sql << "CREATE TABLE harness_expected_dead (event_id " + id +
             " PRIMARY KEY, place TEXT NOT NULL)";
  // No unique key on event_id: an effect applied twice must show as two rows.
  // wire_at: where on the wire the applied delivery sat (Kafka: partition:offset), or "".
  sql << "CREATE TABLE harness_effect (apply_order " + std::string(S::order_key) + ", event_id " +
             id + " NOT NULL, aggregate TEXT NOT NULL, seq " + seq +
             " NOT NULL, applied_ms BIGINT NOT NULL, applied_by INTEGER NOT NULL, wire_at "
             "TEXT NOT NULL)";
  // Other positions a message was absorbed or dead-lettered at (log_duplicate).
  sql << "CREATE TABLE harness_seen (event_id " + id + " NOT NULL, wire_at TEXT NOT NULL)";
}

/// The orchestrator's count of applied events; a database away (a restart) gives the last
/// count (`answered` false), and the session is reconnected for the next call.
inline long applied_so_far(soci::session& sql, long& last, bool& answered) {
  answered = false;
  try {
    last = static_cast<long>(scalar(sql, "SELECT count(*) FROM harness_effect"));
    answered = true;
  } catch (const std::exception&) {
    try {
      sql.reconnect();
    } catch (const std::exception&) {
    }
  }
  return last;
}

/// Reconnects the orchestrator's session if a restart broke it (for 30 s at most; then the
/// ledger's own query fails).
inline void wait_for_database(soci::session& sql) {
  const auto give_up = steady::now() + 30s;
  long last = 0;
  bool answered = false;
  while (applied_so_far(sql, last, answered), !answered && steady::now() < give_up)
    std::this_thread::sleep_for(100ms);
}

}  // namespace fault_harness
