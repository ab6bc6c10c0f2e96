#pragma once
/// @file
/// The second thread of a pipelined relay (`relay::run` with `relay_options::pipeline`).

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <stop_token>
#include <thread>
#include <utility>

namespace outbox::detail {

/// The second thread of a pipelined `relay::run`: runs one job at a time (the database's side of
/// a batch) while the relay's thread publishes. `wait` returns the job's exception, if any.
class pipeline_worker {
 public:
  pipeline_worker() : thread_([this](std::stop_token stop) { loop(stop); }) {}
  pipeline_worker(const pipeline_worker&) = delete;
  pipeline_worker& operator=(const pipeline_worker&) = delete;
  ~pipeline_worker() = default;  // thread_ (declared last) stops and joins first

  /// Hands over a job; the previous one must have been waited for.
  void submit(std::function<void()> job) {
    {
      std::lock_guard lock(mutex_);
      job_ = std::move(job);
      busy_ = true;
    }
    cv_.notify_all();
  }

  /// Waits until the job handed over (if any) is done.
  std::exception_ptr wait() {
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [&] { return !busy_; });
    return std::exchange(failure_, nullptr);
  }

 private:
  void loop(const std::stop_token& stop) {
    std::unique_lock lock(mutex_);
    while (cv_.wait(lock, stop, [&] { return static_cast<bool>(job_); })) {
      std::function<void()> job = std::exchange(job_, nullptr);
      lock.unlock();
      std::exception_ptr failure;
      try {
        job();
      } catch (...) {
        failure = std::current_exception();
      }
      lock.lock();
      failure_ = failure;
      busy_ = false;
      done_cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable_any cv_;
  std::condition_variable_any done_cv_;
  std::function<void()> job_;
  bool busy_ = false;
  std::exception_ptr failure_;
  std::jthread thread_;
};

}  // namespace outbox::detail
