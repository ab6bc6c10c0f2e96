#pragma once
// The database kills and the duplicate storms, each driven one at a time from the
// orchestrator's loop as its schedule falls due.

#include <signal.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "basics.hpp"
#include "parts.hpp"
#include "schedules.hpp"
#include "signals.hpp"

namespace fault_harness {

/// The database kills (--db-kills): every session of a role terminated, or the writer's next
/// COMMIT cut (writer-commit).
struct db_kill_driver {
  std::vector<db_kill> plan;
  std::size_t next = 0;
  steady::time_point due{};             ///< The next one's threshold reached then (or none).
  std::map<std::string, int> killed{};  ///< Database kills done, by target.
  long long sessions_terminated = 0;

  [[nodiscard]] bool finished() const { return next >= plan.size(); }

  /// `writer`: the writer's pid, or -1 once it ended; `terminate(target)`: ends every session of
  /// `target` in the run and says how many (the store kind's terminate).
  template <class Terminate>
  void drive(run_state& run, long applied, pid_t writer, Terminate&& terminate) {
    const bool writer_running = writer > 0;
    if (next >= plan.size()) return;
    const db_kill& k = plan[next];
    // A writer's kill falls due by the writer's progress (paced at --rate: event n is written
    // n / rate seconds in), not by applied events, which lag it (a consumer behind its broker):
    // by then the writer was often done, and the kill missed.
    const bool of_writer = k.target.starts_with("writer");
    if (of_writer ? steady::now() - run.started <
                        std::chrono::duration<double>(static_cast<double>(k.threshold) / run.a.rate)
                  : applied < k.threshold)
      return;
    const auto now = steady::now();
    if (due == steady::time_point{}) due = now;
    if (now - due < k.delay) return;
    // The target may have no session at this instant (a part down or between connections):
    // try again for up to 5 s, then count it missed.
    // writer-commit: the writer cuts its own connection after sending its next COMMIT.
    const long long n = (of_writer && !writer_running) ? 0
                        : k.target == "writer-commit"
                            ? static_cast<long long>(::kill(writer, SIGUSR1) == 0)
                            : terminate(k.target);
    if (n == 0 && now - due < k.delay + 5s && (!of_writer || writer_running)) return;
    sessions_terminated += n;
    trace("db kill of " + k.target + ": " + std::to_string(n) + " sessions");
    ++killed[k.target + (n == 0 ? " missed" : "")];
    ++next;
    due = {};
    run.last_fault = now;
  }

  /// Database kills done (the missed ones aside).
  [[nodiscard]] int total() const {
    int n = 0;
    for (const auto& [k, v] : killed)
      if (!k.ends_with(" missed")) n += v;
    return n;
  }

  /// The table's "db kills" cell.
  [[nodiscard]] std::string text() const {
    if (killed.empty()) return "none";
    std::string kinds;
    for (const auto& [k, v] : killed)
      kinds += (kinds.empty() ? "" : " ") + k + "=" + std::to_string(v);
    return std::to_string(total()) + " (" + kinds + ", " + std::to_string(sessions_terminated) +
           " sessions)";
  }
};

/// The duplicate storms (--storms): a consumer fed its last deliveries again (sig_storm).
struct storm_driver {
  std::vector<storm> plan;
  /// How long a consumer is up before a storm goes to it (it has deliveries to copy by then).
  std::chrono::milliseconds warmup{1s};
  std::size_t next = 0;
  steady::time_point due{};
  int done = 0;
  int missed = 0;

  [[nodiscard]] bool finished() const { return next >= plan.size(); }

  void drive(run_state& run, long applied, const std::vector<part>& consumers) {
    if (next >= plan.size()) return;
    const storm& st = plan[next];
    if (applied < st.threshold) return;
    const auto now = steady::now();
    if (due == steady::time_point{}) due = now;
    if (now - due < st.delay) return;
    const part& c = consumers[st.target];
    // Up for a second at least: a consumer process keeps the deliveries it had itself, so a storm
    // sent as it (re)starts (one that fell due while it was down) would have nothing to copy.
    const bool sent =
        c.pid > 0 && !c.armed && now - c.started >= warmup && ::kill(c.pid, sig_storm()) == 0;
    if (!sent && now - due < st.delay + warmup + 4s) return;
    ++(sent ? done : missed);
    ++next;
    due = {};
    run.last_fault = now;
  }
};

}  // namespace fault_harness
