#pragma once
// `outbox relay`'s log (one line per state change on stderr) and how it describes errors.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include <outbox/outbox.hpp>

#include "../common.hpp"

namespace outbox_tool::relay_service {

using steady = std::chrono::steady_clock;

/// One line per state change on stderr, with a UTC timestamp; secrets never printed.
class logger {
 public:
  explicit logger(std::vector<std::string> secrets) : secrets_(std::move(secrets)) {}
  void operator()(const std::string& line) const {
    // One line per entry: a server's multi-line message (PostgreSQL's DETAIL and HINT) joined.
    std::string one = redact(line, secrets_);
    while (!one.empty() && (one.back() == '\n' || one.back() == ' ')) one.pop_back();
    for (auto& c : one)
      if (c == '\n' || c == '\r') c = ' ';
    const std::string text =
        iso8601(std::chrono::system_clock::now()) + " outbox relay: " + one + "\n";
    std::lock_guard lock(mutex_);
    std::fputs(text.c_str(), stderr);
    std::fflush(stderr);
  }

 private:
  std::vector<std::string> secrets_;
  mutable std::mutex mutex_;
};

/// "transient (postgresql 08006): what happened".
inline std::string describe(const outbox::error& e) {
  return std::string(class_name(e.kind())) + " (" + e.adapter() +
         (e.native_code().empty() ? "" : " " + e.native_code()) + "): " + e.what();
}

inline std::string describe(const std::exception_ptr& p) {
  try {
    std::rethrow_exception(p);
  } catch (const outbox::error& e) {
    return describe(e);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an unknown exception";
  }
}

inline double unix_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

inline std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(steady::now().time_since_epoch())
      .count();
}

}  // namespace outbox_tool::relay_service
