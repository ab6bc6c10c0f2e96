#pragma once
// The harness's processes: its parts, forked and exec'd from its own executable, each dying
// with the process that started it; reaped within a bound.

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "args.hpp"
#include "basics.hpp"
#include "signals.hpp"

namespace fault_harness {

/// In a child between fork and exec: it is killed when `parent` ends, however it ends (SIGKILL,
/// abort, an exception out of main), and kept across exec; a parent already gone ends it here.
inline void die_with(pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);
}

/// Starts the part `role` (relay or consumer `index`, or the writer): this executable again,
/// with the run's flags; it dies with the orchestrator.
inline pid_t spawn(const args& a, const std::string& role, int index = 0) {
  const std::vector<std::string> argv_s = {"fault_harness",
                                           "--role",
                                           role,
                                           "--dir",
                                           a.dir,
                                           "--seed",
                                           std::to_string(a.seed),
                                           "--events",
                                           std::to_string(a.events),
                                           "--aggregates",
                                           std::to_string(a.aggregates),
                                           "--rate",
                                           std::to_string(static_cast<long>(a.rate))};
  std::vector<std::string> all = argv_s;
  all.insert(all.end(), {"--store", a.store, "--transport", a.transport, "--run", a.run, "--index",
                         std::to_string(index), "--relays", std::to_string(a.relays), "--poison",
                         std::to_string(a.poison), "--uncarriable", std::to_string(a.uncarriable),
                         "--dedup-window", std::to_string(a.dedup_window_s)});
  if (!a.policy.empty()) all.insert(all.end(), {"--policy", a.policy});
  if (!a.plant.empty()) all.insert(all.end(), {"--plant", a.plant});
  std::vector<char*> argv;
  for (auto& s : all) argv.push_back(s.data());
  argv.push_back(nullptr);
  // The fault signals are blocked from before the fork until the part has its handlers
  // (become_part): one sent at once (a storm due as a consumer restarts) waits for them instead
  // of ending the process. The orchestrator never handles them, so blocking them here is free.
  const sigset_t armed = fault_signals();
  sigset_t before;
  ::sigprocmask(SIG_BLOCK, &armed, &before);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    die_with(parent);
    ::execv(a.self.c_str(), argv.data());
    ::_exit(127);
  }
  ::sigprocmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) throw std::runtime_error("fork failed");
  return pid;
}

inline std::string status_text(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + ::strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

/// Waits for `pid` at most `bound`; SIGKILLs it after that. Returns its status.
inline int reap(pid_t pid, std::chrono::milliseconds bound) {
  int status = 0;
  const auto until = steady::now() + bound;
  while (steady::now() < until) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(10ms);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace fault_harness
