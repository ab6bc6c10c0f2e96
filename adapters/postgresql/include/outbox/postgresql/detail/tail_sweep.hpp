#pragma once
/// @file
/// Table mode's safety net (`tailing_store::claim`): streamed rows the replication stream
/// passed without showing them (written while the publication lacked the outbox table, or
/// before the slot was made) are found and made pending rows of the table.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <outbox/message.hpp>
#include <outbox/postgresql/detail/connection.hpp>
#include <outbox/postgresql/detail/wal.hpp>
#include <outbox/postgresql/schema.hpp>
#include <outbox/postgresql/store.hpp>

namespace outbox::postgresql::detail {

/// Every `poll`, one look takes the oldest streamed rows and the server's WAL position in one
/// snapshot (tail_sweep.sql): each of those rows committed before it. Once the settled position
/// has reached it, the stream showed each of them it ever will, and settled it (a published
/// row is deleted, a failed one parked, before the position moves past it): any still
/// streamed was passed over.
class tail_sweep {
 public:
  /// The most streamed rows one look takes (the oldest).
  static constexpr std::size_t limit = 1'000;

  /// The rows to rescue (a bigint[] literal of seqs), once `settled` has reached the last look.
  [[nodiscard]] std::optional<std::string> due(wal::lsn settled) {
    if (!look_ || !passed(settled, look_->position, look_->page_size)) return std::nullopt;
    std::optional<std::string> seqs = std::move(look_->seqs);
    look_.reset();
    return seqs;
  }

  /// Takes a new look when none waits and `poll` has passed since the last.
  void look(store& table, std::chrono::milliseconds poll) {
    const auto now = std::chrono::steady_clock::now();
    if (look_ || now < next_) return;
    next_ = now + poll;
    auto look = table.run("look for passed streamed rows", [&](PGconn* c) {
      const auto r =
          exec(c, std::string(statements::tail_sweep),
               params().add(static_cast<std::int64_t>(limit)), "look for passed streamed rows");
      return std::pair{r.int64(0, 2) > 0, snapshot{static_cast<wal::lsn>(r.int64(0, 0)),
                                                   r.int64(0, 1), std::string(r.text(0, 3))}};
    });
    if (look.first) look_ = std::move(look.second);
  }

  /// Makes the rows `seqs` that are still streamed pending rows of the table
  /// (tail_rescue.sql); returns their aggregates' keys.
  [[nodiscard]] static std::vector<std::string> rescue(store& table, const std::string& seqs) {
    return table.run("move passed streamed rows to the table", [&](PGconn* c) {
      const auto r = exec(c, std::string(statements::tail_rescue), params().add(seqs),
                          "move passed streamed rows");
      std::vector<std::string> keys;
      keys.reserve(static_cast<std::size_t>(r.rows()));
      for (int i = 0; i < r.rows(); ++i)
        keys.push_back(outbox::detail::aggregate_key(r.text(i, 0), r.text(i, 1)));
      return keys;
    });
  }

  /// What `on_stranded` hears when `n` rows were rescued.
  [[nodiscard]] static std::string report(std::size_t n, const std::string& slot,
                                          const std::string& publication) {
    return std::to_string(n) +
           " table-mode event(s) (outbox rows in state 3) were passed over by the replication "
           "stream of slot " +
           slot + " (written while publication \"" + publication +
           "\" did not carry the outbox table, or before the slot was made): they are pending "
           "rows of the outbox table now, published from there";
  }

  /// Whether `settled` is at WAL position `lsn` or past it. The server's insert position at a
  /// page's start is after the page's header, where no record ends: a stream that read all the
  /// WAL there is before it by the header (24 bytes, 40 at a segment's start).
  [[nodiscard]] static bool passed(wal::lsn settled, wal::lsn lsn,
                                   std::int64_t page_size) noexcept {
    if (settled >= lsn) return true;
    const auto gap = lsn - settled;
    return page_size > 0 && settled % static_cast<wal::lsn>(page_size) == 0 &&
           (gap == 24 || gap == 40);
  }

 private:
  struct snapshot {
    wal::lsn position = 0;  // the server's WAL insert position
    std::int64_t page_size = 0;
    std::string seqs;  // the streamed rows that committed before it
  };
  std::optional<snapshot> look_;  // waiting for the settled position to reach it
  std::chrono::steady_clock::time_point next_{};
};

}  // namespace outbox::postgresql::detail
