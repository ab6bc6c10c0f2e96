#pragma once
/// @file
/// The log-tailing store's batches: where one came from (the outbox table or the stream), and
/// what the store keeps of the stream batch it handed out.

#include <algorithm>
#include <cstdint>
#include <vector>

#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/postgresql/detail/tail_parking.hpp>

namespace outbox::postgresql::detail {

/// Where a batch came from: the outbox table's claim (its token, >= 0) or the stream (a
/// negative token, numbered by the store). The relay hands the token back untouched.
enum class batch_origin { table, stream };
[[nodiscard]] inline batch_origin origin(const claimed_batch& b) noexcept {
  return b.token < 0 ? batch_origin::stream : batch_origin::table;
}
[[nodiscard]] inline std::int64_t stream_token(std::uint64_t n) noexcept {
  return -static_cast<std::int64_t>(n);
}

/// The stream batch handed out and not settled yet.
struct stream_batch {
  struct entry {
    std::int64_t sequence = 0;
    std::uint64_t tx = 0;
    bool streamed_row = false;
  };
  std::int64_t token = 0;
  /// Each message's transaction, by sequence (the relay may reorder the batch).
  std::vector<entry> entries;
  /// The first batch after the stream opened: the place its claim was counted at
  /// (outbox_tail_attempts: the end of its first transaction, and its first event's index
  /// there), 0 for the others.
  std::int64_t head_position = 0, head_within = 0;
  /// Events to park at the settle, behind the fates of the batch's earlier events of their
  /// aggregate (a scheduled event read after one of its aggregate handed out, and the events
  /// behind it): parked at the claim, they would go before a retry of those.
  std::vector<parked_row> behind;
  [[nodiscard]] const entry& of(std::int64_t seq) const {
    const auto it = std::lower_bound(entries.begin(), entries.end(), seq,
                                     [](const entry& e, std::int64_t v) { return e.sequence < v; });
    if (it == entries.end() || it->sequence != seq)
      throw error(errc::misconfigured, "postgresql", {},
                  "settle: a message that is not of the batch");
    return *it;
  }
};

}  // namespace outbox::postgresql::detail
