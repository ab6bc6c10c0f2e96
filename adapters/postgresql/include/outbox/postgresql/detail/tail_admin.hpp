#pragma once
/// @file
/// The log-tailing store's administration, on any session of the database: the replication slot
/// and the publication (made, checked, dropped), their status, and the rows a slot keeps in the
/// outbox table's side tables (`tailing_store::setup`, `drop`, `slot`, `streamed`).

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

#include <outbox/error.hpp>
#include <outbox/postgresql/detail/connection.hpp>
#include <outbox/postgresql/detail/replication.hpp>
#include <outbox/postgresql/schema.hpp>
#include <outbox/postgresql/tailing_options.hpp>
#include <outbox/time.hpp>
#include <outbox/validate.hpp>

namespace outbox::postgresql::detail::tail {

inline void check_names(const tailing_options& o) {
  if (!valid_slot_name(o.slot))
    throw error(
        errc::misconfigured, "postgresql", {},
        "tailing_options.slot must be 1..63 of [a-z0-9_], got '" + sanitize_text(o.slot, 80) + "'");
  if (!valid_slot_name(o.publication))
    throw error(errc::misconfigured, "postgresql", {},
                "tailing_options.publication must be 1..63 of [a-z0-9_], got '" +
                    sanitize_text(o.publication, 80) + "'");
}

/// Deletes a slot's head-batch claim count and saved position (tail_forget.sql,
/// tail_position_forget.sql).
inline void forget(PGconn* c, const std::string& slot) {
  for (const auto statement : {statements::tail_forget, statements::tail_position_forget}) {
    try {
      exec(c, std::string(statement), params().add(slot),
           "forget the slot's attempts and position");
    } catch (const error& e) {
      if (e.native_code() != "42P01") throw;  // not migrated that far: nothing to forget
    }
  }
}

/// tail_lag.sql for `slot` on `c`.
inline slot_status query_slot(PGconn* c, const std::string& slot) {
  const auto r = exec(c, std::string(statements::tail_lag), params().add(slot), "slot status");
  slot_status st;
  if (r.rows() == 0) return st;
  st.exists = true;
  st.lag_bytes = r.is_null(0, 0) ? 0 : r.int64(0, 0);
  st.active = r.text(0, 1) == "t";
  st.retained_bytes = r.is_null(0, 2) ? 0 : r.int64(0, 2);
  st.wal_status = r.text(0, 3);
  st.lag = std::chrono::milliseconds(r.int64(0, 4));
  return st;
}

/// tail_streamed.sql on `c`.
inline streamed_status query_streamed(PGconn* c, time_point now, std::chrono::seconds grace) {
  const auto t = to_us(now);
  const auto r = exec(c, std::string(statements::tail_streamed),
                      params().add(t).add(std::int64_t{
                          std::chrono::duration_cast<std::chrono::microseconds>(grace).count()}),
                      "streamed rows");
  streamed_status st;
  st.unpublished = r.int64(0, 0);
  if (const std::int64_t oldest = r.int64(0, 1); oldest != 0)
    st.oldest_age = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::microseconds(elapsed(t, oldest)));
  return st;
}

/// Checks that publication `pub` publishes the INSERTs of the outbox table that `c`
/// resolves (tail_publication_check.sql); returns that table's oid.
/// @throws outbox::error `misconfigured` naming the publication and the table (and ending
///         with `more`).
inline std::uint32_t check_publication(PGconn* c, const std::string& pub,
                                       const std::string& more = {}) {
  const auto r = exec(c, std::string(statements::tail_publication_check), params().add(pub),
                      "check the publication");
  const std::string table(r.text(0, 0));
  const auto fail = [&](const std::string& why) {
    throw error(errc::misconfigured, "postgresql", {},
                "publication \"" + pub + "\" " + why +
                    ": the log-tailing relay reads table mode's events as the INSERTs of its "
                    "outbox table through it, and would pass over them without a word" +
                    more);
  };
  if (r.is_null(0, 0))
    throw error(errc::misconfigured, "postgresql", {},
                "log tailing: this session's search_path resolves no table named outbox "
                "(migrate the schema, or connect with the search_path of the outbox table)");
  const std::string add = "ALTER PUBLICATION \"" + pub + "\" ADD TABLE " + table;
  if (r.text(0, 2) != "t")
    fail("does not exist (the outbox table is " + table +
         "): create it with tailing_store::setup, or `outbox migrate` with a postgresql+tail "
         "URL, on a session whose search_path resolves outbox to " +
         table);
  if (r.text(0, 3) != "t")
    fail("does not publish INSERTs (of " + table + ", the relay's outbox table): " +
         "ALTER PUBLICATION \"" + pub + "\" SET (publish = 'insert')");
  if (r.text(0, 4) != "t")
    fail("does not publish the table " + table +
         " (the relay's outbox table, as its session's search_path resolves it): " + add +
         ", or drop the publication and run setup again on a session with that search_path");
  if (!r.is_null(0, 5))
    fail("publishes " + table + " only WHERE " + std::string(r.text(0, 5)) +
         ": ALTER PUBLICATION \"" + pub + "\" SET TABLE " + table + " (without a row filter)");
  if (!r.is_null(0, 6))
    fail("leaves columns of " + table + " out of its column list (" + std::string(r.text(0, 6)) +
         "): ALTER PUBLICATION \"" + pub + "\" SET TABLE " + table + " (without a column list)");
  return static_cast<std::uint32_t>(r.int64(0, 1));
}

/// Creates the publication and the slot when missing (`tailing_store::setup`).
inline bool setup(PGconn* c, const tailing_options& o) {
  check_names(o);
  auto pub = exec(c, std::string(statements::tail_publication), params().add(o.publication),
                  "setup: publication");
  if (pub.text(0, 0) != "t") {
    try {
      // The session's outbox table (its search path), inserts only: table mode's rows.
      exec(c, ("CREATE PUBLICATION \"" + o.publication +
               "\" FOR TABLE outbox WITH (publish = 'insert')")
                  .c_str());
    } catch (const error& e) {
      if (e.native_code() != "42710") throw;  // created by another process meanwhile
    }
  }
  // One made by hand, or by an earlier setup on another search path, may not carry this
  // session's outbox table: the relay would pass over table mode's rows without a word.
  (void)check_publication(c, o.publication);
  for (int attempt = 0;; ++attempt) {
    try {
      auto r = exec(c, std::string(statements::tail_slot), params().add(o.slot),
                    "setup: replication slot");
      if (r.text(0, 0) == "t") return false;
      // A new slot starts at the end of the WAL: what an earlier slot of that name saved
      // says nothing about it.
      forget(c, o.slot);
      return true;
    } catch (const error& e) {
      if (e.native_code() == "42710" && attempt == 0) continue;  // created meanwhile
      if (e.native_code() == "55000")                            // wal_level
        throw error(errc::misconfigured, "postgresql", e.native_code(),
                    std::string(e.what()) + " (log tailing needs wal_level = logical)");
      throw;
    }
  }
}

/// Drops the slot, and the publication with `publication` (`tailing_store::drop`).
inline void drop(PGconn* c, const tailing_options& o, bool publication) {
  check_names(o);
  // A stream this process closed may still hold the slot while its walsender exits: wait
  // for that process (bounded), as a new stream does, rather than fail the drop.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < give_up) {
    auto r = exec(c,
                  "SELECT active_pid FROM pg_catalog.pg_replication_slots WHERE "
                  "slot_name = $1 AND active_pid IS NOT NULL",
                  params().add(o.slot), "drop replication slot");
    if (r.rows() != 1 || !closed_walsenders::contains(std::atoi(std::string(r.text(0, 0)).c_str())))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  try {
    exec(c,
         "SELECT pg_catalog.pg_drop_replication_slot(slot_name) FROM "
         "pg_catalog.pg_replication_slots WHERE slot_name = $1",
         params().add(o.slot), "drop replication slot");
  } catch (const error& e) {
    if (e.native_code() != "55006") throw;
    throw error(errc::transient, "postgresql", e.native_code(),
                "drop replication slot " + o.slot +
                    ": a connection still streams from it (a relay, or one that is going "
                    "away): stop it and drop again");
  }
  if (publication) exec(c, ("DROP PUBLICATION IF EXISTS \"" + o.publication + "\"").c_str());
  forget(c, o.slot);
}

}  // namespace outbox::postgresql::detail::tail
