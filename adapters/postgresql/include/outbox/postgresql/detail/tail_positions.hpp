#pragma once
/// @file
/// What the log-tailing store keeps of a slot in the outbox table's side tables: the settled
/// progress (outbox_tail_positions) and the claims of the head batch a relay died in
/// (outbox_tail_attempts). Each call is one statement; failures are the caller's to weigh.

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include <outbox/postgresql/detail/connection.hpp>
#include <outbox/postgresql/detail/tail_ledger.hpp>
#include <outbox/postgresql/schema.hpp>
#include <outbox/postgresql/store.hpp>

namespace outbox::postgresql::detail::tail {

/// The progress saved for `slot` (zeros: none) and the slot's confirmed position
/// (tail_position.sql).
[[nodiscard]] inline std::pair<tail_progress, wal::lsn> read_position(store& table,
                                                                      const std::string& slot) {
  return table.run("read the slot's settled position", [&](PGconn* c) {
    auto r = exec(c, std::string(statements::tail_position), params().add(slot),
                  "read the settled position");
    const auto lsn = [&](int column) {
      return static_cast<wal::lsn>(std::max<std::int64_t>(r.int64(0, column), 0));
    };
    return std::pair{tail_progress{lsn(0), lsn(2), std::max<std::int64_t>(r.int64(0, 3), 0)},
                     lsn(1)};
  });
}

/// Saves `p` as `slot`'s progress (tail_position_save.sql).
inline void write_position(store& table, const std::string& slot, const tail_progress& p) {
  table.run("save the slot's settled position", [&](PGconn* c) {
    exec(c, std::string(statements::tail_position_save),
         params()
             .add(slot)
             .add(static_cast<std::int64_t>(p.position))
             .add(static_cast<std::int64_t>(p.within_end))
             .add(p.within_events),
         "save the settled position");
    return 0;
  });
}

/// Counts one more claim of the head batch at (`position`, `within`): a relay that dies while
/// publishing it starts there again. Returns the count (tail_attempt.sql).
[[nodiscard]] inline int count_attempt(store& table, const std::string& slot, std::int64_t position,
                                       std::int64_t within) {
  return table.run("count the head batch's attempt", [&](PGconn* c) {
    auto r = exec(c, std::string(statements::tail_attempt),
                  params().add(slot).add(position).add(within), "tail attempt");
    return static_cast<int>(r.int64(0, 0));
  });
}

/// Takes one claim of the head batch back: it was no attempt (tail_attempt_release.sql). A
/// failure leaves it counted once too often: one attempt of the retry policy's, never an event.
inline void release_attempt(store& table, const std::string& slot, std::int64_t position,
                            std::int64_t within) noexcept {
  try {
    table.run("release the head batch's attempt", [&](PGconn* c) {
      exec(c, std::string(statements::tail_attempt_release),
           params().add(slot).add(position).add(within), "tail attempt release");
      return 0;
    });
  } catch (...) {  // NOLINT(bugprone-empty-catch): see above
  }
}

}  // namespace outbox::postgresql::detail::tail
