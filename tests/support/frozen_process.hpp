#pragma once
// A server frozen for a test case (SIGSTOP), thawed however the case ends.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace outbox::test {

/// Freezes a server (SIGSTOP) while it lives: it keeps its sockets but answers nothing. A
/// watchdog process thaws it after 30 s whatever happens to this one (a crash, a timeout kill),
/// so the shared server is never left stopped for the suites after this one.
class frozen_process {
 public:
  explicit frozen_process(pid_t pid) : pid_(pid) {
    watchdog_ = ::fork();
    BOOST_TEST_REQUIRE(watchdog_ >= 0);
    if (watchdog_ == 0) {  // only async-signal-safe calls here
      // Out of the test's process group (meson kills the group on a timeout), deaf to the
      // signals that end a test run, holding none of the test's sockets.
      ::setsid();
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      for (int sig : {SIGTERM, SIGINT, SIGHUP}) ::sigaction(sig, &ignore, nullptr);
      ::close_range(3, ~0U, 0);
      ::sleep(30);
      ::kill(pid, SIGCONT);
      ::_exit(0);
    }
    BOOST_TEST_REQUIRE(::kill(pid_, SIGSTOP) == 0);
    // kill returns before the stop took hold: each thread stops only when it next enters the
    // kernel, and on a loaded machine one of RabbitMQ's answered a declare sent just after (a
    // flake: "404 NOT_FOUND" where a timeout was expected). Wait until every thread is stopped.
    BOOST_TEST_REQUIRE(all_threads_stopped(std::chrono::seconds(5)),
                       "the server did not stop within 5 s");
  }
  ~frozen_process() {
    ::kill(pid_, SIGCONT);
    ::kill(watchdog_, SIGKILL);
    ::waitpid(watchdog_, nullptr, 0);
  }
  frozen_process(const frozen_process&) = delete;
  frozen_process& operator=(const frozen_process&) = delete;

 private:
  /// Whether every thread of the server is in state T (stopped), polled for up to `bound`.
  [[nodiscard]] bool all_threads_stopped(std::chrono::milliseconds bound) const {
    const auto until = std::chrono::steady_clock::now() + bound;
    const std::string tasks = "/proc/" + std::to_string(pid_) + "/task";
    do {
      bool all = true;
      for (const auto& t : std::filesystem::directory_iterator(tasks)) {
        std::ifstream stat(t.path() / "stat");
        std::string line;
        std::getline(stat, line);
        // pid (comm) state ...: the state follows the last ')' (comm may hold spaces).
        const auto close = line.rfind(')');
        if (close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'T') {
          all = false;
          break;
        }
      }
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } while (std::chrono::steady_clock::now() < until);
    return false;
  }

  pid_t pid_;
  pid_t watchdog_ = -1;
};

}  // namespace outbox::test
