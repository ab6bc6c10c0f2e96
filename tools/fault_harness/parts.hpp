#pragma once
// The relays and the consumers as the orchestrator runs them: started, their faults injected
// as they fall due (killed, armed, paused and resumed, their clock jumped), restarted.

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "args.hpp"
#include "basics.hpp"
#include "processes.hpp"
#include "schedules.hpp"
#include "signals.hpp"

namespace fault_harness {

/// What the orchestrator's drivers share: the run's flags, when the parts were started, when
/// the last fault happened (the drain bound counts from there) and the harness's first failure.
struct run_state {
  const args& a;
  steady::time_point started{};
  steady::time_point last_fault{};
  std::string failure{};
};

/// One part the orchestrator runs: started, killed, restarted (or paused and resumed).
struct part {
  std::string role;
  int index = 0;  ///< Which relay or consumer.
  std::vector<fault> faults;
  bool consumer = false;
  pid_t pid = -1;
  steady::time_point started{};
  std::size_t next = 0;                     ///< The next fault of `faults`.
  std::optional<steady::time_point> armed;  ///< A sharp fault armed then.
  std::optional<steady::time_point> restart_at;
  std::optional<steady::time_point> stopped_at;  ///< Paused (SIGSTOP) since.
  std::map<std::string, int> injected;           ///< Faults that happened, by kind.
};

/// Starts `p`, or starts it again.
inline void start_part(const args& a, part& p) {
  p.pid = spawn(a, p.role, p.index);
  trace(p.role + " " + std::to_string(p.index) + " started, pid " + std::to_string(p.pid));
  p.started = steady::now();
  p.armed.reset();
  p.restart_at.reset();
  p.stopped_at.reset();
}

/// Handles a part that ended: a fault we caused (restart), or a failure of the harness.
inline void on_part_exit(run_state& run, part& p, int status) {
  p.pid = -1;
  const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  if (!killed || !p.armed) {
    if (run.failure.empty())
      run.failure =
          p.role + " " + std::to_string(p.index) + " ended unexpectedly: " + status_text(status);
    return;
  }
  ++p.injected[fault_name(p.faults[p.next].kind, p.consumer)];
  trace(p.role + " " + std::to_string(p.index) + " killed (" +
        fault_name(p.faults[p.next].kind, p.consumer) + ")");
  ++p.next;
  run.last_fault = steady::now();
  p.restart_at = run.last_fault + p.faults[p.next - 1].down;
}

inline void kill_part_now(run_state& run, part& p) {
  trace(p.role + " " + std::to_string(p.index) + " killed");
  ::kill(p.pid, SIGKILL);
  ::waitpid(p.pid, nullptr, 0);
  p.pid = -1;
  ++p.injected["kill"];
  ++p.next;
  run.last_fault = steady::now();
  p.restart_at = run.last_fault + p.faults[p.next - 1].down;
}

/// One step of `p`'s schedule, from the orchestrator's loop: `applied` events are applied.
inline void drive_part(run_state& run, part& p, long applied) {
  if (p.pid < 0) {
    if (p.restart_at && steady::now() >= *p.restart_at) start_part(run.a, p);
    return;
  }
  if (p.stopped_at) {  // paused: resumed once its lease has run out
    if (steady::now() - *p.stopped_at < pause_length) return;
    ::kill(p.pid, SIGCONT);
    trace(p.role + " " + std::to_string(p.index) + " resumed after its pause");
    p.stopped_at.reset();
    p.armed.reset();
    ++p.injected["pause"];
    ++p.next;
    run.last_fault = steady::now();
    return;
  }
  int status = 0;
  if (::waitpid(p.pid, &status, WNOHANG | WUNTRACED) == p.pid) {
    if (WIFSTOPPED(status)) {
      if (!p.armed || p.faults[p.next].kind != fault_kind::pause) {
        if (run.failure.empty()) run.failure = p.role + " stopped unexpectedly";
        return;
      }
      p.stopped_at = steady::now();
      trace(p.role + " " + std::to_string(p.index) + " paused");
      return;
    }
    return on_part_exit(run, p, status);
  }
  if (p.next >= p.faults.size()) return;
  const fault& f = p.faults[p.next];
  if (p.armed) {  // a sharp fault that found no such point in time: kill it ourselves
    if (steady::now() - *p.armed > 5s) {
      ++p.injected[std::string(fault_name(f.kind, p.consumer)) + " not reached"];
      kill_part_now(run, p);
    }
    return;
  }
  // A relay's fault falls due by the writer's progress (event n is written n / rate seconds
  // in), so that it finds the relay publishing; by applied events it came due late where the
  // consumer lags the broker's confirms (AMQP after an outage), with nothing left to publish,
  // and sharp faults waited 5 s to become kills. A consumer's falls due by applied events: it
  // needs deliveries to be killed among.
  const bool due =
      p.consumer ? applied >= f.threshold
                 : steady::now() - run.started >=
                       std::chrono::duration<double>(static_cast<double>(f.threshold) / run.a.rate);
  if (!due || steady::now() - p.started < f.delay) return;
  if (f.kind == fault_kind::kill) return kill_part_now(run, p);
  if (f.kind == fault_kind::clock_jump) {  // takes effect in the signal handler, at once
    if (::kill(p.pid, sig_clock_jump()) == 0) ++p.injected["clock-jump"];
    ++p.next;
    run.last_fault = steady::now();
    return;
  }
  p.armed = steady::now();
  ::kill(p.pid, f.kind == fault_kind::sharp_usr1   ? SIGUSR1
                : f.kind == fault_kind::sharp_usr2 ? SIGUSR2
                                                   : sig_pause());
}

/// Every fault of `parts` injected, and each of them running (none paused).
inline bool all_done(const std::vector<part>& parts) {
  return std::all_of(parts.begin(), parts.end(), [](const part& p) {
    return p.next >= p.faults.size() && p.pid > 0 && !p.stopped_at;
  });
}

}  // namespace fault_harness
