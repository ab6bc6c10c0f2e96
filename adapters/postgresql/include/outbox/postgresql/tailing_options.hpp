#pragma once
/// @file
/// The log-tailing store's options and the statuses its operations report
/// (`outbox::postgresql::tailing_store`).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include <outbox/error.hpp>
#include <outbox/store_options.hpp>

namespace outbox::postgresql {

/// Options of a `tailing_store`.
struct tailing_options {
  /// The logical replication slot the relay reads from (`[a-z0-9_]`, at most 63 characters):
  /// one per relay. Its confirmed position advances only past events the broker confirmed (or
  /// that went to the outbox table), so a restarted relay replays from there.
  std::string slot = "outbox_relay";
  /// The publication named to `pgoutput` (same rules): the outbox table's inserts (table mode;
  /// `setup` creates it for the table of the session's search path). The table-free mode's
  /// logical decoding messages need no table (every publication carries them), but the
  /// publication must carry the relay's outbox table all the same: `setup` and each stream
  /// opened check it (`misconfigured` otherwise), so table mode's rows are never passed over.
  std::string publication = "outbox_tail";
  /// How often the outbox table (retries, requeued dead letters) is looked at when no retry is
  /// known to be due sooner.
  std::chrono::milliseconds table_poll{1'000};
  /// The slot's position is reported to the server at least this often (it also goes after
  /// each batch that moved it, and whenever the server asks).
  std::chrono::milliseconds status_interval{10'000};
  /// Events read from the stream ahead of the batches, at most (more stays in the socket).
  std::size_t read_ahead = 20'000;
  /// Options of the outbox table's store (its claim policy is always leasing: a table claim
  /// and the stream's batches take turns on one connection).
  outbox::store_options table{};
  /// Told, on the relay's thread, when the relay found table mode's rows that its stream had
  /// passed without showing them (written while the publication did not carry the outbox
  /// table, or before the slot was made) and made them pending rows of the table, which
  /// publishes them: an error of class `misconfigured` saying how many and why, not thrown.
  /// `tailing_store::stranded_rows` counts them. Must not throw (what it throws is dropped).
  std::function<void(const error&)> on_stranded{};
};

/// A log-tailing relay's replication slot, as the server sees it (`tailing_store::slot`).
struct slot_status {
  bool exists = false;               ///< The slot exists (the other fields are 0 or empty if not).
  bool active = false;               ///< A connection streams from it.
  std::int64_t lag_bytes = 0;        ///< WAL after its confirmed position.
  std::int64_t retained_bytes = 0;   ///< WAL it keeps the server from removing.
  std::string wal_status{};          ///< reserved, extended, unreserved (about to lose), lost.
  std::chrono::milliseconds lag{0};  ///< The streaming connection's flush lag (0: none).
};

/// Table mode's rows that no relay has published yet (`tailing_store::streamed`).
struct streamed_status {
  /// Written more than `tailing_store::streamed_grace` (10 s) ago.
  std::int64_t unpublished = 0;
  /// The oldest one's age, whatever it is (0: none).
  std::chrono::milliseconds oldest_age{0};
};

}  // namespace outbox::postgresql
