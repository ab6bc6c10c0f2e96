#pragma once
/// @file
/// Optional capabilities of an operable store: dead-letter triage by cause, an archive of
/// discarded dead letters, and replay of published events (`outbox dead-letters groups`,
/// `requeue --group`, `dead-letters discard`, `purge --archive-before`, `outbox replay`).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <outbox/concepts/store.hpp>
#include <outbox/triage.hpp>

namespace outbox::concepts {

// clang-format off
/// Dead letters grouped by cause key, requeued or discarded a bounded batch at a time. None of
/// these touches a row a relay may hold: they take dead letters only (state dead), which no
/// claim takes and no settle changes, and check the state again on each row they change.
///
/// | operation                            | returns                          | guarantees                               | errors |
/// |--------------------------------------|----------------------------------|------------------------------------------|--------|
/// | `s.dead_letter_groups(n)`            | `std::vector<dead_letter_group>` | at most `n` groups, the largest first    | `transient` |
/// | `s.requeue_group(key, now, n)`       | `std::size_t`                    | at most `n` dead letters of cause `key`, oldest first, pending again with attempts reset, `replays` + 1 and `replayed_at` = `now`; how many (call again while it returns `n`) | `transient` |
/// | `s.discard(filter, now, n)`          | `std::size_t`                    | at most `n` dead letters matching `filter`, oldest first, moved to the archive (stamped `now`) in one transaction each: a row is in one place, never both or neither | `transient` |
/// | `s.purge_archive(t, n)`              | `std::size_t`                    | deletes at most `n` archived dead letters archived before `t`, oldest first | `transient` |
template <class S>
concept triage_store = operable_store<S> &&
    requires(S& s, const std::string& key, const dead_letter_filter& f, time_point t,
             std::size_t n) {
  { s.dead_letter_groups(n) } -> std::same_as<std::vector<dead_letter_group>>;
  { s.requeue_group(key, t, n) } -> std::same_as<std::size_t>;
  { s.discard(f, t, n) } -> std::same_as<std::size_t>;
  { s.purge_archive(t, n) } -> std::same_as<std::size_t>;
};

/// Published events (kept by retention `keep`) sent again with their ids. Not offered by a
/// log-tailing store (a replayed row would not pass through the log it reads).
///
/// | operation                 | returns           | guarantees                               | errors |
/// |---------------------------|-------------------|------------------------------------------|--------|
/// | `s.replay_count(f)`       | `replay_estimate` | how many published events `f` takes, and whether any is kept at all | `transient` |
/// | `s.replay(f, now, n)`     | `std::size_t`     | at most `n` of them, oldest first (store order), pending again with attempts reset, `replays` + 1; how many (call again while it returns `n`: the replayed rows no longer match until published again, so keep `f.until` fixed) | `transient` |
template <class S>
concept replay_store = operable_store<S> &&
    requires(S& s, const replay_filter& f, time_point t, std::size_t n) {
  { s.replay_count(f) } -> std::same_as<replay_estimate>;
  { s.replay(f, t, n) } -> std::same_as<std::size_t>;
};
// clang-format on

}  // namespace outbox::concepts
