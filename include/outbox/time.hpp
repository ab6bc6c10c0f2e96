#pragma once
/// @file
/// Conversions between `outbox::time_point` and integer counts since the Unix epoch, the form
/// timestamps take in SQL columns and on the wire. Counts that come from outside (a peer, a
/// broker, a row written by another program) are range-checked: `time_point` counts
/// nanoseconds in 64 bits (about +-292 years), so a large count would be signed overflow.

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <ratio>

#include <outbox/message.hpp>

namespace outbox {

/// `t` as a count of `Period` units since the Unix epoch (truncated towards zero).
template <class Period>
[[nodiscard]] constexpr std::int64_t to_unix(time_point t) noexcept {
  return std::chrono::duration_cast<std::chrono::duration<std::int64_t, Period>>(
             t.time_since_epoch())
      .count();
}

/// The time `count` units of `Period` after the Unix epoch, or `nullopt` when `time_point`
/// cannot represent it. Never overflows, whatever `count` is.
template <class Period>
[[nodiscard]] constexpr std::optional<time_point> from_unix(std::int64_t count) noexcept {
  using unit = std::chrono::duration<std::int64_t, Period>;
  constexpr auto lo = std::chrono::duration_cast<unit>(time_point::min().time_since_epoch());
  constexpr auto hi = std::chrono::duration_cast<unit>(time_point::max().time_since_epoch());
  // Strict bounds: the duration_cast above truncates, so the bounds themselves convert back.
  if (count <= lo.count() || count >= hi.count()) return std::nullopt;
  return time_point(std::chrono::duration_cast<time_point::duration>(unit(count)));
}

/// `from_unix`, clamped to what `time_point` represents (for values read from our own columns,
/// where an out-of-range value can only come from another program and must not fail a read).
template <class Period>
[[nodiscard]] constexpr time_point from_unix_clamped(std::int64_t count) noexcept {
  if (auto t = from_unix<Period>(count)) return *t;
  return count < 0 ? time_point::min() : time_point::max();
}

/// `now - then` for two counts of one unit, never negative, saturated instead of overflowing
/// (a timestamp in a row another program wrote may be anything).
[[nodiscard]] constexpr std::int64_t elapsed(std::int64_t now, std::int64_t then) noexcept {
  std::int64_t d = 0;
  if (__builtin_sub_overflow(now, then, &d))
    return then < 0 ? std::numeric_limits<std::int64_t>::max() : 0;
  return d < 0 ? 0 : d;
}

}  // namespace outbox
