#pragma once
// The parts' signals: SIGTERM stops a part cleanly, the others arm its sharp faults (which fire
// at the next point of their kind) or act at once (a relay's clock jump).

#include <signal.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>

#include <outbox/outbox.hpp>

#include "basics.hpp"

namespace fault_harness {

inline volatile std::sig_atomic_t stop_requested = 0;
inline volatile std::sig_atomic_t armed_usr1 = 0;  ///< relay: before-publish; consumer: before-ack.
inline volatile std::sig_atomic_t armed_usr2 = 0;  ///< relay: after-confirm; consumer: in-tx.
inline volatile std::sig_atomic_t armed_pause = 0;  ///< relay: pause after a confirm (sig_pause).
inline volatile std::sig_atomic_t armed_storm = 0;  ///< consumer: a duplicate storm (sig_storm).
/// relay: how far its clock is ahead (sig_clock_jump adds a lease and a second, at once).
inline std::atomic<std::int64_t> clock_ahead_ms{0};
static_assert(std::atomic<std::int64_t>::is_always_lock_free, "set from a signal handler");
/// Real-time signals, which nothing else sends: a relay's pause, a consumer's storm.
inline int sig_pause() { return SIGRTMIN; }
inline int sig_storm() { return SIGRTMIN + 1; }
inline int sig_clock_jump() { return SIGRTMIN + 2; }
extern "C" inline void on_signal(int sig) {
  if (sig == SIGTERM) stop_requested = 1;
  if (sig == SIGUSR1) armed_usr1 = 1;
  if (sig == SIGUSR2) armed_usr2 = 1;
  if (sig == sig_pause()) armed_pause = 1;
  if (sig == sig_storm()) armed_storm = 1;
  if (sig == sig_clock_jump())
    clock_ahead_ms.fetch_add(std::chrono::milliseconds(pause_length).count(),
                             std::memory_order_relaxed);
}

/// The relay's clock: the system clock, plus however far it jumped ahead (sig_clock_jump). The
/// relay stamps leases and judges them by it (claim_request::now), so a relay whose clock jumped
/// takes over batches other relays still hold; their settles must then be fenced.
struct jumping_clock {
  [[nodiscard]] outbox::time_point now() const {
    return outbox::system_clock{}.now() +
           std::chrono::milliseconds(clock_ahead_ms.load(std::memory_order_relaxed));
  }
};

/// The signals that arm a part's faults.
inline sigset_t fault_signals() {
  sigset_t set;
  sigemptyset(&set);
  // SIGTERM too: a part stopped right after a (re)start must stop by its handler, cleanly.
  for (int sig : {SIGTERM, SIGUSR1, SIGUSR2, sig_pause(), sig_storm(), sig_clock_jump()})
    sigaddset(&set, sig);
  return set;
}

/// A part (started by `spawn`, so it dies with the orchestrator) stops on SIGTERM and arms its
/// sharp fault on SIGUSR1/SIGUSR2 (and sig_pause, sig_storm, sig_clock_jump).
inline void become_part() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  for (int sig : {SIGTERM, SIGUSR1, SIGUSR2, sig_pause(), sig_storm(), sig_clock_jump()})
    ::sigaction(sig, &sa, nullptr);
  const sigset_t armed = fault_signals();
  ::sigprocmask(SIG_UNBLOCK, &armed, nullptr);
}

[[noreturn]] inline void die_here() {
  ::raise(SIGKILL);
  std::abort();  // not reached
}

}  // namespace fault_harness
