#pragma once
/// @file
/// Retry and clock policies: the secondary policies of the relay and the consumer.

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <random>

#include <outbox/message.hpp>

namespace outbox {

/// Exponential backoff with jitter, a cap and a maximum number of attempts.
///
/// The delay after attempt `n` (1-based) is `initial * multiplier^(n-1)`, capped at `max_delay`,
/// then reduced by a random fraction up to `jitter` (0 = none, 1 = "full jitter"), so relays that
/// failed together do not retry together.
struct exponential_backoff {
  std::chrono::milliseconds initial{100};       ///< The delay after the first failed attempt.
  double multiplier = 2.0;                      ///< The factor from one delay to the next.
  std::chrono::milliseconds max_delay{60'000};  ///< The cap on a delay, before the jitter.
  double jitter = 0.2;    ///< The largest fraction cut from a delay at random (clamped to 0..1).
  int max_attempts = 10;  ///< After this many failed attempts the event is dead-lettered.

  /// Delay before the attempt that follows failed attempt `attempt` (1-based).
  template <std::uniform_random_bit_generator Rng>
  [[nodiscard]] std::chrono::milliseconds delay(int attempt, Rng& rng) const {
    double d = static_cast<double>(initial.count());
    for (int i = 1; i < attempt && d < static_cast<double>(max_delay.count()); ++i) d *= multiplier;
    d = std::min(d, static_cast<double>(max_delay.count()));
    if (jitter > 0) {
      std::uniform_real_distribution<double> dist(0.0, std::clamp(jitter, 0.0, 1.0));
      d *= 1.0 - dist(rng);
    }
    return std::chrono::milliseconds(static_cast<std::int64_t>(d));
  }

  /// True when no attempt should follow failed attempt `attempt`.
  [[nodiscard]] bool exhausted(int attempt) const noexcept { return attempt >= max_attempts; }
};

namespace concepts {
// clang-format off
/// A retry policy.
///
/// | expression            | returns                   | guarantees                          |
/// |-----------------------|---------------------------|-------------------------------------|
/// | `r.delay(n, rng)`     | `std::chrono::milliseconds` | >= 0; the wait after failure `n`  |
/// | `r.exhausted(n)`      | `bool`                    | true once `n` reaches the limit     |
template <class R>
concept retry_policy = requires(const R& r, int attempt, std::mt19937_64& rng) {
  { r.delay(attempt, rng) } -> std::same_as<std::chrono::milliseconds>;
  { r.exhausted(attempt) } -> std::same_as<bool>;
};

/// A clock policy: wall-clock time (stored timestamps must survive the process).
///
/// | expression | returns              | guarantees                                       |
/// |------------|----------------------|--------------------------------------------------|
/// | `c.now()`  | `outbox::time_point` | the time used for leases, backoff and timestamps; callable from two threads at once (a pipelining relay reads it on both of its threads) |
template <class C>
concept clock = std::copy_constructible<C> && requires(const C& c) {
  { c.now() } -> std::same_as<time_point>;
};
// clang-format on
}  // namespace concepts

/// The default clock policy.
struct system_clock {
  /// `std::chrono::system_clock::now()`.
  [[nodiscard]] time_point now() const { return std::chrono::system_clock::now(); }
};

static_assert(concepts::retry_policy<exponential_backoff>);
static_assert(concepts::clock<system_clock>);

}  // namespace outbox
