#pragma once
/// @file
/// The log-tailing store's ledger: the decoded changes of the replication stream in, the events
/// to hand out and the WAL position that may be confirmed out. No I/O: the store reads the
/// stream, writes the table and reports the position; the ledger decides what is settled.

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <outbox/message.hpp>
#include <outbox/postgresql/detail/wal.hpp>

namespace outbox::postgresql::detail {

/// An event read from the stream, in its transaction.
struct event_in_log {
  message m;
  std::string why{};          ///< Why it cannot be published; empty when it can.
  std::uint64_t tx = 0;       ///< Its transaction's number in the ledger.
  bool streamed_row = false;  ///< Table mode: a row to delete once published.
  /// A scheduled event's time (`event::deliver_at`); the epoch: due at once.
  time_point available_at{};
};

/// What is settled: every event committed before `position`, and the first `within_events` of
/// the transaction that ends at `within_end` (0, 0: none), compared in that order. What
/// outbox_tail_positions keeps for a slot.
struct tail_progress {
  wal::lsn position = 0;
  wal::lsn within_end = 0;
  std::int64_t within_events = 0;
  auto operator<=>(const tail_progress&) const = default;
};

/// The confirm rule: the position moves past a transaction only once each of its events is
/// settled (published, or written to the table), and past event-free WAL only when nothing read
/// is unsettled. Events are handed out in commit order; they may be settled in any order.
class tail_ledger {
 public:
  /// The outbox table's oid (as the table session resolves it): table mode's rows are the
  /// INSERTs of that relation only.
  void outbox_table(std::uint32_t relid) noexcept { outbox_relid_ = relid; }

  /// Takes one decoded change; `frame_start` is its frame's WAL position. A committed
  /// transaction's events become ready; the first events of the transaction the progress saved
  /// (`resume`) says are settled are skipped.
  void take(const wal::change& c, wal::lsn frame_start) {
    using kind = wal::change::kind;
    switch (c.what) {
      case kind::begin:
        in_tx_ = true;
        current_.clear();
        break;
      case kind::message: {
        if (c.prefix != wal::message_prefix) break;
        event_in_log ev;
        ev.why = wal::decode_event(c.content, ev.m, ev.available_at);
        if (c.transactional && in_tx_)
          current_.push_back(std::move(ev));
        else
          alone(std::move(ev), c.final_lsn);  // emitted outside a transaction: not our writer's
        break;
      }
      case kind::commit:
        in_tx_ = false;
        if (current_.empty()) {
          last_commit_end_ = std::max(last_commit_end_, c.end_lsn);
          break;
        }
        commit(c.end_lsn);
        break;
      case kind::relation:
        // This relay's outbox table only: another schema's table of that name may be in the
        // publication too (FOR ALL TABLES).
        if (c.relid == outbox_relid_) {
          if (auto cols = wal::outbox_columns::of(c.names)) {
            relations_[c.relid] = *cols;
            break;
          }
        }
        relations_.erase(c.relid);
        break;
      case kind::insert: {
        const auto rel = relations_.find(c.relid);
        if (rel == relations_.end()) break;
        // Only the table-mode writer's rows: the relay's own parked rows come by here too.
        if (wal::row_state(rel->second, c.values) != 3) break;
        event_in_log ev;
        ev.streamed_row = true;
        ev.why = wal::decode_row(rel->second, c.values, ev.m, ev.available_at);
        if (in_tx_)
          current_.push_back(std::move(ev));
        else
          alone(std::move(ev), frame_start);
        break;
      }
      case kind::other:
        break;
    }
  }

  /// Events of committed transactions not handed out yet.
  [[nodiscard]] std::size_t ready() const noexcept { return ready_.size(); }
  /// The next event in commit order (`ready() > 0`), now handed out of its transaction.
  [[nodiscard]] event_in_log hand_out() {
    event_in_log ev = std::move(ready_.front());
    ready_.pop_front();
    if (tx_state* t = tx_of(ev.tx)) ++t->next;
    return ev;
  }
  /// Where the next batch starts: the end of the first unsettled transaction and the index of
  /// its next event there, or the position and 0.
  [[nodiscard]] std::pair<std::int64_t, std::int64_t> head() const noexcept {
    if (txs_.empty()) return {static_cast<std::int64_t>(position_), 0};
    return {static_cast<std::int64_t>(txs_.front().end), txs_.front().next};
  }

  /// One event of transaction `tx` is settled (an unknown or finished one: nothing).
  void settle(std::uint64_t tx) noexcept {
    if (tx_state* t = tx_of(tx); t && t->open > 0) --t->open;
  }

  /// Nothing read is unsettled (`batch_out`: a batch handed out is not settled yet).
  [[nodiscard]] bool caught_up(bool batch_out) const noexcept {
    return txs_.empty() && ready_.empty() && !in_tx_ && !batch_out;
  }

  /// Moves the position past the settled transactions at the front, and to `stream_end` (the
  /// WAL the server has sent) when caught up. With no batch out, the events handed out of the
  /// first unsettled transaction are all settled: they join the progress (`settled`).
  void advance(bool batch_out, wal::lsn stream_end) {
    while (!txs_.empty() && txs_.front().open == 0) {
      position_ = std::max(position_, txs_.front().end);
      settled_events_ = std::max(settled_events_, txs_.front().end);
      txs_.pop_front();
      ++first_tx_;
    }
    if (caught_up(batch_out)) position_ = std::max({position_, last_commit_end_, stream_end});
    if (!batch_out && !txs_.empty() && txs_.front().next > 0 &&
        tail_progress{0, txs_.front().end, txs_.front().next} >
            tail_progress{0, within_end_, within_events_}) {
      within_end_ = txs_.front().end;
      within_events_ = txs_.front().next;
    }
  }

  /// The position that may be confirmed to the server: every event before it is settled.
  [[nodiscard]] wal::lsn position() const noexcept { return position_; }

  /// What is settled, for outbox_tail_positions. Only transactions with events move it (the
  /// position's own write is WAL the stream shows: following that would write for ever).
  [[nodiscard]] tail_progress settled() const noexcept {
    if (within_end_ <= settled_events_) return {settled_events_, 0, 0};
    return {settled_events_, within_end_, within_events_};
  }

  /// The progress to write, once per progress: not saved yet, and not tried since it last
  /// moved (a save that failed is tried again when the progress moves, not at every advance).
  [[nodiscard]] std::optional<tail_progress> to_save() noexcept {
    const tail_progress now_at = settled();
    if (now_at <= saved_ || now_at <= save_tried_) return std::nullopt;
    save_tried_ = now_at;
    return now_at;
  }
  /// `p` was written.
  void saved(const tail_progress& p) noexcept { saved_ = std::max(saved_, p); }

  /// Before a stream opens: merges the progress the table saved with what is known here, and
  /// returns the progress to write back (tried once now). The position becomes the later of
  /// the two; the stream starts there.
  [[nodiscard]] tail_progress resume(const tail_progress& row) noexcept {
    if (row.within_end > std::max(row.position, settled_events_) &&
        tail_progress{0, row.within_end, row.within_events} >
            tail_progress{0, within_end_, within_events_}) {
      within_end_ = row.within_end;
      within_events_ = row.within_events;
    }
    settled_events_ = std::max(settled_events_, row.position);
    save_tried_ = settled();
    position_ = std::max(position_, row.position);
    return save_tried_;
  }

  /// Forgets what was read and not settled (the stream closed): a new stream shows it again.
  /// Positions seen on the old stream say nothing about what the new one replays.
  void reset() noexcept {
    ready_.clear();
    current_.clear();
    in_tx_ = false;
    txs_.clear();
    first_tx_ = next_tx_;
    relations_.clear();  // a new stream describes its tables again
    last_commit_end_ = 0;
  }

 private:
  struct tx_state {
    wal::lsn end = 0;
    std::size_t open = 0;   // events not settled yet
    std::int64_t next = 0;  // index (in the WAL) of its next event to hand out
  };

  /// An event outside a transaction: a transaction of its own, ending at `end`.
  void alone(event_in_log ev, wal::lsn end) {
    ev.tx = next_tx_++;
    txs_.push_back(tx_state{end, 1});
    ready_.push_back(std::move(ev));
  }

  void commit(wal::lsn end) {
    // The transaction whose first events were settled before the stream opened again: those
    // are published or in the table, and are not handed out again.
    std::size_t skip = 0;
    if (end == within_end_)
      skip = static_cast<std::size_t>(
          std::min<std::int64_t>(within_events_, static_cast<std::int64_t>(current_.size())));
    txs_.push_back(tx_state{end, current_.size() - skip, static_cast<std::int64_t>(skip)});
    for (std::size_t i = skip; i < current_.size(); ++i) {
      current_[i].tx = next_tx_;
      ready_.push_back(std::move(current_[i]));
    }
    ++next_tx_;
    current_.clear();
  }

  tx_state* tx_of(std::uint64_t tx) noexcept {
    if (tx < first_tx_ || tx - first_tx_ >= txs_.size()) return nullptr;
    return &txs_[static_cast<std::size_t>(tx - first_tx_)];
  }

  std::deque<event_in_log> ready_;     // events of committed transactions, in commit order
  std::vector<event_in_log> current_;  // the transaction being received
  bool in_tx_ = false;
  std::deque<tx_state> txs_;  // transactions with events handed out or ready, oldest first
  std::uint64_t first_tx_ = 0, next_tx_ = 0;  // txs_.front() is first_tx_
  wal::lsn position_ = 0, last_commit_end_ = 0;
  // The end of the last transaction with events settled, and the first events settled of the
  // transaction after it (the one that ends at within_end_).
  wal::lsn settled_events_ = 0, within_end_ = 0;
  std::int64_t within_events_ = 0;
  tail_progress saved_{}, save_tried_{};
  std::uint32_t outbox_relid_ = 0;
  std::unordered_map<std::uint32_t, wal::outbox_columns> relations_;  // the outbox table's
};

}  // namespace outbox::postgresql::detail
