#pragma once
/// @file
/// A fault-injecting receiver double: wrap any receiver and feed the consumer copies of what it
/// delivered before (a duplicate storm), as a broker that redelivers, or a relay that resends
/// after a crash, would. The consumer's inbox must absorb every copy.

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>

#include <outbox/concepts/transport.hpp>
#include <outbox/message.hpp>

namespace outbox::testing {

/// Wraps `Inner` (a `concepts::receiver`) and keeps its last `keep` deliveries. After
/// `storm(rounds)`, the next `receive` calls hand out copies of them, `rounds` times each in the
/// order they came, before any new delivery. A copy is the delivery as it came (same message,
/// marked `redelivered`) with a tag of its own (from `copy_tags` up); its ack goes nowhere, since
/// the transport owes nothing for it, and a nack with requeue hands it out again next, as a
/// broker redelivers what is requeued (a consumer holds its aggregate back until it comes). The
/// inner receiver's `max_held()`, when it has one, is this one's: a consumer holds back fewer
/// deliveries than the transport hands out unacknowledged.
///
/// Threading: as `Inner` (one consumer thread); `storm` may be called from any thread (or a
/// signal handler: it only stores to a lock-free atomic).
template <concepts::receiver Inner>
class duplicating_receiver {
 public:
  /// Copies carry tags from here up, far above any tag a receiver of this library hands out
  /// (they count up from 1).
  static constexpr std::uint64_t copy_tags = std::uint64_t{1} << 62;

  /// Wraps `inner`, which must outlive it, keeping its last `keep` deliveries (0: none, so a
  /// storm hands out nothing).
  explicit duplicating_receiver(Inner& inner, std::size_t keep = 32)
      : inner_(&inner), keep_(keep) {}

  /// Arms a storm: the kept deliveries, `rounds` times each, before the next real one.
  void storm(int rounds = 10) noexcept { pending_rounds_.store(rounds, std::memory_order_relaxed); }

  /// The next copy while a storm lasts; otherwise the next delivery of the inner receiver
  /// (kept for later storms).
  std::optional<delivery> receive(std::chrono::milliseconds timeout) {
    if (const int rounds = pending_rounds_.exchange(0, std::memory_order_relaxed); rounds > 0)
      for (int r = 0; r < rounds; ++r) queue_.insert(queue_.end(), recent_.begin(), recent_.end());
    if (!requeued_.empty() || !queue_.empty()) {
      auto& from = requeued_.empty() ? queue_ : requeued_;
      delivery d = std::move(from.front());
      from.pop_front();
      d.tag = copy_tags + copies_++;
      d.redelivered = true;
      last_was_copy_ = true;
      return d;
    }
    last_was_copy_ = false;
    auto d = inner_->receive(timeout);
    if (d && keep_ > 0) {
      recent_.push_back(*d);
      if (recent_.size() > keep_) recent_.pop_front();
    }
    return d;
  }
  /// Acks `d` on the inner receiver, unless it is a copy.
  void ack(const delivery& d) {
    if (!is_copy(d)) inner_->ack(d);
  }
  /// Nacks `d` on the inner receiver; a copy nacked with requeue is handed out again next
  /// (copies requeued one after another come back in that order, as a broker keeps them).
  void nack(const delivery& d, bool requeue) {
    if (!is_copy(d))
      inner_->nack(d, requeue);
    else if (requeue)
      requeued_.push_back(d);
  }
  /// The inner receiver's: how many deliveries it hands out unacknowledged at most.
  [[nodiscard]] std::size_t max_held() const requires requires(const Inner& r) {
    { r.max_held() } -> std::convertible_to<std::size_t>;
  }
  { return inner_->max_held(); }

  /// True when `d` is a copy this wrapper handed out (its tag is at least `copy_tags`).
  [[nodiscard]] static bool is_copy(const delivery& d) noexcept { return d.tag >= copy_tags; }
  /// Whether the last delivery `receive` handed out was a copy.
  [[nodiscard]] bool last_was_copy() const noexcept { return last_was_copy_; }
  /// Deliveries kept to copy in a storm (none before the first real one).
  [[nodiscard]] std::size_t kept() const noexcept { return recent_.size(); }
  /// Copies handed out so far.
  [[nodiscard]] std::uint64_t copies() const noexcept { return copies_; }

 private:
  Inner* inner_;
  std::size_t keep_;
  std::atomic<int> pending_rounds_{0};
  std::deque<delivery> recent_;
  std::deque<delivery> queue_;
  std::deque<delivery> requeued_;  ///< Copies nacked with requeue: handed out first, in order.
  std::uint64_t copies_ = 0;
  bool last_was_copy_ = false;
};

}  // namespace outbox::testing
