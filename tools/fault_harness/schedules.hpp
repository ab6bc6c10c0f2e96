#pragma once
// The schedules: which faults a run injects and when (a threshold of events plus a delay), all
// drawn from the seed in a fixed order, so that a seed replays its schedule.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "args.hpp"
#include "basics.hpp"

namespace fault_harness {

enum class fault_kind { kill, sharp_usr1, sharp_usr2, pause, clock_jump };

struct fault {
  fault_kind kind = fault_kind::kill;
  long threshold = 0;                 ///< Applied events before it is due.
  std::chrono::milliseconds delay{};  ///< After the threshold and after the part's start.
  std::chrono::milliseconds down{};   ///< Consumer: how long it stays down.
};

inline const char* fault_name(fault_kind k, bool consumer) {
  if (k == fault_kind::kill) return "kill";
  if (k == fault_kind::pause) return "pause";
  if (k == fault_kind::clock_jump) return "clock-jump";
  if (k == fault_kind::sharp_usr1) return consumer ? "before-ack" : "before-publish";
  return consumer ? "in-tx" : "after-confirm";
}

/// The faults of one part, in order, from the seed: kinds dealt in turn from `kinds` (names as
/// fault_name gives them, comma-separated).
inline std::vector<fault> schedule(std::mt19937_64& rng, long events, int count, bool consumer,
                                   const std::string& kinds) {
  std::vector<fault_kind> allowed;
  for (auto k : {fault_kind::kill, fault_kind::sharp_usr1, fault_kind::sharp_usr2,
                 fault_kind::pause, fault_kind::clock_jump})
    if ((!consumer || (k != fault_kind::pause && k != fault_kind::clock_jump)) &&
        listed(kinds, fault_name(k, consumer)))
      allowed.push_back(k);
  if (allowed.empty()) usage("no known fault kind in '" + kinds + "'");
  std::vector<fault> out(static_cast<std::size_t>(count));
  std::uniform_int_distribution<long> at(events / 20, events * 17 / 20);
  // The kinds are dealt in turn (from a place drawn from the seed), not drawn each: every kind
  // gets count / kinds of the faults or one more, so that a run is sure of its kills (CI: 18
  // relay faults of 5 kinds, at least 10 of them kills), whatever the seed.
  std::size_t turn = rng() % allowed.size();
  for (auto& f : out) {
    f.kind = allowed[turn++ % allowed.size()];
    f.threshold = at(rng);
    f.delay = std::chrono::milliseconds(rng() % 300);
    f.down = consumer ? std::chrono::milliseconds(100 + rng() % 500) : 0ms;
  }
  std::sort(out.begin(), out.end(),
            [](const fault& x, const fault& y) { return x.threshold < y.threshold; });
  return out;
}

/// A database kill: every session of `target` (relay, consumer or writer) terminated by the
/// orchestrator (pg_terminate_backend), once `threshold` events are applied and `delay` passed.
struct db_kill {
  std::string target;
  long threshold = 0;
  std::chrono::milliseconds delay{};
};

inline std::vector<db_kill> schedule_db_kills(std::mt19937_64& rng, long events, int count,
                                              const std::string& kinds) {
  std::vector<std::string> targets;
  for (const char* t : {"relay", "consumer", "writer", "writer-commit"})
    if (listed(kinds, t)) targets.emplace_back(t);
  if (targets.empty()) usage("no known role in --db-kill-targets '" + kinds + "'");
  std::vector<db_kill> out(static_cast<std::size_t>(count));
  // The writer is done when about all events are written, so the kills fall in the first 3/4.
  std::uniform_int_distribution<long> at(events / 20, events * 3 / 4);
  for (auto& k : out) {
    k.target = targets[rng() % targets.size()];
    k.threshold = at(rng);
    k.delay = std::chrono::milliseconds(rng() % 300);
  }
  std::sort(out.begin(), out.end(),
            [](const db_kill& x, const db_kill& y) { return x.threshold < y.threshold; });
  return out;
}

/// A duplicate storm: consumer `target` fed its last deliveries again (sig_storm), once
/// `threshold` events are applied and `delay` passed.
struct storm {
  std::size_t target = 0;
  long threshold = 0;
  std::chrono::milliseconds delay{};
};

inline std::vector<storm> schedule_storms(std::mt19937_64& rng, long events, int count,
                                          std::size_t consumers) {
  std::vector<storm> out(static_cast<std::size_t>(count));
  std::uniform_int_distribution<long> at(events / 10, events * 9 / 10);
  for (auto& s : out) {
    s.target = rng() % consumers;
    s.threshold = at(rng);
    s.delay = std::chrono::milliseconds(rng() % 300);
  }
  std::sort(out.begin(), out.end(),
            [](const storm& x, const storm& y) { return x.threshold < y.threshold; });
  return out;
}

/// A server fault (server_faults.hpp says what each kind does, and drives them).
struct server_fault {
  std::string kind;
  long threshold = 0;                 ///< Applied events before it is due.
  std::chrono::milliseconds delay{};  ///< After the threshold.
  std::chrono::milliseconds down{};   ///< How long the server (or the consumer) stays away.
};

/// --broker-outages outages of the kinds `kinds` (the first drawn, then in turn, so that two or
/// more show every kind) and --db-restarts restarts, from the seed, in threshold order. The first
/// outage that has a down time is longer than the relay's publish timeout (2 s), and so is
/// every consumer-away (shorter ones are the consumer kills).
inline std::vector<server_fault> schedule_server_faults(std::mt19937_64& rng, const args& a,
                                                        const std::vector<std::string>& kinds) {
  std::vector<server_fault> out;
  // In the first half: the relay's and the consumer's faults that come due in a burst once a
  // server is back still find the writer writing (a sharp fault needs traffic to be reached).
  std::uniform_int_distribution<long> at(a.events / 20, a.events / 2);
  const std::size_t first = kinds.empty() ? 0 : rng() % kinds.size();
  bool long_one = false;
  for (int i = 0; i < a.broker_outages && !kinds.empty(); ++i) {
    server_fault f;
    f.kind = kinds[(first + static_cast<std::size_t>(i)) % kinds.size()];
    f.threshold = at(rng);
    f.delay = std::chrono::milliseconds(rng() % 300);
    const auto draw = rng();
    const bool away =
        f.kind == "node-restart" || f.kind == "server-restart" || f.kind == "leaders-down";
    if (f.kind == "consumer-away" || (away && !long_one)) {
      f.down = std::chrono::milliseconds(2600 + draw % 1900);  // 2.6 to 4.5 s
      long_one = true;
    } else if (away) {
      f.down = std::chrono::milliseconds(200 + draw % 3800);
    }
    out.push_back(f);
  }
  for (int i = 0; i < a.db_restarts; ++i) {
    server_fault f;
    f.kind = "db-restart";
    f.threshold = at(rng);
    f.delay = std::chrono::milliseconds(rng() % 300);
    f.down = std::chrono::milliseconds(rng() % 3000);
    out.push_back(f);
  }
  std::stable_sort(out.begin(), out.end(), [](const server_fault& x, const server_fault& y) {
    return x.threshold < y.threshold;
  });
  return out;
}

}  // namespace fault_harness
