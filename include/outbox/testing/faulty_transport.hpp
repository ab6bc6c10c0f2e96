#pragma once
/// @file
/// Fault-injecting transport doubles: wrap any transport and make it fail N times, fail
/// permanently for chosen messages, confirm out of order, or never confirm.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <iterator>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <outbox/concepts/transport.hpp>
#include <outbox/message.hpp>

namespace outbox::testing {

/// Wraps `Inner` (a `concepts::transport`). A message that fails is not handed to `Inner` (it
/// never reaches the wire) and gets a failed `publish_result` of the configured class.
/// Thread-safe; the faults can be changed while a relay runs.
///
/// `KeepsOrder`: declares `keeps_publish_order` (concepts::order_keeping_transport), so the
/// relay sends a batch in one call; an injected transient failure in the middle of an
/// aggregate's run then breaks that promise, as a broker that nacks one message and takes the
/// next would (the relay counts it, `relay_stats::reordered`). Off: the relay sends waves.
template <concepts::transport Inner, bool KeepsOrder = false>
class faulty_transport {
 public:
  /// Capability (`concepts::order_keeping_transport`): `KeepsOrder`, whatever `Inner` declares.
  static constexpr bool keeps_publish_order = KeepsOrder;

  /// Wraps `inner`, which must outlive it; no fault is set.
  explicit faulty_transport(Inner& inner) : inner_(&inner) {}

  /// The next `n` messages fail with `cls` (transient by default), then all is well again.
  /// Adds to failures still pending from an earlier call.
  void fail_next(std::size_t n, errc cls = errc::transient) {
    std::lock_guard lock(mutex_);
    fail_next_ += n;
    fail_next_class_ = cls;
  }
  /// Every message matching `pred` fails with `cls`, for as long as the predicate is set.
  void fail_when(std::function<bool(const message&)> pred, errc cls = errc::permanent) {
    std::lock_guard lock(mutex_);
    fail_when_ = std::move(pred);
    fail_when_class_ = cls;
  }
  /// Results come back in reverse order of the batch (confirms arriving out of order).
  void confirm_out_of_order(bool on) {
    std::lock_guard lock(mutex_);
    reorder_ = on;
  }
  /// Messages are sent, but no confirm ever comes: `publish` returns at the deadline with none.
  void never_confirm(bool on) {
    std::lock_guard lock(mutex_);
    never_confirm_ = on;
  }
  /// Routes messages by `fn` (`concepts::routing_transport`, for the relay's storm guard);
  /// unset: `Inner`'s routes, or one route "".
  void route_by(std::function<std::string(const message&)> fn) {
    std::lock_guard lock(mutex_);
    route_by_ = std::move(fn);
  }
  /// The route of `m` (see `route_by`).
  [[nodiscard]] std::string route(const message& m) const {
    {
      std::lock_guard lock(mutex_);
      if (route_by_) return route_by_(m);
    }
    if constexpr (concepts::routing_transport<Inner>) return inner_->route(m);
    return {};
  }
  /// Removes every fault.
  void heal() {
    std::lock_guard lock(mutex_);
    fail_next_ = 0;
    fail_when_ = nullptr;
    reorder_ = false;
    never_confirm_ = false;
  }
  /// How many messages were refused by an injected fault so far.
  [[nodiscard]] std::size_t failures_injected() const {
    std::lock_guard lock(mutex_);
    return injected_;
  }

  /// Fails the messages the faults pick (they never reach `Inner`) and publishes the rest
  /// through `Inner`: the results of both, reversed under `confirm_out_of_order`; none (at
  /// `until`) under `never_confirm`.
  std::vector<publish_result> publish(std::span<const message> batch,
                                      std::chrono::steady_clock::time_point until) {
    std::vector<publish_result> failed;
    std::vector<message> forward;
    bool reorder;
    bool silent;
    {
      std::lock_guard lock(mutex_);
      reorder = reorder_;
      silent = never_confirm_;
      for (const auto& m : batch) {
        if (fail_next_ > 0) {
          --fail_next_;
          ++injected_;
          failed.push_back(publish_result{m.id, false, fail_next_class_, "injected failure"});
        } else if (fail_when_ && fail_when_(m)) {
          ++injected_;
          failed.push_back(
              publish_result{m.id, false, fail_when_class_, "injected failure (predicate)"});
        } else {
          forward.push_back(m);
        }
      }
    }
    std::vector<publish_result> results;
    if (!forward.empty()) results = inner_->publish(forward, until);
    if (silent) {
      std::this_thread::sleep_until(until);
      return {};
    }
    results.insert(results.end(), std::make_move_iterator(failed.begin()),
                   std::make_move_iterator(failed.end()));
    if (reorder) std::reverse(results.begin(), results.end());
    return results;
  }

 private:
  Inner* inner_;
  mutable std::mutex mutex_;
  std::size_t fail_next_ = 0;
  errc fail_next_class_ = errc::transient;
  std::function<bool(const message&)> fail_when_;
  errc fail_when_class_ = errc::permanent;
  std::function<std::string(const message&)> route_by_;
  bool reorder_ = false;
  bool never_confirm_ = false;
  std::size_t injected_ = 0;
};

}  // namespace outbox::testing
