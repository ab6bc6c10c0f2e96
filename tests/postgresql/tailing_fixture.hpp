#pragma once
// The log-tailing relay's fixture: the PostgreSQL leasing fixture's schema of its own, and a
// replication slot and publication named after the process, made by `tailing_store::setup` and
// dropped at the end (a slot left behind would hold the server's WAL).

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <outbox/postgresql/tailing_store.hpp>
#include <outbox/writer.hpp>

#include "../support/server_store_helpers.hpp"
#include "fixture.hpp"

namespace outbox::test {

/// A schema of its own (the leasing fixture) and a slot and publication named after it,
/// dropped at the end (a slot left behind would hold the server's WAL forever).
struct postgresql_tailing_fixture : postgresql_leasing_fixture {
  using tailing_store = outbox::postgresql::tailing_store;

  postgresql_tailing_fixture() {
    opts.slot = slot_name();
    opts.publication = opts.slot + "_pub";
    auto sql = open_session();
    // A slot of this name left by a killed run (its pid reused) would replay its old events.
    try {
      tailing_store::drop(*sql, opts, true);
    } catch (const outbox::error&) {  // NOLINT(bugprone-empty-catch): none there
    }
    created = tailing_store::setup(*sql, opts);  // checked by a test (the destructor drops it)
  }
  ~postgresql_tailing_fixture() {
    try {
      auto sql = open_session();
      // A stream of a store still alive in the test would hold the slot: end it first.
      *sql << "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
              "WHERE slot_name = '" +
                  opts.slot + "' AND active_pid IS NOT NULL";
      for (int i = 0; i < 50; ++i) {
        try {
          tailing_store::drop(*sql, opts, true);
          break;
        } catch (const outbox::error&) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      }
    } catch (...) {
    }
  }
  postgresql_tailing_fixture(const postgresql_tailing_fixture&) = delete;
  postgresql_tailing_fixture& operator=(const postgresql_tailing_fixture&) = delete;

  std::string slot_name() const {
    static int n = 0;
    return "outbox_tail_" + std::to_string(::getpid()) + "_" + std::to_string(n++);
  }

  /// One claim of at most `limit` events, now.
  static outbox::claimed_batch claim_now(tailing_store& st, std::size_t limit = 10) {
    return st.claim({.owner = "t",
                     .limit = limit,
                     .now = outbox::system_clock{}.now(),
                     .lease = std::chrono::seconds(30)});
  }
  /// Claims until a batch comes (bounded: 60 s); empty when none came.
  static outbox::claimed_batch claim_some(tailing_store& st, std::size_t limit = 10) {
    outbox::claimed_batch b;
    (void)eventually([&] {
      b = claim_now(st, limit);
      return !b.empty();
    });
    return b;
  }

  /// The server's WAL flushed so far (after a commit: past it), as text for a comparison.
  std::string wal_now() {
    auto sql = open_session();
    std::string lsn;
    *sql << "SELECT pg_current_wal_flush_lsn()::text", soci::into(lsn);
    return lsn;
  }
  /// Waits (bounded) until the walsender streaming the slot has sent the WAL up to `lsn`: what
  /// was committed before is then in the relay's socket, read at its next claim. Needs a role
  /// with pg_read_all_stats (scripts/services.sh grants it), which shows `sent_lsn`.
  bool sent_up_to(const std::string& lsn) {
    auto sql = open_session();
    const std::string walsender =
        "FROM pg_stat_replication r JOIN pg_replication_slots s ON s.active_pid = r.pid "
        "WHERE s.slot_name = '" +
        opts.slot + "'";
    const bool sent = eventually([&] {
      return count(*sql, "SELECT count(*) " + walsender + " AND r.sent_lsn >= '" + lsn + "'") == 1;
    });
    if (!sent && count(*sql, "SELECT count(*) " + walsender + " AND r.sent_lsn IS NULL") == 1)
      BOOST_ERROR(
          "pg_stat_replication.sent_lsn is hidden from this role: the log-tailing tests "
          "need GRANT pg_read_all_stats TO <the role of OUTBOX_TEST_POSTGRESQL>");
    return sent;
  }

  /// Commits a sentinel event and runs the relay until it is on the wire (bounded): what was
  /// committed before it has been through the relay, as the stream keeps commit order, so a
  /// check that nothing else came needs no sleep.
  template <class Relay, class Transport>
  bool relay_through_sentinel(Relay& r, Transport& t) {
    write({{"sentinel", "sentinel"}});
    return eventually([&] {
      r.run_once();
      const auto wire = t.wire();
      return std::any_of(wire.begin(), wire.end(),
                         [](const outbox::message& m) { return m.event_type == "sentinel"; });
    });
  }

  std::unique_ptr<tailing_store> make_tailing(soci::session& table) {
    return std::make_unique<tailing_store>(connect_string(), table, opts);
  }

  /// Writes events in one transaction with the table-free writer (`Mode` tailing_store), or
  /// the table mode's (`tailing_store::table_mode`).
  template <class Mode = tailing_store>
  void write(const std::vector<std::pair<std::string, std::string>>& events) {
    auto sql = open_session();
    outbox::writer<Mode> w;
    soci::transaction tx(*sql);
    for (const auto& [agg, name] : events)
      w.enqueue(*sql, outbox::event{"order", agg, name, "{\"n\":\"" + name + "\"}"});
    tx.commit();
  }

  std::size_t table_rows(soci::session& sql, const std::string& where = "true") {
    return static_cast<std::size_t>(count(sql, "SELECT count(*) FROM outbox WHERE " + where));
  }

  outbox::postgresql::tailing_options opts;
  bool created = false;
};

}  // namespace outbox::test
