#pragma once
/// @file
/// When the log-tailing store claims from the outbox table instead of the stream.

#include <algorithm>
#include <chrono>
#include <functional>
#include <queue>
#include <vector>

#include <outbox/message.hpp>
#include <outbox/time.hpp>

namespace outbox::postgresql::detail {

/// The table is looked at once its next look is due: at once after a park or a release, at a
/// retry's, a deferral's or a scheduled event's time, else every poll. When the table and the
/// stream both have work they take turns, so a backlog of retries does not hold back the aggregates
/// that flow from the stream.
class tail_turns {
 public:
  /// Whether this claim goes to the table (`stream_ready`: the stream has events waiting).
  [[nodiscard]] bool table_first(time_point now, bool stream_ready) const noexcept {
    return now >= next_ && (table_turn_ || !stream_ready);
  }
  /// The table's claim returned work: the stream goes next.
  void table_served() noexcept { table_turn_ = false; }
  /// The stream's claim: the table goes next, when due.
  void stream_served() noexcept { table_turn_ = true; }
  /// The table had nothing due: the next look at `poll`, or at the earliest retry time known.
  void table_empty(time_point now, std::chrono::milliseconds poll) {
    next_ = now + poll;
    while (!retry_times_.empty() && retry_times_.top() <= now) retry_times_.pop();
    if (!retry_times_.empty()) next_ = std::min(next_, retry_times_.top());
  }
  /// Rows became claimable at `at` (a park, a release, a rescue: now; a retry: its time).
  void due_at(time_point at) { next_ = std::min(next_, at); }
  /// A retry parked for `at`: the table's claim does not know its time, so look then.
  void retry_at(time_point at) {
    retry_times_.push(at);
    due_at(at);
  }
  /// The fate `f` of a settle at `now` made rows claimable (a release: now; a deferral, a
  /// release with `retry_at` set, and a retry: at `retry_at`).
  void after(const settlement& f, time_point now) {
    if (f.what == settlement::kind::release && f.retry_at <= time_point{}) due_at(now);
    if (f.what == settlement::kind::retry ||
        (f.what == settlement::kind::release && f.retry_at > time_point{}))
      retry_at(f.retry_at);
  }

 private:
  time_point next_{};
  bool table_turn_ = false;
  // The times of events parked for a retry, a deferral or a schedule, not yet looked at, the
  // earliest on top (one per event: a heap, as scheduled events may be many).
  std::priority_queue<time_point, std::vector<time_point>, std::greater<>> retry_times_;
};

}  // namespace outbox::postgresql::detail
