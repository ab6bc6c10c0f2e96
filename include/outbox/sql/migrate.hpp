#pragma once
/// @file
/// The migration runner every store shares: the numbered files of `sql/<dialect>/`, applied in
/// one transaction under the dialect's lock, each recorded in `outbox_schema_migrations`.

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <outbox/error.hpp>
#include <outbox/migration.hpp>

namespace outbox::sql {

/// What a dialect provides to the runner, on one session:
/// - `begin_exclusive()`: opens a transaction that excludes concurrent migrations (an advisory
///   lock, or the database's write lock); `misconfigured` when the session is already in a
///   transaction (a migration would commit the caller's work, or fail half-way);
/// - `applied()`: the versions recorded so far, ascending (empty when the version table does not
///   exist yet);
/// - `apply(m)`: runs the file's text; `record(m)`: records it as applied;
/// - `commit()`; `rollback()` (never throws).
template <class H>
concept migration_host = requires(H& h, const migration& m) {
  h.begin_exclusive();
  { h.applied() } -> std::same_as<std::vector<int>>;
  h.apply(m);
  h.record(m);
  h.commit();
  h.rollback();
};

/// The latest version: migrate to everything the library has.
inline constexpr int latest_version = -1;

/// Refuses a database behind the library: `found` (its recorded schema version) below `needed`
/// (the library's) is `misconfigured`, naming both and the fix. Stores check it on each new
/// connection, so an unmigrated database fails clearly rather than on a missing column.
inline void require_schema_version(std::int64_t found, std::int64_t needed,
                                   std::string_view adapter) {
  if (found < needed)
    throw error(errc::misconfigured, std::string(adapter), {},
                "the database is at schema version " + std::to_string(found) +
                    ", this library needs " + std::to_string(needed) + ": call migrate");
}

/// Applies the migrations the database does not have yet, up to `target` (tests stop earlier to
/// migrate an older schema with rows in it), in one transaction. Safe from several processes.
/// @returns the schema version after the call.
/// @throws outbox::error `misconfigured` when the embedded migrations are not numbered 1..N,
///         when the database's versions have a gap, or when the database is newer than the
///         library (it records a version the library does not have); nothing is applied then.
template <migration_host Host>
int run_migrations(Host& host, std::span<const migration> migrations, const char* adapter,
                   int target = latest_version) {
  for (std::size_t i = 0; i < migrations.size(); ++i)
    if (migrations[i].version != static_cast<int>(i) + 1)
      throw error(errc::misconfigured, adapter, {},
                  "migrate: the embedded migrations are not numbered 1..N");
  const int known = static_cast<int>(migrations.size());
  if (target == latest_version) target = known;
  if (target < 0 || target > known)
    throw error(errc::misconfigured, adapter, {},
                "migrate: no migration " + std::to_string(target) + " (the library has 1.." +
                    std::to_string(known) + ")");
  try {
    host.begin_exclusive();
    const std::vector<int> done = host.applied();
    for (std::size_t i = 0; i < done.size(); ++i)
      if (done[i] != static_cast<int>(i) + 1)
        throw error(errc::misconfigured, adapter, {},
                    "migrate: outbox_schema_migrations has a gap (version " +
                        std::to_string(i + 1) + " is missing); repair the schema by hand");
    const int current = static_cast<int>(done.size());
    if (current > known)
      throw error(errc::misconfigured, adapter, {},
                  "migrate: the database is at schema version " + std::to_string(current) +
                      ", newer than this library (" + std::to_string(known) +
                      "): upgrade the library");
    for (int v = current + 1; v <= target; ++v) {
      const auto& m = migrations[static_cast<std::size_t>(v - 1)];
      host.apply(m);
      host.record(m);
    }
    host.commit();
    return std::max(current, target);
  } catch (...) {
    host.rollback();
    throw;
  }
}

}  // namespace outbox::sql
