#pragma once
// The run's own Kafka mock cluster, in a process of its own (--role kafka-cluster), and the
// orchestrator's side of it (kafka_cluster_process).
//
// librdkafka 2.0.2's mock takes a broker down by closing its listening socket and binding a new
// one to the same port at once, and asserts (aborts the process) when that bind fails. It fails
// when another process holds a copy of the old socket: a child forked by the process in that
// instant. The orchestrator forks parts and commands all the time, so its own cluster once took
// the run down with it (and a part left as an orphan kept the test runner waiting). So the
// cluster lives in a process that never forks (--role kafka-cluster), told "down" and "up" on
// a socket, answering "ok" or "error <why>"; if it dies, the run fails at once and says why.

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <outbox/kafka/kafka.hpp>

#include "../args.hpp"
#include "../basics.hpp"
#include "../processes.hpp"

namespace fault_harness {

/// The cluster process's SIGABRT: a clear line instead of a core dump (the mock's own log line,
/// "Failed to bind mock broker socket", is on stderr just before).
extern "C" inline void on_cluster_abort(int) {
  static const char text[] =
      "fault_harness: the Kafka mock cluster aborted: librdkafka's mock asserts when a broker "
      "going down cannot bind its port again (another process holds it; see above)\n";
  [[maybe_unused]] const auto n = ::write(2, text, sizeof text - 1);
  ::_exit(exit_failed);
}

/// --role kafka-cluster: brokers 1 and 2 lead the partitions of `topic`, broker 3 coordinates
/// the group (kafka_kind::outages says why); prints "ready <bootstrap servers>", then serves the
/// orchestrator's words on stdin until it closes it.
inline int run_kafka_cluster(const args& a, const std::string& topic) {
  struct sigaction sa {};
  sa.sa_handler = on_cluster_abort;
  ::sigaction(SIGABRT, &sa, nullptr);
  outbox::kafka::mock_cluster cluster(3);
  cluster.create_topic(topic, 4, 1);
  for (int p = 0; p < 4; ++p) cluster.set_partition_leader(topic, p, 1 + p % 2);
  cluster.set_group_coordinator(topic, 3);
  std::cout << "ready " << cluster.bootstrap_servers() << std::endl;
  for (std::string word; std::getline(std::cin, word);) {
    if (word != "down" && word != "up") {
      std::cout << "error unknown word " << word << std::endl;
      continue;
    }
    // --take-kafka-port: a child holding copies of every socket while the brokers go down, as
    // a fork at that instant would (it dies with this process).
    pid_t holder = -1;
    if (word == "down" && a.take_kafka_port) {
      const pid_t self = ::getpid();
      holder = ::fork();
      if (holder == 0) {
        die_with(self);
        for (;;) ::pause();
      }
    }
    try {
      for (int id = 1; id <= 2; ++id)
        word == "down" ? cluster.set_broker_down(id) : cluster.set_broker_up(id);
      std::cout << "ok" << std::endl;
    } catch (const std::exception& e) {
      std::cout << "error " << e.what() << std::endl;
    }
    if (holder > 0) {
      ::kill(holder, SIGKILL);
      ::waitpid(holder, nullptr, 0);
    }
  }
  return exit_ok;
}

/// The orchestrator's side of --role kafka-cluster: started with the run, ended (its stdin
/// closed, then killed if need be) with it; it dies with the orchestrator (die_with).
class kafka_cluster_process {
 public:
  /// @throws std::runtime_error when it does not start (within 30 s), saying why.
  explicit kafka_cluster_process(const args& a) {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
      throw std::runtime_error("socketpair failed");
    std::vector<std::string> all{
        "fault_harness", "--role", "kafka-cluster", "--store", a.store, "--transport",
        "kafka",         "--run",  a.run,           "--dir",   a.dir};
    if (a.take_kafka_port) all.emplace_back("--take-kafka-port");
    std::vector<char*> argv;
    for (auto& x : all) argv.push_back(x.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      die_with(parent);
      ::dup2(fds[1], 0);
      ::dup2(fds[1], 1);
      ::execv(a.self.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    fd_ = fds[0];
    if (pid_ < 0) {
      ::close(fd_);
      throw std::runtime_error("fork failed");
    }
    const auto line = read_line(30s);
    if (!line || !line->starts_with("ready ")) {
      const std::string why = ended("starting");
      stop();
      throw std::runtime_error(why);
    }
    bootstraps_ = line->substr(6);
  }
  kafka_cluster_process(const kafka_cluster_process&) = delete;
  kafka_cluster_process& operator=(const kafka_cluster_process&) = delete;
  ~kafka_cluster_process() { stop(); }

  [[nodiscard]] const std::string& bootstrap_servers() const { return bootstraps_; }

  /// Takes the brokers that lead the partitions down, or brings them up; returns why that
  /// failed (empty: it did not).
  std::string power(bool down) {
    const std::string word = down ? "down\n" : "up\n";
    if (::send(fd_, word.data(), word.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(word.size()))
      return ended(down ? "taking its brokers down" : "bringing its brokers up");
    const auto line = read_line(30s);
    if (!line) return ended(down ? "taking its brokers down" : "bringing its brokers up");
    if (*line == "ok") return {};
    return "the Kafka mock cluster refused: " + *line;
  }

 private:
  /// One line from the cluster within `bound`; none on end of file, an error or the bound.
  std::optional<std::string> read_line(std::chrono::milliseconds bound) {
    const auto until = steady::now() + bound;
    for (;;) {
      if (const auto nl = buffer_.find('\n'); nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(until - steady::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[512];
      const ssize_t n = ::read(fd_, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }
  /// What became of the process, which failed to answer while `doing`.
  std::string ended(const std::string& doing) {
    const int status = reap(pid_, 5s);
    pid_ = -1;
    return "the Kafka mock cluster (the run's own process) ended while " + doing + ": " +
           status_text(status);
  }
  void stop() noexcept {
    if (fd_ >= 0) ::close(fd_);  // its stdin ends: it exits
    fd_ = -1;
    if (pid_ > 0) reap(pid_, 10s);
    pid_ = -1;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string buffer_;
  std::string bootstraps_;
};

}  // namespace fault_harness
