#pragma once
/// @file
/// A clock policy that only moves when told to: for testing leases, backoff and retention.

#include <atomic>
#include <chrono>
#include <memory>

#include <outbox/message.hpp>
#include <outbox/retry.hpp>

namespace outbox::testing {

/// A copyable handle on a shared, manually advanced time. Copies see the same time, so a test
/// keeps one copy and hands others to relays and consumers.
class manual_clock {
 public:
  /// Starts at `start` (default: the real time at construction, so stored timestamps look sane).
  explicit manual_clock(time_point start = std::chrono::system_clock::now())
      : t_(std::make_shared<std::atomic<rep>>(start.time_since_epoch().count())) {}

  /// The manual time, the same for every copy.
  [[nodiscard]] time_point now() const {
    return time_point(time_point::duration(t_->load(std::memory_order_acquire)));
  }
  /// Moves time forward by `d`.
  template <class Rep, class Period>
  void advance(std::chrono::duration<Rep, Period> d) {
    t_->fetch_add(std::chrono::duration_cast<time_point::duration>(d).count(),
                  std::memory_order_acq_rel);
  }

 private:
  using rep = time_point::duration::rep;
  std::shared_ptr<std::atomic<rep>> t_;
};

static_assert(concepts::clock<manual_clock>);

}  // namespace outbox::testing
