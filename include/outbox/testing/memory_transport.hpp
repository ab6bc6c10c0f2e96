#pragma once
/// @file
/// The in-memory transport: the reference implementation of `concepts::transport` and
/// `concepts::receiver`, for tests and for embedding (relay and consumer in one process).

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <outbox/cloudevents.hpp>
#include <outbox/concepts/transport.hpp>
#include <outbox/message.hpp>

namespace outbox::testing {

/// Options of the in-memory transport.
struct memory_transport_options {
  /// Simulated broker confirm round trip, paid once per `publish` call (confirms are pipelined,
  /// as with a real broker). 100 microseconds is the order of a broker on loopback.
  std::chrono::microseconds confirm_latency{0};
  bool deliver = true;  ///< Queue published messages for `receive`; false = a sink (benchmarks).
  /// Keep a copy of every published message for `wire()` and `redeliver` (tests). Off by
  /// default: an embedded transport, or a benchmark's, must not grow without bound. Without it
  /// those calls throw `std::logic_error` rather than answer "nothing was published".
  bool record = false;
  /// CloudEvents written by `publish` (off by default). The in-memory wire layout: binary mode
  /// a message whose headers are `ce-<attribute>` (`datacontenttype` in `content_type`), with
  /// the payload; structured mode the JSON envelope as payload, content type
  /// `application/cloudevents+json`. Either is read back by `receive` (`read_cloudevents`).
  cloudevents_options cloudevents{};
  /// `receive` reads CloudEvents (both modes, and plain messages); implied by a `cloudevents`
  /// mode other than `off`. A delivery that is not an event is dropped and counted.
  bool read_cloudevents = false;
};

/// The header prefix of CloudEvents attributes on the in-memory transport.
inline constexpr std::string_view memory_cloudevents_prefix = "ce-";

/// A broker in a box: `publish` confirms every message (after the simulated latency) and queues
/// it; `receive` hands out deliveries that stay unacknowledged until `ack`; `nack` with requeue,
/// and `crash_consumer`, put them back (marked redelivered). Thread-safe.
class memory_transport {
 public:
  /// A transport with `options` (by default: no latency, delivers, records nothing).
  /// @throws outbox::error `misconfigured` for a CloudEvents `source` that is not a URI reference.
  explicit memory_transport(memory_transport_options options = {})
      : options_(std::move(options)), ce_(options_.cloudevents, "memory") {
    options_.read_cloudevents = options_.read_cloudevents || ce_.on();
  }

  /// Capability (concepts::order_keeping_transport): one queue, and a call's confirms come all
  /// together or not at all.
  static constexpr bool keeps_publish_order = true;

  /// Queues every message of `batch` (when `deliver`) and confirms them all after
  /// `confirm_latency`; when that would pass `until`, returns at `until` with no result (the
  /// messages are queued all the same).
  std::vector<publish_result> publish(std::span<const message> batch,
                                      std::chrono::steady_clock::time_point until) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<publish_result> refused;
    {
      std::lock_guard lock(mutex_);
      for (const auto& m : batch) {
        if (ce_.on()) {
          if (auto why = ce_.unmappable(m); !why.empty()) {
            refused.push_back({m.id, false, errc::permanent, "CloudEvents: " + std::move(why)});
            continue;
          }
          message w = ce_.to_layout(m, memory_cloudevents_prefix);
          if (options_.record) wire_.push_back(w);
          if (options_.deliver) queue_.push_back(entry{std::move(w), false});
        } else {
          if (options_.record) wire_.push_back(m);
          if (options_.deliver) queue_.push_back(entry{m, false});
        }
        ++published_;
      }
    }
    if (options_.deliver) cv_.notify_all();
    if (options_.confirm_latency.count() > 0) {
      const auto confirmed_at = start + options_.confirm_latency;
      if (confirmed_at > until) {  // the confirms would arrive too late: a timeout
        std::this_thread::sleep_until(until);
        return {};
      }
      std::this_thread::sleep_until(confirmed_at);
    }
    std::vector<publish_result> results;
    results.reserve(batch.size());
    for (const auto& m : batch)
      if (std::none_of(refused.begin(), refused.end(), [&](const auto& r) { return r.id == m.id; }))
        results.push_back(publish_result{m.id, true, {}, {}});
    results.insert(results.end(), refused.begin(), refused.end());
    return results;
  }

  /// The next queued delivery, unacknowledged until `ack` or `nack`; `nullopt` after `timeout`.
  std::optional<delivery> receive(std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    std::unique_lock lock(mutex_);
    for (;;) {
      if (!cv_.wait_until(lock, until, [&] { return !queue_.empty(); })) return std::nullopt;
      entry e = std::move(queue_.front());
      queue_.pop_front();
      delivery d{e.msg, 0, e.redelivered};
      if (options_.read_cloudevents) {
        if (auto why = decode_layout(e.msg, memory_cloudevents_prefix, d.msg);
            !why.empty()) {  // dropped, as a broker would
          ++malformed_;
          last_malformed_ = std::move(why);
          continue;
        }
      }
      d.tag = ++next_tag_;
      unacked_.emplace(d.tag, std::move(e.msg));  // the wire form, decoded again if requeued
      return d;
    }
  }

  /// Forgets the unacknowledged delivery `d`; nothing happens for an unknown tag.
  void ack(const delivery& d) {
    std::lock_guard lock(mutex_);
    unacked_.erase(d.tag);
  }

  /// With `requeue`, puts `d` back at the head of the queue, marked redelivered; otherwise drops
  /// it (there is no dead-letter route). Nothing happens for an unknown tag.
  void nack(const delivery& d, bool requeue) {
    {
      std::lock_guard lock(mutex_);
      auto it = unacked_.find(d.tag);
      if (it == unacked_.end()) return;
      // Back at the head, as a broker requeues to the original position.
      if (requeue) queue_.push_front(entry{std::move(it->second), true});
      unacked_.erase(it);
    }
    cv_.notify_all();
  }

  // ---- test controls -------------------------------------------------------------------------

  /// Every message published so far, in wire order.
  /// @throws std::logic_error when the transport does not record (`{.record = true}`).
  [[nodiscard]] std::vector<message> wire() const {
    require_record("wire()");
    std::lock_guard lock(mutex_);
    return wire_;
  }
  /// How many messages were published so far (counted whether or not they are recorded).
  [[nodiscard]] std::size_t published_count() const {
    std::lock_guard lock(mutex_);
    return published_;
  }
  /// How many deliveries wait in the queue for `receive`.
  [[nodiscard]] std::size_t queued() const {
    std::lock_guard lock(mutex_);
    return queue_.size();
  }
  /// How many deliveries were handed out and are neither acked nor nacked yet.
  [[nodiscard]] std::size_t unacked() const {
    std::lock_guard lock(mutex_);
    return unacked_.size();
  }
  /// Delivers a copy of an already published message once more (a duplicate delivery).
  /// @returns false if no such message was published.
  /// @throws std::logic_error when the transport does not record (`{.record = true}`).
  bool redeliver(const uuid& id) {
    require_record("redeliver()");
    {
      std::lock_guard lock(mutex_);
      auto it =
          std::find_if(wire_.begin(), wire_.end(), [&](const message& m) { return m.id == id; });
      if (it == wire_.end()) return false;
      queue_.push_back(entry{*it, true});
    }
    cv_.notify_all();
    return true;
  }
  /// Deliveries `receive` dropped as not events (CloudEvents without a required attribute...).
  [[nodiscard]] std::size_t malformed() const {
    std::lock_guard lock(mutex_);
    return malformed_;
  }
  /// Why the last delivery counted in `malformed` was dropped.
  [[nodiscard]] std::string last_malformed() const {
    std::lock_guard lock(mutex_);
    return last_malformed_;
  }
  /// Simulates a consumer that died: every unacknowledged delivery is queued again.
  void crash_consumer() {
    {
      std::lock_guard lock(mutex_);
      std::vector<std::pair<std::uint64_t, message>> pending(unacked_.begin(), unacked_.end());
      std::sort(pending.begin(), pending.end(),
                [](const auto& a, const auto& b) { return a.first > b.first; });
      for (auto& [tag, m] : pending) queue_.push_front(entry{std::move(m), true});
      unacked_.clear();
    }
    cv_.notify_all();
  }

 private:
  struct entry {
    message msg;
    bool redelivered;
  };

  /// A lookup of what was published, on a transport that kept nothing, would answer "nothing":
  /// users counted 0 messages and chased stalls that did not exist. So it fails loudly.
  void require_record(const char* call) const {
    if (!options_.record)
      throw std::logic_error(
          std::string("memory_transport::") + call +
          " needs the published messages, and this transport keeps none: construct it with "
          "memory_transport({.record = true}) (off by default, so that an embedded transport "
          "does not grow without bound); published_count() counts without it");
  }

  memory_transport_options options_;
  cloudevents ce_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<entry> queue_;
  std::unordered_map<std::uint64_t, message> unacked_;
  std::vector<message> wire_;
  std::size_t published_ = 0;
  std::uint64_t next_tag_ = 0;
  std::size_t malformed_ = 0;
  std::string last_malformed_{};
};

static_assert(concepts::transport<memory_transport>);
static_assert(concepts::receiver<memory_transport>);

}  // namespace outbox::testing
