#pragma once
// PostgreSQL's log-tailing relay (--store postgresql-tail): postgresql_kind's database, with a
// table-free writer and a relay that reads a replication slot of the run's own.

#include <chrono>
#include <exception>
#include <iostream>
#include <memory>
#include <thread>

#include <soci/soci.h>
#include <outbox/postgresql/tailing_store.hpp>

#include "../args.hpp"
#include "../concepts.hpp"
#include "postgresql.hpp"

namespace fault_harness {

/// The log-tailing relay (--store postgresql-tail): PostgreSQL's schema of the run, the writer
/// table-free (events only in the WAL), the relay reading a replication slot of the run's own
/// (outbox_faults_<run>, made after the migration, dropped with the schema), its retries and
/// dead letters in the outbox table; the consumer's inbox as for postgresql. The relay's
/// replication connection carries the relay's application_name, so a database kill of the relay
/// ends its stream too. Several relays share the slot: one streams, the others wait for it.
struct postgresql_tail_kind : postgresql_kind {
  static constexpr const char* name = "postgresql-tail";
  using writer_store = outbox::postgresql::tailing_store;
  static outbox::postgresql::tailing_options tail_options(const args& a) {
    return {.slot = "outbox_faults_" + a.run, .publication = "outbox_faults_" + a.run};
  }
  static void after_migrate(soci::session& sql, const args& a) {
    (void)outbox::postgresql::tailing_store::setup(sql, tail_options(a));
  }
  /// A relay that takes the slot over gets its first event only once its walsender has read
  /// the WAL from the slot's restart point, which PostgreSQL moves at its standby snapshots
  /// (every 15 s of activity): seen here, 3 to 3.5 s for 34-40 MB on a busy machine. With a
  /// fault every few seconds they come one after another (seen: a batch confirmed, its relay
  /// paused and killed, and its copies published 21-25 s later by the fourth relay after it),
  /// so each relay fault of the plan counts.
  static std::chrono::milliseconds takeover_stall(int relay_faults) {
    return relay_faults * std::chrono::milliseconds(4000);
  }
  static std::unique_ptr<outbox::postgresql::tailing_store> relay_store(soci::session& sql,
                                                                        const args& a) {
    return std::make_unique<outbox::postgresql::tailing_store>(
        a.address(server_flag) + " application_name=" + application(a.role, a) +
            " options='-c search_path=" + schema(a) + " -c client_min_messages=warning'",
        sql, tail_options(a));
  }
  static void drop(const args& a) {
    try {
      soci::session admin("postgresql", a.address(server_flag));
      const auto o = tail_options(a);
      for (int i = 0; i < 50; ++i) {
        admin << "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE "
                 "slot_name = '" +
                     o.slot + "' AND active_pid IS NOT NULL";
        try {
          outbox::postgresql::tailing_store::drop(admin, o, true);
          break;
        } catch (const outbox::error&) {
          std::this_thread::sleep_for(100ms);  // its walsender is still going away
        }
      }
    } catch (const std::exception& e) {
      std::cerr << "fault_harness: dropping the run's slot: " << e.what() << "\n";
    }
    postgresql_kind::drop(a);
  }
};
static_assert(store_kind<postgresql_tail_kind>);

}  // namespace fault_harness
