#pragma once
// A TCP proxy on loopback for fault tests: forwards every connection to a server, and can cut
// the server off (every connection closed, new ones refused) and bring it back on the same
// port. It stands in for a database or broker that goes away for a while, without stopping the
// real server that other tests share.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace outbox::test {

class tcp_proxy {
 public:
  /// Forwards 127.0.0.1:<port()> to 127.0.0.1:`upstream_port`.
  explicit tcp_proxy(int upstream_port) : upstream_(upstream_port) {
    listener_ = bound_socket(0);
    sockaddr_in a{};
    socklen_t len = sizeof a;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    if (::listen(listener_, 64) != 0) throw std::runtime_error("tcp_proxy: cannot listen");
    wake_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    thread_ = std::thread([this] { loop(); });
  }
  tcp_proxy(const tcp_proxy&) = delete;
  tcp_proxy& operator=(const tcp_proxy&) = delete;
  ~tcp_proxy() {
    stop_ = true;
    thread_.join();
    close_all();
    if (listener_ >= 0) ::close(listener_);
    if (placeholder_ >= 0) ::close(placeholder_);
    ::close(wake_);
  }

  [[nodiscard]] int port() const noexcept { return port_; }

  /// The server is gone: every proxied connection is closed, new connections are refused. The
  /// port stays bound (not listening), so no other socket can be given it meanwhile.
  void cut() {
    const control c(*this);
    close_all();
    if (listener_ < 0) return;
    placeholder_ = bound_socket(port_);  // SO_REUSEPORT: beside the listener, until it closes
    ::close(listener_);
    listener_ = -1;
  }
  /// The server is back, on the same port.
  void restore() {
    const control c(*this);
    if (listener_ >= 0) return;
    const int s = bound_socket(port_);
    if (::listen(s, 64) != 0) {
      ::close(s);
      throw std::runtime_error("tcp_proxy: cannot listen again on port " + std::to_string(port_));
    }
    listener_ = s;
    ::close(placeholder_);
    placeholder_ = -1;
  }

  /// The server hangs: connections stay open and new ones are made (the kernel completes
  /// them), but nothing more is carried either way, so no one gets an answer or an error:
  /// a frozen server (SIGSTOP, a stuck VM, a dropped route with no reset).
  void freeze() { frozen_ = true; }
  /// Carries on: what was sent meanwhile is delivered, the connections made are taken.
  void thaw() { frozen_ = false; }

  /// Freezes one connection only, the `index`-th accepted (from 0): the others go on.
  void freeze_connection(std::size_t index) {
    const control c(*this);
    frozen_connections_.push_back(index);
  }
  /// Carries the `index`-th connection on again: what its sides sent meanwhile is delivered.
  void thaw_connection(std::size_t index) {
    const control c(*this);
    std::erase(frozen_connections_, index);
  }
  /// From now on the `index`-th connection carries at most `bytes` more from its client to its
  /// server, and holds the rest back; the server's answers still come: a server that took the
  /// start of a batch, answered it, and then heard nothing more (a request lost on the way).
  void limit_requests(std::size_t index, std::size_t bytes) {
    const control c(*this);
    for (auto& p : pairs_)
      if (p.index == index) p.budget = bytes;
  }

  /// Whether the `index`-th connection, frozen, holds bytes back (its client's request, or its
  /// server's answer): its client waits for an answer that does not come.
  [[nodiscard]] bool holds_back(std::size_t index) {
    const control c(*this);
    for (const auto& p : pairs_) {
      if (p.index != index) continue;
      pollfd fds[2] = {{p.client, POLLIN, 0}, {p.server, POLLIN, 0}};
      return ::poll(fds, 2, 0) > 0;
    }
    return false;
  }

 private:
  /// The sockets, for a caller other than the loop: taken between two of its rounds, never while
  /// it polls (a socket closed under its poll would stay open until the poll ends). The loop
  /// holds the lock while it polls, and gives it up at once when asked through wake_.
  class control {
   public:
    explicit control(tcp_proxy& p) : p_(p) {
      ++p_.waiting_;
      const std::uint64_t one = 1;
      (void)!::write(p_.wake_, &one, sizeof one);
      lock_ = std::unique_lock(p_.mutex_);
    }
    control(const control&) = delete;
    control& operator=(const control&) = delete;
    ~control() {
      --p_.waiting_;  // under the lock: the loop cannot miss the notification
      lock_.unlock();
      p_.given_back_.notify_all();
    }

   private:
    tcp_proxy& p_;
    std::unique_lock<std::mutex> lock_;
  };

  struct pipe_pair {
    int client;
    int server;
    std::size_t index;              ///< In accept order.
    std::size_t budget = SIZE_MAX;  ///< Bytes still carried from the client (limit_requests).
  };

  /// A TCP socket bound to 127.0.0.1:`port` (0: any free port), not listening yet.
  /// SO_REUSEPORT lets the placeholder and a listener hold the port together.
  static int bound_socket(int port) {
    const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ::setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(s);
      throw std::runtime_error("tcp_proxy: cannot bind port " + std::to_string(port));
    }
    return s;
  }

  int connect_upstream() const {
    const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(upstream_));
    if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(s);
      return -1;
    }
    return s;
  }

  void close_all() {
    for (auto& p : pairs_) {
      ::shutdown(p.client, SHUT_RDWR);
      ::close(p.client);
      ::close(p.server);
    }
    pairs_.clear();
  }

  [[nodiscard]] bool is_frozen(const pipe_pair& p) const {
    return std::find(frozen_connections_.begin(), frozen_connections_.end(), p.index) !=
           frozen_connections_.end();
  }

  /// Copies what is readable on `from` to `to`, at most `budget` bytes, and takes them off
  /// it; false when either side is done.
  static bool pump(int from, int to, std::size_t& budget) {
    char buf[16384];
    const auto n = ::read(from, buf, std::min(sizeof buf, budget));
    if (n <= 0) return false;
    for (ssize_t off = 0; off < n;) {
      const auto w = ::write(to, buf + off, static_cast<std::size_t>(n - off));
      if (w <= 0) return false;
      off += w;
    }
    if (budget != SIZE_MAX) budget -= static_cast<std::size_t>(n);
    return true;
  }

  void loop() {
    while (!stop_) {
      if (frozen_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      std::unique_lock lock(mutex_);
      given_back_.wait(lock, [this] { return waiting_ == 0; });
      const std::size_t n = pairs_.size();
      std::vector<pollfd> fds{{wake_, POLLIN, 0}, {listener_, POLLIN, 0}};  // -1 is skipped
      for (const auto& p : pairs_) {
        const bool frozen = is_frozen(p);
        fds.push_back({frozen || p.budget == 0 ? -1 : p.client, POLLIN, 0});
        fds.push_back({frozen ? -1 : p.server, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        std::uint64_t count = 0;
        (void)!::read(wake_, &count, sizeof count);
      }
      std::vector<pipe_pair> alive;
      for (std::size_t i = 0; i < n; ++i) {
        auto& p = pairs_[i];
        const auto& cf = fds[2 + 2 * i];
        const auto& sf = fds[3 + 2 * i];
        bool ok = true;
        if (cf.revents) ok = pump(p.client, p.server, p.budget);
        std::size_t answers = SIZE_MAX;  // the server's side is never limited
        if (ok && sf.revents) ok = pump(p.server, p.client, answers);
        if (ok) {
          alive.push_back(p);  // a frozen one too: nothing read, nothing carried either way
        } else {
          ::close(p.client);
          ::close(p.server);
        }
      }
      pairs_ = std::move(alive);
      if (fds[1].revents & POLLIN) {
        const int c = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) {
          const int s = connect_upstream();
          if (s >= 0)
            pairs_.push_back({c, s, accepted_++});
          else
            ::close(c);
        }
      }
    }
  }

  int upstream_;
  int listener_ = -1;
  int placeholder_ = -1;  ///< Holds the port while the server is cut off.
  int port_ = 0;
  int wake_ = -1;  ///< An eventfd: a caller waits for the lock (see control).
  std::mutex mutex_;
  std::atomic<int> waiting_{0};  ///< Callers waiting for the lock, or holding it.
  std::condition_variable given_back_;
  std::vector<pipe_pair> pairs_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> frozen_{false};
  std::size_t accepted_ = 0;
  std::vector<std::size_t> frozen_connections_;
  std::thread thread_;
};

}  // namespace outbox::test
