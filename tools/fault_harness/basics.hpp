#pragma once
// What every part of the harness shares: its exit codes, its trace, the relay's timing (which
// the kinds and the orchestrator size their bounds by) and the answer to a missing server.

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>

namespace fault_harness {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

inline constexpr int exit_ok = 0;
inline constexpr int exit_failed = 1;
inline constexpr int exit_usage = 2;
inline constexpr int exit_ledger = 3;
inline constexpr int exit_stalled = 4;
inline constexpr int exit_skip = 77;

inline constexpr const char* consumer_name = "harness";

/// OUTBOX_HARNESS_TRACE=1: every part says on stderr what happened when (faults injected, the
/// relays' errors and slow batches), with the wall clock in ms, so that a stall can be placed
/// against the faults around it. Off by default (CI keeps the table).
inline bool tracing() {
  static const bool on = [] {
    const char* v = std::getenv("OUTBOX_HARNESS_TRACE");
    return v != nullptr && std::string_view(v) == "1";
  }();
  return on;
}
inline void trace(const std::string& what) {
  if (!tracing()) return;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  std::ostringstream line;
  line << "trace " << ms << " [" << ::getpid() << "] " << what << '\n';
  std::cerr << line.str() << std::flush;
}

/// The relay's batch: a relay fault redelivers at most this many (the wire-duplicate bound).
inline constexpr std::size_t relay_batch = 50;
/// The relay's lease; a pause lasts a second longer.
inline constexpr auto relay_lease = 2500ms;
inline constexpr auto pause_length = relay_lease + 1s;
/// The relay's publish timeout and its longest retry delay (exponential_backoff's max_delay).
inline constexpr auto relay_publish_timeout = 2000ms;
inline constexpr auto relay_max_retry_delay = 500ms;

/// A missing server address (or `noun`): skip (77), or fail (1) when OUTBOX_REQUIRE_SERVICES=1.
inline int missing_service(const char* what, const char* noun = " address") {
  const char* req = std::getenv("OUTBOX_REQUIRE_SERVICES");
  const bool required = req != nullptr && std::string(req) == "1";
  std::cerr << "fault_harness: no " << what << noun << ": "
            << (required ? "FAIL (OUTBOX_REQUIRE_SERVICES=1)" : "SKIP") << "\n";
  return required ? exit_failed : exit_skip;
}

/// Whether `name` is one of the comma-separated `list`.
inline bool listed(const std::string& list, const std::string& name) {
  return ("," + list + ",").find("," + name + ",") != std::string::npos;
}

}  // namespace fault_harness
