#pragma once
// A TCP proxy on loopback for fault tests: forwards every connection to a server, and can cut
// the server off (every connection closed, new ones refused) and bring it back on the same
// port. It stands in for a database or broker that goes away for a while, without stopping the
// real server that other tests share.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
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
    listen_on(0);
    thread_ = std::thread([this] { loop(); });
  }
  tcp_proxy(const tcp_proxy&) = delete;
  tcp_proxy& operator=(const tcp_proxy&) = delete;
  ~tcp_proxy() {
    stop_ = true;
    thread_.join();
    std::lock_guard lock(mutex_);
    close_all();
    if (listener_ >= 0) ::close(listener_);
  }

  [[nodiscard]] int port() const noexcept { return port_; }

  /// The server is gone: every proxied connection is closed, new connections are refused.
  void cut() {
    std::lock_guard lock(mutex_);
    close_all();
    if (listener_ >= 0) ::close(listener_);
    listener_ = -1;
  }
  /// The server is back, on the same port.
  void restore() {
    std::lock_guard lock(mutex_);
    listen_on(port_);
  }

  /// The server hangs: connections stay open and new ones are made (the kernel completes
  /// them), but nothing more is carried either way, so no one gets an answer or an error:
  /// a frozen server (SIGSTOP, a stuck VM, a dropped route with no reset).
  void freeze() { frozen_ = true; }
  /// Carries on: what was sent meanwhile is delivered, the connections made are taken.
  void thaw() { frozen_ = false; }

  /// Freezes one connection only, the `index`-th accepted (from 0): the others go on.
  void freeze_connection(std::size_t index) {
    std::lock_guard lock(mutex_);
    frozen_connections_.push_back(index);
  }

 private:
  struct pipe_pair {
    int client;
    int server;
    std::size_t index;  ///< In accept order.
  };

  void listen_on(int port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener_, 64) != 0)
      throw std::runtime_error("tcp_proxy: cannot listen on port " + std::to_string(port));
    socklen_t len = sizeof a;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
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

  /// Copies what is readable on `from` to `to`; false when either side is done.
  static bool pump(int from, int to) {
    char buf[16384];
    const auto n = ::read(from, buf, sizeof buf);
    if (n <= 0) return false;
    for (ssize_t off = 0; off < n;) {
      const auto w = ::write(to, buf + off, static_cast<std::size_t>(n - off));
      if (w <= 0) return false;
      off += w;
    }
    return true;
  }

  void loop() {
    while (!stop_) {
      if (frozen_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      std::lock_guard lock(mutex_);
      const std::size_t n = pairs_.size();
      std::vector<pollfd> fds;
      if (listener_ >= 0) fds.push_back({listener_, POLLIN, 0});
      for (const auto& p : pairs_) {
        const bool frozen = std::find(frozen_connections_.begin(), frozen_connections_.end(),
                                      p.index) != frozen_connections_.end();
        fds.push_back({frozen ? -1 : p.client, POLLIN, 0});  // poll skips a negative fd
        fds.push_back({frozen ? -1 : p.server, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
      std::size_t k = 0;
      if (listener_ >= 0) {
        if (fds[0].revents & POLLIN) {
          const int c = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
          if (c >= 0) {
            const int s = connect_upstream();
            if (s >= 0)
              pairs_.push_back({c, s, accepted_++});
            else
              ::close(c);
          }
        }
        k = 1;
      }
      std::vector<pipe_pair> alive;
      for (std::size_t i = 0; i < n; ++i) {
        const auto& p = pairs_[i];
        const auto& cf = fds[k + 2 * i];
        const auto& sf = fds[k + 2 * i + 1];
        bool ok = true;
        if (std::find(frozen_connections_.begin(), frozen_connections_.end(), p.index) !=
            frozen_connections_.end()) {
          alive.push_back(p);  // left unread: nothing carried either way
          continue;
        }
        if (cf.revents) ok = pump(p.client, p.server);
        if (ok && sf.revents) ok = pump(p.server, p.client);
        if (ok) {
          alive.push_back(p);
        } else {
          ::close(p.client);
          ::close(p.server);
        }
      }
      // Pairs accepted during this round were appended after the fds were built: keep them.
      for (std::size_t i = n; i < pairs_.size(); ++i) alive.push_back(pairs_[i]);
      pairs_ = std::move(alive);
    }
  }

  int upstream_;
  int listener_ = -1;
  int port_ = 0;
  std::mutex mutex_;
  std::vector<pipe_pair> pairs_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> frozen_{false};
  std::size_t accepted_ = 0;
  std::vector<std::size_t> frozen_connections_;
  std::thread thread_;
};

}  // namespace outbox::test
