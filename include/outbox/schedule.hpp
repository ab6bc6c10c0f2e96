#pragma once
/// @file
/// Scheduled delivery (`event::deliver_at`): the writer's check and the time it stores, and the
/// relay's idle sleep cut short when a waiting row falls due (`concepts::due_telling_store`).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <outbox/concepts/store.hpp>
#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/validate.hpp>

namespace outbox::detail {

/// Refuses `e.deliver_at` further than `horizon` after `now` (`invalid_input` naming
/// `deliver_at`), before any SQL runs.
inline void check_schedule(const event& e, time_point now, std::chrono::seconds horizon) {
  if (!e.deliver_at || *e.deliver_at <= now || *e.deliver_at - now <= horizon) return;
  const auto ahead = std::chrono::duration_cast<std::chrono::seconds>(*e.deliver_at - now);
  throw_invalid("deliver_at", "is " + std::to_string(ahead.count()) +
                                  " s ahead, beyond writer_options::schedule_horizon (" +
                                  std::to_string(horizon.count()) + " s)");
}

/// The time a row of `e` enqueued at `now` becomes claimable: `deliver_at` when it is after
/// `now`, else the epoch (at once: a time in the past means now).
[[nodiscard]] inline time_point available_at(const event& e, time_point now) noexcept {
  return e.deliver_at && *e.deliver_at > now ? *e.deliver_at : time_point{};
}

/// `t` in whole `Unit`s since the epoch, rounded up: a store keeping coarser time than
/// `time_point` must not make a scheduled row claimable before its time.
template <class Unit>
[[nodiscard]] constexpr std::int64_t to_unix_ceil(time_point t) noexcept {
  return std::chrono::ceil<Unit>(t.time_since_epoch()).count();
}

/// How long an idle relay sleeps: `idle`, or less when the store says a waiting row (a
/// scheduled event, a retry) falls due sooner, so it is claimed when due rather than up to a
/// poll later (at least 1 ms: never a busy loop). A store that cannot say, or fails to (the
/// next claim meets the failure), leaves `idle`.
template <class Store, class Clock>
[[nodiscard]] std::chrono::milliseconds idle_sleep(Store& store, const Clock& clock,
                                                   std::chrono::milliseconds idle) {
  if constexpr (concepts::due_telling_store<Store>) {
    try {
      const time_point now = clock.now();
      if (const std::optional<time_point> due = store.next_due(now)) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(*due - now);
        return std::clamp(left, std::chrono::milliseconds(1), idle);
      }
    } catch (const error&) {  // NOLINT(bugprone-empty-catch): the next claim reports it
    }
  }
  return idle;
}

}  // namespace outbox::detail
