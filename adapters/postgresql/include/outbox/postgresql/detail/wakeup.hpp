#pragma once
/// @file
/// How an idle PostgreSQL relay sleeps: on its connection's socket (LISTEN/NOTIFY) and on an
/// eventfd that `interrupt` writes from any thread. The eventfd is opened on first use, so a
/// store that never waits (a consumer's, a tool's) opens none.

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <utility>

#include <outbox/error.hpp>

namespace outbox::postgresql::detail {

/// An eventfd opened on first use; movable (not while another thread uses it).
class wakeup {
 public:
  wakeup() = default;
  wakeup(wakeup&& o) noexcept : fd_(o.fd_.exchange(-1)) {}
  wakeup& operator=(wakeup&& o) noexcept {
    if (this != &o) {
      close();
      fd_ = o.fd_.exchange(-1);
    }
    return *this;
  }
  wakeup(const wakeup&) = delete;
  wakeup& operator=(const wakeup&) = delete;
  ~wakeup() { close(); }

  /// Ends a `wait` in progress, or the next one (from any thread).
  void interrupt() noexcept {
    const int fd = descriptor();
    if (fd < 0) return;  // no eventfd to be had: the wait degrades to its timeout
    const std::uint64_t one = 1;
    [[maybe_unused]] auto wr = ::write(fd, &one, sizeof one);
  }

  /// What ended a wait.
  struct outcome {
    bool interrupted = false;   ///< `interrupt` was called.
    bool socket_ready = false;  ///< `socket` has input (or an error) to read.
  };

  /// Sleeps until `interrupt`, input on `socket` (when >= 0) or the timeout.
  outcome wait(int socket, std::chrono::milliseconds timeout) {
    const int fd = descriptor();
    pollfd fds[2] = {{fd, POLLIN, 0}, {socket, POLLIN, 0}};
    // poll ignores a negative descriptor, so a missing eventfd or socket just is not watched.
    const int n = ::poll(fds, 2, static_cast<int>(timeout.count()));
    outcome o;
    if (n > 0 && fd >= 0 && (fds[0].revents & POLLIN)) {
      std::uint64_t v;
      [[maybe_unused]] auto rd = ::read(fd, &v, sizeof v);
      o.interrupted = true;
    }
    o.socket_ready = n > 0 && socket >= 0 && fds[1].revents != 0;
    return o;
  }

 private:
  int descriptor() noexcept {
    int fd = fd_.load(std::memory_order_acquire);
    if (fd >= 0) return fd;
    const std::lock_guard lock(open_);
    fd = fd_.load(std::memory_order_relaxed);
    if (fd < 0) {
      fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      fd_.store(fd, std::memory_order_release);
    }
    return fd;
  }
  void close() noexcept {
    const int fd = fd_.exchange(-1);
    if (fd >= 0) ::close(fd);
  }

  std::atomic<int> fd_{-1};
  std::mutex open_;  // for the first use only
};

}  // namespace outbox::postgresql::detail
