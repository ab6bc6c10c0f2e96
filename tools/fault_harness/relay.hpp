#pragma once
// The relay (--role relay): outbox::relay over the pair's store and publisher, the publisher
// wrapped to fire the relay's sharp faults and play its planted defects; its counters in the
// run's directory, for the orchestrator's bound on wire duplicates.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <span>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <soci/soci.h>

#include <outbox/outbox.hpp>

#include "args.hpp"
#include "basics.hpp"
#include "concepts.hpp"
#include "database.hpp"
#include "signals.hpp"

namespace fault_harness {

/// Wraps the real publisher of the relay process: kills the process at an armed sharp point,
/// and plays the planted relay defect.
template <class Inner>
class harness_wire {
 public:
  harness_wire(Inner& inner, const std::string& plant)
      : inner_(&inner),
        mark_before_confirm_(plant == "mark-before-confirm"),
        drop_confirm_(plant == "drop-confirm"),
        publish_twice_(plant == "publish-twice") {}

  std::vector<outbox::publish_result> publish(std::span<const outbox::message> batch,
                                              steady::time_point until) {
    if (armed_usr1 != 0) die_here();  // claimed, nothing sent yet
    std::vector<outbox::publish_result> results;
    try {
      results = inner_->publish(batch, until);
      // The defect: every third batch goes on the wire twice.
      if (publish_twice_ && ++calls_ % 3 == 0) results = inner_->publish(batch, until);
    } catch (const outbox::error& e) {
      if (!mark_before_confirm_ || e.kind() != outbox::errc::transient) throw;
    }
    if (mark_before_confirm_) {  // the defect: whatever the wire said, "confirmed"
      results.clear();
      for (const auto& m : batch) results.push_back({.id = m.id, .confirmed = true});
    }
    if (drop_confirm_)  // the defect: every fourth confirm is lost, so the relay sends it again
      for (auto& r : results)
        if (r.confirmed && ++confirms_ % 4 == 0) r.confirmed = false;
    const bool confirmed =
        std::any_of(results.begin(), results.end(), [](const auto& r) { return r.confirmed; });
    if (armed_usr2 != 0 && confirmed) die_here();  // confirmed, not settled
    if (armed_pause != 0 && confirmed) {
      // Confirmed, not settled, and the process frozen (a stop-the-world pause, a VM stall, a
      // clock jumped past the lease): the orchestrator resumes it after the lease has run out,
      // another relay may have claimed the batch since, and this settle must be fenced.
      armed_pause = 0;
      ::raise(SIGSTOP);
    }
    return results;
  }

 private:
  Inner* inner_;
  bool mark_before_confirm_;
  bool drop_confirm_;
  bool publish_twice_;
  std::uint64_t calls_ = 0;
  std::uint64_t confirms_ = 0;
};

/// Relay `index`'s counters, rewritten as it runs (a SIGKILL loses at most the last 100 ms):
/// batches published retried dead_lettered released fenced errors.
inline std::string relay_stats_path(const args& a) {
  return a.dir + "/relay-" + std::to_string(a.index) + "-" + std::to_string(::getpid()) + ".stats";
}

inline void write_relay_stats(const args& a, const outbox::relay_stats& s) {
  const std::string path = relay_stats_path(a);
  const std::string tmp = path + ".tmp";
  if (FILE* f = std::fopen(tmp.c_str(), "w")) {
    std::fprintf(
        f, "%llu %llu %llu %llu %llu %llu %llu\n", static_cast<unsigned long long>(s.batches),
        static_cast<unsigned long long>(s.published), static_cast<unsigned long long>(s.retried),
        static_cast<unsigned long long>(s.dead_lettered),
        static_cast<unsigned long long>(s.released), static_cast<unsigned long long>(s.fenced),
        static_cast<unsigned long long>(s.errors));
    std::fclose(f);
    std::rename(tmp.c_str(), path.c_str());
  }
}

/// What every relay process of the run did without a confirm (from their stats files).
struct unconfirmed_work {
  long long errors = 0;  ///< Errors backed off from: a batch each, unconfirmed, at most.
  long long fenced = 0;  ///< Fenced settles: another relay took the message over.
};

inline unconfirmed_work relay_unconfirmed(const args& a) {
  unconfirmed_work total;
  for (const auto& entry : std::filesystem::directory_iterator(a.dir)) {
    if (entry.path().extension() != ".stats") continue;
    unsigned long long v[7] = {};
    if (FILE* f = std::fopen(entry.path().c_str(), "r")) {
      if (std::fscanf(f, "%llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                      &v[5], &v[6]) == 7) {
        total.fenced += static_cast<long long>(v[5]);
        total.errors += static_cast<long long>(v[6]);
      }
      std::fclose(f);
    }
  }
  return total;
}

template <class S, class T>
int run_relay(const args& a) {
  become_part();
  database<S> db(a);
  soci::session& sql = db.sql;
  auto relay_store = make_relay_store<S>(sql, a);
  auto& store = *relay_store;
  auto pub = T::publisher(a);
  harness_wire wire(pub, a.plant);
  // A short lease, so that a killed relay's batch comes back soon; attempts are not meant to
  // run out here (there is no poison event), so dead letters are a finding.
  outbox::relay relay(
      store, wire,
      {.batch_size = relay_batch,
       .lease = relay_lease,
       .publish_timeout = relay_publish_timeout,
       .idle_poll_min = 1ms,
       .idle_poll_max = 50ms,
       .on_error =
           [&a](const outbox::error& e) {
             trace("relay " + std::to_string(a.index) + " error: " + e.what());
           },
       .on_batch =
           [&a](const outbox::batch_report& b) {
             if (tracing()) {  // the events that will come again, to follow a late copy back
               for (std::size_t i = 0; i < b.fates.size(); ++i) {
                 if (b.fates[i].what == outbox::settlement::kind::retry)
                   trace("relay " + std::to_string(a.index) + " retry " +
                         b.messages[i].payload.substr(0, 40) + " attempt " +
                         std::to_string(b.messages[i].attempts) + " in " +
                         std::to_string((b.fates[i].retry_at - jumping_clock{}.now()) / 1ms) +
                         " ms: " + b.fates[i].error);
                 else if (b.fates[i].what == outbox::settlement::kind::published &&
                          b.messages[i].attempts > 1)
                   trace("relay " + std::to_string(a.index) + " published " +
                         b.messages[i].payload.substr(0, 40) + " at attempt " +
                         std::to_string(b.messages[i].attempts));
               }
             }
             if (b.claim + b.publish + b.settle > 500ms)
               trace("relay " + std::to_string(a.index) + " slow batch of " +
                     std::to_string(b.messages.size()) + ": claim " +
                     std::to_string(b.claim / 1ms) + " ms, publish " +
                     std::to_string(b.publish / 1ms) + " ms, settle " +
                     std::to_string(b.settle / 1ms) + " ms");
           }},
      outbox::exponential_backoff{
          .initial = 20ms, .max_delay = relay_max_retry_delay, .max_attempts = 1000},
      jumping_clock{});
  std::exception_ptr failure;
  std::jthread worker([&](std::stop_token st) {
    try {
      relay.run(st);
    } catch (...) {
      failure = std::current_exception();
    }
  });
  std::uint64_t traced_published = 0;
  for (int tick = 0; stop_requested == 0 && !failure; ++tick) {
    std::this_thread::sleep_for(10ms);
    if (tick % 10 == 0) write_relay_stats(a, relay.stats());
    if (tick % 100 == 0 && tracing() && relay.stats().published != traced_published) {
      traced_published = relay.stats().published;
      trace("relay " + std::to_string(a.index) + " published " + std::to_string(traced_published));
    }
  }
  worker.request_stop();
  relay.wake();
  worker.join();
  write_relay_stats(a, relay.stats());
  if (failure) std::rethrow_exception(failure);
  return exit_ok;
}

}  // namespace fault_harness
