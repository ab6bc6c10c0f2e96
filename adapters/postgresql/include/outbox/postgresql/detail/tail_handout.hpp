#pragma once
/// @file
/// The log-tailing store's sorting of stream events: at a claim, which events go out in the
/// batch and which are parked in the outbox table behind their aggregate; at a settle, which
/// fates park an event (a retry, a release, a dead letter) and what the settle counts.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <outbox/cause.hpp>
#include <outbox/message.hpp>
#include <outbox/postgresql/detail/tail_batch.hpp>
#include <outbox/postgresql/detail/tail_ledger.hpp>
#include <outbox/postgresql/detail/tail_parking.hpp>
#include <outbox/postgresql/detail/tail_turns.hpp>

namespace outbox::postgresql::detail {

/// A scheduled event's time as a parked row's `available_at` (none: due at once).
[[nodiscard]] inline std::optional<time_point> parked_time(time_point available_at) noexcept {
  if (available_at == time_point{}) return std::nullopt;
  return available_at;
}

/// Sorts the events `taken` from the stream (in stream order) at `now`: unreadable ones
/// become dead letters (counted in `batch.unreadable`); those of an aggregate `parking` holds
/// are parked behind it; a scheduled one not due yet is parked until its time (`turns` looks
/// at the table then), and its aggregate is held from here on, so the later events of the
/// aggregate wait behind it, in this batch too; the rest join `batch` (numbered from
/// `sequence`, their transactions in `sb`). An event to park whose aggregate has an earlier
/// event in `batch` waits in `sb.behind` for the settle (numbered too), so it is parked after
/// that event's fate: an aggregate's parked rows follow stream order.
/// @returns the events to park now, in stream order.
[[nodiscard]] inline std::vector<parked_row> sort_taken(std::vector<event_in_log>& taken,
                                                        tail_parking& parking, tail_turns& turns,
                                                        time_point now, claimed_batch& batch,
                                                        stream_batch& sb, std::int64_t& sequence) {
  std::vector<parked_row> to_park;
  std::unordered_set<std::string> handed_out;  // aggregates with an event in `batch`
  const auto park_row = [&](parked_row r, const std::string& key) {
    if (!handed_out.contains(key)) {
      to_park.push_back(std::move(r));
      return;
    }
    r.m.sequence = ++sequence;  // in stream order with the batch's messages
    sb.behind.push_back(std::move(r));
  };
  for (event_in_log& ev : taken) {
    if (!ev.why.empty()) {
      to_park.push_back(tail_parking::unreadable(std::move(ev)));
      ++batch.unreadable;
      continue;
    }
    auto key = outbox::detail::aggregate_key(ev.m);
    if (parking.holds(key)) {
      // Behind its aggregate's rows (a scheduled one too: it keeps its time there).
      if (ev.available_at > now) turns.retry_at(ev.available_at);
      park_row(parked_row{std::move(ev.m), ev.tx, 0, parked_time(ev.available_at), 0, {}}, key);
      continue;
    }
    if (ev.available_at > now) {
      turns.retry_at(ev.available_at);
      parking.hold(key);
      park_row(parked_row{std::move(ev.m), ev.tx, 0, ev.available_at, 0, {}}, key);
      continue;
    }
    handed_out.insert(std::move(key));
    ev.m.sequence = ++sequence;
    ev.m.attempts = 1;  // counting this one
    sb.entries.push_back({ev.m.sequence, ev.tx, ev.streamed_row});
    batch.messages.push_back(std::move(ev.m));
  }
  return to_park;
}

/// The fates of a stream batch `out` handed out: counted, and the events that are not
/// published turned into rows to park (pending with their retry time; released: pending at
/// once, or at `retry_at` when set (a deferral, with `settlement::deferral_error` as its last
/// error), the attempt given back; or dead, with the cause key); `turns` learns when the table
/// has rows due.
[[nodiscard]] inline std::pair<settle_result, std::vector<parked_row>> sort_fates(
    const claimed_batch& batch, std::span<const settlement> fates, const stream_batch& out,
    tail_turns& turns, time_point now) {
  settle_result counts;
  std::vector<parked_row> to_park;
  for (std::size_t i = 0; i < fates.size(); ++i) {
    const message& m = batch.messages[i];
    const settlement& f = fates[i];
    const std::uint64_t tx = out.of(m.sequence).tx;
    turns.after(f, now);  // a release or a retry makes the table due
    switch (f.what) {
      case settlement::kind::published:
        ++counts.published;
        continue;
      case settlement::kind::retry:
        ++counts.retried;
        to_park.push_back(parked_row{m, tx, 0, f.retry_at, m.attempts, {}});
        break;
      case settlement::kind::release:
        ++counts.released;
        // A deferral (`retry_at` set) waits for its time, holding its aggregate back, with
        // its error as the last error (never attempted before, it has none): the mark the
        // table's stats tell it from a scheduled event by.
        if (f.retry_at > time_point{})
          to_park.push_back(parked_row{m, tx, 0, f.retry_at, std::max(0, m.attempts - 1),
                                       std::string(f.deferral_error())});
        else
          to_park.push_back(parked_row{m, tx, 0, std::nullopt, std::max(0, m.attempts - 1), {}});
        break;
      case settlement::kind::dead:
        ++counts.dead;
        to_park.push_back(parked_row{m, tx, 2, std::nullopt, m.attempts, f.error,
                                     f.cause.empty() ? cause_key("unknown", f.error) : f.cause});
        break;
    }
  }
  return {counts, std::move(to_park)};
}

}  // namespace outbox::postgresql::detail
