#pragma once
// Commit-to-confirm latency for the benchmarks: a transport wrapper that notes when each message
// was confirmed, and percentiles of the delays (a run in which an event went unconfirmed exits 1).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <soci/soci.h>

#include <outbox/message.hpp>
#include <outbox/uuid.hpp>

namespace outbox::bench {

using steady = std::chrono::steady_clock;

/// A transport that notes when each message was confirmed.
template <class Inner>
class timing_transport {
 public:
  explicit timing_transport(Inner& inner) : inner_(&inner) {}

  std::vector<outbox::publish_result> publish(std::span<const outbox::message> batch,
                                              steady::time_point until) {
    auto results = inner_->publish(batch, until);
    const auto now = steady::now();
    std::lock_guard lock(mutex_);
    for (const auto& r : results)
      if (r.confirmed) confirmed_at_.emplace(r.id, now);
    return results;
  }
  std::unordered_map<outbox::uuid, steady::time_point> confirmed() {
    std::lock_guard lock(mutex_);
    return confirmed_at_;
  }

 private:
  Inner* inner_;
  std::mutex mutex_;
  std::unordered_map<outbox::uuid, steady::time_point> confirmed_at_;
};

struct percentiles {
  double p50 = 0, p99 = 0, max = 0;
  std::size_t n = 0;
};

inline percentiles summarize(std::vector<double> ms, long total) {
  std::sort(ms.begin(), ms.end());
  percentiles p;
  p.n = ms.size();
  if (!ms.empty()) {
    p.p50 = ms[ms.size() / 2];
    p.p99 = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
    p.max = ms.back();
  }
  if (p.n != static_cast<std::size_t>(total)) {
    std::cerr << "bench: only " << p.n << " of " << total
              << " events confirmed: the run is invalid\n";
    std::exit(1);
  }
  return p;
}

/// When each event's commit returned.
using commit_times = std::vector<std::pair<outbox::uuid, steady::time_point>>;

/// Runs `commit_one(i)` (one transaction writing event `i`, returning its id) `seconds * rate`
/// times at a steady rate, noting when each returned.
template <class CommitOne>
commit_times steady_commits(double seconds, double rate, CommitOne&& commit_one) {
  commit_times committed;
  const auto interval = std::chrono::duration<double>(1.0 / rate);
  const auto total = static_cast<long>(seconds * rate);
  committed.reserve(static_cast<std::size_t>(total));
  const auto start = steady::now();
  for (long i = 0; i < total; ++i) {
    std::this_thread::sleep_until(start +
                                  std::chrono::duration_cast<steady::duration>(interval * i));
    const outbox::uuid id = commit_one(i);
    committed.emplace_back(id, steady::now());
  }
  return committed;
}

/// The commit-to-confirm delays of `committed`, by the confirm times a `timing_transport` noted.
inline percentiles commit_to_confirm(
    const commit_times& committed,
    const std::unordered_map<outbox::uuid, steady::time_point>& confirmed) {
  std::vector<double> ms;
  for (const auto& [id, at] : committed)
    if (auto it = confirmed.find(id); it != confirmed.end())
      ms.push_back(std::chrono::duration<double, std::milli>(it->second - at).count());
  return summarize(std::move(ms), static_cast<long>(committed.size()));
}

/// Event `i` of a latency run, in a transaction of its own on `app`; returns its id.
template <class Writer>
outbox::uuid commit_one_event(soci::session& app, Writer& w, long i) {
  soci::transaction tx(app);
  const auto id = w.enqueue(app, outbox::event{"order", std::to_string(i), "order_placed",
                                               R"({"n":)" + std::to_string(i) + "}"});
  tx.commit();
  return id;
}

/// The same through the writer's transaction (`writer::begin`): the event sent with COMMIT.
template <class Writer>
outbox::uuid commit_one_event_with_commit(soci::session& app, Writer& w, long i) {
  auto tx = w.begin(app);
  const auto id = tx.enqueue(outbox::event{"order", std::to_string(i), "order_placed",
                                           R"({"n":)" + std::to_string(i) + "}"});
  tx.commit();
  return id;
}

/// Commit to confirm through `relay` (run on its own thread meanwhile), which publishes through
/// `transport`: events written by `w` on `app` at `rate` per second for `seconds`, each by
/// `enqueue` in a transaction of its own, or with `with_commit` through the writer's
/// transaction.
template <class Relay, class Inner, class Writer>
percentiles relay_latency(Relay& relay, timing_transport<Inner>& transport, soci::session& app,
                          Writer& w, double seconds, double rate, bool with_commit = false) {
  std::jthread runner([&](std::stop_token st) { relay.run(st); });
  const auto committed = steady_commits(seconds, rate, [&](long i) {
    return with_commit ? commit_one_event_with_commit(app, w, i) : commit_one_event(app, w, i);
  });
  const auto deadline = steady::now() + std::chrono::seconds(10);
  while (relay.stats().published < committed.size() && steady::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  runner.request_stop();
  runner.join();
  return commit_to_confirm(committed, transport.confirmed());
}

}  // namespace outbox::bench
