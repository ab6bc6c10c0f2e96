#pragma once
/// @file
/// The options every store takes: one type, the same fields on every database, so porting a
/// service from one store to another changes one type alias (README, "Porting").

#include <chrono>

namespace outbox {

/// What becomes of a row once its publish is confirmed.
enum class retention {
  keep,               ///< Marked published; `purge_published` removes it later, in batches.
  delete_on_publish,  ///< Deleted by the settle itself (no index churn: the fastest).
};

/// How a relay holds a claimed batch (DESIGN.md).
enum class claim_policy {
  /// The store's best policy: `locking` where the database has row locks a claim can skip
  /// (PostgreSQL, MySQL), `leasing` where it has one writer (SQLite).
  store_default,
  /// The claim locks its rows (`FOR UPDATE SKIP LOCKED`) in a transaction that the settle
  /// commits: the row locks are the lease and the session is the fence.
  locking,
  /// The claim stamps owner, expiry and a fencing token in one short statement; the batch is
  /// published with no transaction open; the settle touches only rows still under the token.
  leasing,
};

/// Settings a store applies to its own sessions (`Store::configure`, and at construction when
/// `store_options::configure_session`). Never applied to a session the store did not get.
struct session_options {
  /// How long a statement waits for a lock before it fails `transient` (SQLite: the busy
  /// timeout, which every connection to the file needs).
  std::chrono::milliseconds lock_timeout{5'000};
  /// Durable at commit (SQLite: synchronous=FULL) rather than durable at the next checkpoint
  /// (synchronous=NORMAL: may lose the last commits on power loss, never corrupts; ~15% faster).
  bool durable_commits = true;
};

/// Options of a store: the same type for every store. A store refuses, as `misconfigured`,
/// a setting its database cannot honour (a locking claim on SQLite).
struct store_options {
  /// How the relay holds a claimed batch.
  claim_policy policy = claim_policy::store_default;
  /// What becomes of a row once its publish is confirmed.
  enum retention retention = retention::keep;
  /// Locking: the server ends a claim transaction left idle this long; keep it above the
  /// relay's publish timeout, or every batch is cut off mid-publish.
  std::chrono::milliseconds idle_in_transaction_timeout{60'000};
  /// Wake an idle relay by a notification where the database has one (PostgreSQL
  /// LISTEN/NOTIFY); false, or another database: the relay polls.
  bool listen = true;
  /// Apply `session` to the store's session at construction.
  bool configure_session = true;
  /// The settings applied to the session of the store at construction (when `configure_session`).
  session_options session{};
};

}  // namespace outbox
