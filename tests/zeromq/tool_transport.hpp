#pragma once
// The relay tool's test over ZeroMQ (outbox_relay_test.cpp, drains_the_outbox_through_each_
// transport): the relay binds an ipc:// endpoint of this process's own; the consumer connects
// once the relay is up, and its ack is the relay's confirm.

#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>

#include <outbox/zeromq/zeromq.hpp>

#include "../support/services.hpp"

namespace outbox_tool_test::transports {

struct zeromq {
  static constexpr const char* name = "zeromq";
  static constexpr outbox::test::service_need service{};

  zeromq() = default;
  zeromq(const zeromq&) = delete;
  zeromq& operator=(const zeromq&) = delete;
  ~zeromq() {
    receiver_.reset();
    std::error_code ec;
    std::filesystem::remove(socket_, ec);
  }

  /// The tool's transport URL.
  [[nodiscard]] std::string url() const { return "zmq+ipc://" + socket_.string(); }
  /// The consumer of what the relay publishes (made on the first call: after the relay bound).
  outbox::zeromq::receiver& receiver() {
    if (!receiver_)
      receiver_.emplace(outbox::zeromq::receiver_options{.endpoint = "ipc://" + socket_.string(),
                                                         .name = "tool-test"});
    return *receiver_;
  }

 private:
  std::filesystem::path socket_ = std::filesystem::temp_directory_path() /
                                  ("outbox-relay-" + std::to_string(::getpid()) + "-each.sock");
  std::optional<outbox::zeromq::receiver> receiver_;
};

}  // namespace outbox_tool_test::transports
