#pragma once
// `outbox relay`'s signals: SIGTERM and SIGINT blocked in every thread and taken by
// sigtimedwait (the start-up watch, then the supervising loop); SIGPIPE ignored.

#include <pthread.h>
#include <signal.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <stop_token>
#include <string>
#include <thread>

#include "../common.hpp"
#include "logger.hpp"

namespace outbox_tool::relay_service {

/// SIGTERM and SIGINT: blocked in every thread, taken by sigtimedwait.
inline sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

/// SIGTERM and SIGINT are taken by the supervising loop only: blocked before any thread (ours,
/// the HTTP server's, a client library's) starts, so every thread inherits the mask.
inline void block_stop_signals() {
  const sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A log reader that goes away (a pipe to a shipper that restarts) must not kill the relay in
  // the middle of a batch: a write to it fails instead (and the line is lost).
  std::signal(SIGPIPE, SIG_IGN);
}

/// Until the relays run, SIGTERM or SIGINT ends the tool at once, exit 0 (nothing is claimed
/// yet): a server that accepts the connection and never answers must not hold it. Stopped
/// (request_stop, then join) when the supervising loop takes the signals over.
inline std::jthread watch_startup(const logger& log) {
  return std::jthread([&log](std::stop_token stop) {
    const sigset_t set = stop_signals();
    while (!stop.stop_requested()) {
      const timespec tick{0, 100'000'000};
      const int sig = sigtimedwait(&set, nullptr, &tick);
      if (sig <= 0) continue;
      log(std::string(sig == SIGTERM ? "SIGTERM" : "SIGINT") +
          " while starting: exiting; nothing was claimed");
      std::fflush(stderr);
      std::_Exit(exit_ok);
    }
  });
}

}  // namespace outbox_tool::relay_service
