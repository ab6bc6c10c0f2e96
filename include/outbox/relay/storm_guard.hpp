#pragma once
/// @file
/// The relay's storm guard: when one route (a transport's destination: a Kafka topic, an AMQP
/// exchange and routing key) dead-letters more than `max_dead` messages for a permanent
/// transport error within `window`, the relay stops publishing to it, keeps its events pending,
/// and tries it again after a growing pause. No I/O; `relay::publish_batch` calls it.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <outbox/concepts/transport.hpp>
#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/uuid.hpp>

namespace outbox {

/// A route's change of state, as the storm guard reports it (`storm_guard_options::on_change`).
struct route_change {
  std::string route;         ///< The route (`concepts::routing_transport`; "" = the transport).
  bool paused = false;       ///< true: paused (or its probe failed); false: resumed.
  bool probe = false;        ///< When paused: by a failed probe (paused again, longer).
  std::size_t dead = 0;      ///< Dead letters of the route in the window when it was paused.
  time_point until{};        ///< When paused: when the route is tried again (a probe).
  std::string last_error{};  ///< When paused: the transport's error that tripped the guard.
};

/// A route the guard holds paused (`storm_guard::paused`).
struct paused_route {
  std::string route;         ///< As `route_change::route`.
  time_point until{};        ///< When its events are tried again (one batch: the probe).
  std::string last_error{};  ///< The error that paused it (or failed its last probe).
};

/// The storm guard's settings (`relay_options::storm_guard`). On by default: more than 100 dead
/// letters of one route in 60 s pause it for 30 s, doubling after each failed probe up to 10
/// min. `max_dead = 0` turns the guard off.
struct storm_guard_options {
  /// Dead letters (permanent transport errors) of one route within `window` that are let
  /// through; one more pauses the route. 0: no guard.
  std::size_t max_dead = 100;
  std::chrono::milliseconds window{60'000};      ///< The window the dead letters are counted in.
  std::chrono::milliseconds pause{30'000};       ///< The first pause of a route.
  std::chrono::milliseconds max_pause{600'000};  ///< Pauses double per failed probe up to this.
  /// Called on the relay's thread when a route is paused, its probe fails, or it resumes (for
  /// logs); must not throw.
  std::function<void(const route_change&)> on_change{};
};

/// The route of `m` on `t`: `t.route(m)`, or "" for a transport that names none (or throws).
template <class Transport>
std::string route_of(Transport& t, const message& m) {
  if constexpr (concepts::routing_transport<Transport>) {
    try {
      return std::string(t.route(m));
    } catch (...) {  // NOLINT(bugprone-empty-catch): the whole transport, then
    }
  }
  return {};
}

/// Counts dead letters per route and pauses the routes that dead-letter too much. A paused
/// route's messages are deferred to the end of the pause (a `release` with `retry_at`: they stay
/// pending, in the backlog's `pending` and `waiting_retry` (a row with no last error gets
/// `deferred: route "R" is paused by the storm guard` as one), and hold their aggregates back
/// as a retry does, but spend no attempt, so a route paused for hours dead-letters nothing by
/// the retry policy); the first batch after the pause
/// is the probe: a confirm on the route resumes it, a permanent failure pauses it again for
/// twice as long (the probed messages are deferred too, their attempt given back). While a
/// route is paused or probed, none of its messages is dead-lettered for a permanent error: at
/// most `max_dead` dead letters per storm. The state is the relay process's, in memory: a
/// restarted relay starts with no route paused (and lets `max_dead` through again).
/// Thread-safe: the relay's thread updates it, any thread reads it.
template <class Transport>
class storm_guard {
 public:
  /// @throws outbox::error `misconfigured` when `window`, `pause` or `max_pause` is not positive
  ///         or `max_pause` < `pause`.
  storm_guard(Transport& transport, storm_guard_options options)
      : transport_(&transport), options_(std::move(options)) {
    if (options_.max_dead != 0 && (options_.window.count() <= 0 || options_.pause.count() <= 0 ||
                                   options_.max_pause < options_.pause))
      throw error(errc::misconfigured, "core", {},
                  "relay_options.storm_guard: window and pause must be positive and max_pause at "
                  "least pause");
  }

  /// Of `msgs[0, sendable)`, moves the messages of paused routes behind the others (stable) and
  /// defers them to the end of the pause in `fates` (same indexes: a `release` with `retry_at`);
  /// their aggregates join `held` (the relay then sends no later message of them). Returns how
  /// many lead: to send.
  std::size_t set_aside(std::vector<message>& msgs, std::size_t sendable,
                        std::span<settlement> fates, time_point now,
                        std::unordered_set<std::string>& held) {
    if (options_.max_dead == 0) return sendable;
    std::lock_guard lock(mutex_);
    if (std::none_of(routes_.begin(), routes_.end(),
                     [&](const auto& r) { return r.second.paused_until > now; }))
      return sendable;
    std::vector<time_point> until(sendable);
    std::vector<const std::string*> route(sendable);
    for (std::size_t i = 0; i < sendable; ++i) {
      const auto it = routes_.find(route_of(*transport_, msgs[i]));
      if (it == routes_.end() || it->second.paused_until <= now) continue;
      until[i] = it->second.paused_until;
      route[i] = &it->first;
    }
    std::vector<std::size_t> order(sendable);
    for (std::size_t i = 0; i < sendable; ++i) order[i] = i;
    const auto mid = std::stable_partition(order.begin(), order.end(),
                                           [&](std::size_t i) { return until[i] == time_point{}; });
    std::vector<message> arranged;
    arranged.reserve(sendable);
    for (const std::size_t i : order) arranged.push_back(std::move(msgs[i]));
    std::move(arranged.begin(), arranged.end(), msgs.begin());
    const auto lead = static_cast<std::size_t>(mid - order.begin());
    for (std::size_t k = lead; k < sendable; ++k) {
      // Deferred: no attempt.
      fates[k] = settlement{settlement::kind::release, until[order[k]], deferral(*route[order[k]])};
      held.insert(detail::aggregate_key(msgs[k]));
    }
    return lead;
  }

  /// After a publish call: `fates` (decided, index-aligned with `sent`) and the transport's
  /// `results`. A confirm resumes its route; a permanent failure counts as a dead letter of its
  /// route, and past `max_dead` in the window (or on a route paused or probed) is deferred to
  /// the end of a new pause instead (a `release` with `retry_at`: its attempt given back).
  void after_publish(std::span<const message> sent, std::span<const publish_result> results,
                     std::span<settlement> fates, time_point now) {
    if (options_.max_dead == 0 || results.empty()) return;
    // The usual call (nothing failed for good, no route paused) costs a scan: no route names.
    const bool refused = std::any_of(results.begin(), results.end(), [](const auto& r) {
      return !r.confirmed && r.error_class == errc::permanent;
    });
    std::vector<route_change> changes;
    {
      std::lock_guard lock(mutex_);
      const bool tripped = std::any_of(routes_.begin(), routes_.end(),
                                       [](const auto& r) { return r.second.tripped; });
      if (!refused && !tripped) return;
      std::unordered_map<uuid, const publish_result*> by_id;
      by_id.reserve(results.size());
      for (const auto& r : results) by_id.emplace(r.id, &r);
      std::vector<std::string> names(sent.size());
      for (std::size_t i = 0; i < sent.size(); ++i) {
        if (fates[i].what != settlement::kind::published && fates[i].what != settlement::kind::dead)
          continue;
        names[i] = route_of(*transport_, sent[i]);
        if (!tripped || fates[i].what != settlement::kind::published) continue;
        const auto it = routes_.find(names[i]);
        if (it == routes_.end() || !it->second.tripped) continue;
        it->second = route_state{};  // a confirm: the route works again
        changes.push_back(route_change{names[i], false, false, 0, {}, {}});
      }
      for (std::size_t i = 0; i < sent.size(); ++i) {
        const auto r = by_id.find(sent[i].id);
        if (fates[i].what != settlement::kind::dead || r == by_id.end() ||
            r->second->error_class != errc::permanent)
          continue;
        route_state& s = routes_[names[i]];
        if (!s.tripped) {
          while (!s.dead.empty() && s.dead.front() + options_.window <= now) s.dead.pop_front();
          if (s.dead.size() < options_.max_dead) {
            s.dead.push_back(now);
            continue;
          }
          s.tripped = true;
          s.pause = options_.pause;
          s.paused_until = now + s.pause;
          s.last_error = fates[i].error;
          changes.push_back(
              route_change{names[i], true, false, s.dead.size(), s.paused_until, s.last_error});
        } else if (s.paused_until <= now) {  // the probe failed: a longer pause
          s.pause = std::min(s.pause * 2, options_.max_pause);
          s.paused_until = now + s.pause;
          s.last_error = fates[i].error;
          changes.push_back(route_change{names[i], true, true, 0, s.paused_until, s.last_error});
        }
        fates[i] = settlement{settlement::kind::release, s.paused_until, deferral(names[i])};
      }
      prune(now);
    }
    if (options_.on_change)
      for (const auto& c : changes) options_.on_change(c);
  }

  /// How many routes are paused or awaiting their probe (for a gauge).
  [[nodiscard]] std::size_t paused_count() const {
    std::lock_guard lock(mutex_);
    return static_cast<std::size_t>(std::count_if(routes_.begin(), routes_.end(),
                                                  [](const auto& r) { return r.second.tripped; }));
  }

  /// The routes paused or awaiting their probe, by name.
  [[nodiscard]] std::vector<paused_route> paused() const {
    std::lock_guard lock(mutex_);
    std::vector<paused_route> out;
    for (const auto& [name, s] : routes_)
      if (s.tripped) out.push_back(paused_route{name, s.paused_until, s.last_error});
    return out;
  }

 private:
  struct route_state {
    std::deque<time_point> dead;  // dead letters in the window, oldest first
    bool tripped = false;         // paused, or awaiting the probe after the pause
    std::chrono::milliseconds pause{0};
    time_point paused_until{};
    std::string last_error;
  };

  /// The last error a deferral by the guard gives a row that has none (it tells the stores'
  /// stats a deferred row from a scheduled event: `settlement::retry_at`).
  static std::string deferral(const std::string& route) {
    return "deferred: route \"" + route + "\" is paused by the storm guard";
  }

  /// Forgets the routes that are neither paused nor have a dead letter in the window, once
  /// there are many (a route per aggregate type would otherwise grow without bound).
  void prune(time_point now) {
    if (routes_.size() < 256) return;
    std::erase_if(routes_, [&](const auto& r) {
      return !r.second.tripped &&
             (r.second.dead.empty() || r.second.dead.back() + options_.window <= now);
    });
  }

  Transport* transport_;
  storm_guard_options options_;
  mutable std::mutex mutex_;
  std::map<std::string, route_state> routes_;
};

}  // namespace outbox
