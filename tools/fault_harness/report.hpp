#pragma once
// The run's report: the faults that happened, the bound on wire duplicates they allow, and the
// table row with the ledger beside them.

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "args.hpp"
#include "basics.hpp"
#include "ledger.hpp"
#include "parts.hpp"
#include "run_files.hpp"

namespace fault_harness {

/// The run's first line: the pair, the seed and the flags that replay its schedule, and where
/// it runs.
inline void announce(const args& a, const std::string& pair_name, const std::string& where) {
  std::cerr << "fault_harness: " << pair_name << ", seed " << a.seed << " (replay: --store "
            << a.store << " --transport " << a.transport
            << (a.policy.empty() ? "" : " --policy " + a.policy) << " --seed " << a.seed
            << " --events " << a.events << " --relay-kills " << a.relay_kills
            << " --consumer-kills " << a.consumer_kills << " --db-kills " << a.db_kills
            << " --db-kill-targets " << a.db_kill_targets << " --aggregates " << a.aggregates
            << " --rate " << static_cast<long>(a.rate) << " --relay-faults " << a.relay_faults
            << " --consumer-faults " << a.consumer_faults << " --relays " << a.relays
            << " --poison " << a.poison << " --uncarriable " << a.uncarriable << " --storms "
            << a.storms << " --dedup-window " << a.dedup_window_s
            << (a.broker_outages > 0 ? " --broker-outages " + std::to_string(a.broker_outages) +
                                           " --broker-outage-kinds " + a.broker_outage_kinds
                                     : "")
            << (a.db_restarts > 0 ? " --db-restarts " + std::to_string(a.db_restarts) : "")
            << (a.plant.empty() ? "" : " --plant ") << a.plant << "), in " << a.dir << " and "
            << where << std::endl;
}

/// The faults of `parts` that happened, by kind ("none"); adds them to `total`, a sharp fault
/// not reached aside (it became a kill, counted as such).
inline std::string injected_kinds(const std::vector<part>& parts, int& total) {
  std::map<std::string, int> all;
  for (const part& p : parts)
    for (const auto& [k, v] : p.injected) {
      all[k] += v;
      if (!k.ends_with(" not reached")) total += v;  // it became a kill, counted as such
    }
  std::string s;
  for (const auto& [k, v] : all) s += (s.empty() ? "" : " ") + k + "=" + std::to_string(v);
  return s.empty() ? std::string("none") : s;
}

/// The relays' faults that killed a relay, and those that may put a relay batch on the wire
/// again (under the locking policy a pause too: the server cuts its transaction off).
struct relay_fault_count {
  int kills = 0;
  int batches = 0;
};

inline relay_fault_count count_relay_faults(const std::vector<part>& relays,
                                            const std::string& policy) {
  relay_fault_count n;
  for (const part& p : relays)
    for (const char* k : {"kill", "before-publish", "after-confirm", "pause"})
      if (const auto it = p.injected.find(k); it != p.injected.end()) {
        const bool kill = std::string_view(k) != "pause";
        n.kills += kill ? it->second : 0;
        n.batches += kill || policy == "locking" ? it->second : 0;
      }
  return n;
}

// What each fault may put on the wire again, at most: a relay killed (at random, before the
// publish, after the confirm) its unsettled batch; a database kill a batch (a relay's session
// cut mid-settle); a consumer fault the delivery it had not acked (prefetch 1; ZeroMQ: one or
// two acks lost with the process), 2 each (Kafka: its redeliveries are the same records
// again, counted apart as `redelivered`, see log_duplicate; a kill between a `d` logged and
// its position kept counts one `d` more); a fenced settle the message another relay took
// over and published again (pauses and clock jumps show here, not as a batch each); storm
// copies are counted apart. One batch more for the end of the run. More duplicates than that
// is a finding: a relay that settles too little or publishes twice, a consumer that acks too
// late.
// Under the locking policy a pause is not fenced but cut off by the server: its batch too.
// A server fault (broker or database away, consumers gone) cuts every relay's batch at once.
// And every error a relay backed off from, a batch: a publish that timed out whole in a
// broker outage may still land (Kafka), and a relay can try a batch more than once in one.
// Kafka's redeliveries of the same records are not bounded by a count per fault: a member
// commits what it acked every 20 ms (a kill loses the last 20 ms of acks, over 100 records
// at a catch-up's pace on SQLite), and the mock's coordinator refuses every commit while a
// rebalance is on (REBALANCE_IN_PROGRESS, the revocation's too), so all that a member
// applied from its assignment to its revocation comes again (seen: 3 such rounds in a row
// while a restarted member joined across a broker outage, 1407 duplicates of 2004 events).
inline long long wire_duplicate_bound(int relay_batches, int db_kills, int server_faults,
                                      int relays, long long relay_errors, int consumer_faults,
                                      long long fenced) {
  const long long per_consumer_fault = 2;
  return static_cast<long long>(relay_batch) *
             (relay_batches + db_kills + server_faults * relays + relay_errors + 1) +
         per_consumer_fault * consumer_faults + fenced;
}

/// What the table row shows beside the ledger.
struct run_counts {
  std::string pair_name;
  int relays = 0;
  int relay_total = 0;
  std::string relay_kinds;
  int relay_kills = 0;
  int consumer_total = 0;
  std::string consumer_kinds;
  std::string db_text;
  int storms_done = 0;
  int storms_missed = 0;
  long long storm_copies = 0;
  long long dups = 0;  ///< Wire duplicates.
  long long dup_bound = 0;
  long long relay_errors = 0;
  long long redelivered = 0;
  long long fenced = 0;
  double drain_s = -1;
  std::string server_text;
};

/// The table (a header and the run's row), and a line on the seed, the time and the writer.
inline void print_table(const args& a, const ledger& l, const run_counts& c, double run_s) {
  std::printf(
      "| pair | events | relays | relay faults | consumer faults | db kills | storms | lost "
      "| applied twice | order violations | rolled-back seen | wire duplicates | dead-lettered "
      "| fenced | drain s | server faults |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
      // pair, events, relays, relay faults, consumer faults, db kills, storms
      "| %s | %lld | %d | %d (%s; %d kills) | %d (%s) | %s | %d (%lld copies absorbed%s) "
      // lost, applied twice, order violations, rolled-back seen
      "| %lld | %lld | %lld | %lld "
      // wire duplicates, dead-lettered, fenced, drain s, server faults
      "| %lld (bound %lld, %lld relay errors%s) | %lld (expected %lld%s) | %lld | %.2f | %s |\n",
      c.pair_name.c_str(), l.committed, c.relays, c.relay_total, c.relay_kinds.c_str(),
      c.relay_kills, c.consumer_total, c.consumer_kinds.c_str(), c.db_text.c_str(), c.storms_done,
      c.storm_copies,
      c.storms_missed > 0 ? (", " + std::to_string(c.storms_missed) + " missed").c_str() : "",
      l.lost, l.applied_twice, l.order_violations, l.rolled_back_seen, c.dups, c.dup_bound,
      c.relay_errors,
      c.redelivered > 0
          ? ("; " + std::to_string(c.redelivered) + " same records redelivered").c_str()
          : "",
      l.dead, l.expected_dead,
      l.dead_unexpected + l.dead_missing > 0
          ? (", " + std::to_string(l.dead_unexpected) + " unexpected, " +
             std::to_string(l.dead_missing) + " missing")
                .c_str()
          : "",
      c.fenced, c.drain_s, c.server_text.c_str());
  std::printf(
      "seed %llu, %.1f s in all, %lld rolled-back events, writer: %lld attempts retried, %lld "
      "failed attempts found committed, plant: %s\n",
      static_cast<unsigned long long>(a.seed), run_s, l.rolled_back,
      count_lines_with(writer_log(a), "retry"), count_lines_with(writer_log(a), "landed"),
      a.plant.empty() ? "none" : a.plant.c_str());
  std::fflush(stdout);
}

}  // namespace fault_harness
