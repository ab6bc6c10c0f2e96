#pragma once
// The ZeroMQ transport fixtures of the transport conformance suite and the end-to-end tests:
// a publisher bound on tcp://127.0.0.1 (ephemeral port) or ipc:// (in a temp dir), and one
// receiver connected to it. Each fixture has its own endpoint, so tests never share sockets.

#include <unistd.h>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>

#include <outbox/zeromq/zeromq.hpp>
#include "../support/services.hpp"

namespace outbox::test {

template <bool Ipc>
struct zeromq_fixture {
  static constexpr const char* name = Ipc ? "zeromq-ipc" : "zeromq-tcp";
  /// What it needs to run (services.hpp).
  static constexpr service_need service{};
  /// Capability: nack(requeue) delivers again (locally, in the receiver).
  static constexpr bool redelivers_on_nack = true;
  /// Capability: a confirm is the consumer's ack, so someone must consume while the relay
  /// publishes (tests run the consumer concurrently).
  static constexpr bool confirms_on_consumer_ack = true;
  /// Sockets are not thread-safe: concurrent relays share the publisher through a lock.
  static constexpr bool thread_safe_publisher = false;
  /// Capability: one consumer, one pipe: the whole batch arrives in publish order.
  static constexpr bool keeps_batch_order = true;
  /// Capability: a requeued delivery comes again before anything later.
  static constexpr bool redelivers_in_place = true;

  /// The CloudEvents layout of the ZeroMQ transport: `ce-<attribute>` in the headers frame.
  static constexpr std::string_view cloudevents_prefix = outbox::zeromq::cloudevents_prefix;

  // Publisher and receiver are moved into the fixture (they are move-only owners).
  zeromq_fixture() : zeromq_fixture(outbox::cloudevents_options{}, outbox::cloudevents_options{}) {}
  /// A publisher writing CloudEvents as `pub` says, a receiver reading them when `rcv` is not off.
  zeromq_fixture(const outbox::cloudevents_options& pub, const outbox::cloudevents_options& rcv)
      : pub_(outbox::zeromq::publisher(publisher_options(pub))) {
    rcv_ = outbox::zeromq::receiver(outbox::zeromq::receiver_options{
        .endpoint = pub_->endpoint(), .name = "test-consumer", .cloudevents = rcv});
    if (!wait_for_consumers(1))
      throw std::runtime_error("zeromq fixture: the receiver's hello did not arrive within 60 s");
  }
  ~zeromq_fixture() {
    rcv_.reset();
    pub_.reset();
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }
  zeromq_fixture(const zeromq_fixture&) = delete;
  zeromq_fixture& operator=(const zeromq_fixture&) = delete;

  outbox::zeromq::publisher& publisher() { return *pub_; }
  outbox::zeromq::receiver& receiver() { return *rcv_; }

  /// Waits until the publisher has heard `n` consumers' hellos (connection set-up); false if
  /// not within 60 s (a safety net: the wait ends on the hellos).
  [[nodiscard]] bool wait_for_consumers(std::size_t n) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (pub_->consumers() < n && std::chrono::steady_clock::now() < until)
      pub_->poll(std::chrono::milliseconds(10));
    return pub_->consumers() >= n;
  }

  /// Sends an already published message again (a duplicate delivery). Needs a consumer
  /// running concurrently; true once that consumer acked it.
  bool redeliver(const outbox::message& m) {
    const auto r = pub_->publish(std::span(&m, 1),
                                 std::chrono::steady_clock::now() + std::chrono::seconds(60));
    return r.size() == 1 && r[0].confirmed;
  }
  /// Why the receiver last refused an EVENT as not a CloudEvent.
  [[nodiscard]] std::string last_malformed() const { return rcv_->last_malformed(); }
  /// Deliveries a consumer holds without having acked them.
  [[nodiscard]] std::size_t outstanding() const { return rcv_->held(); }

  /// Replaces the receiver with a fresh one (a consumer process that restarted).
  void restart_receiver() {
    rcv_.reset();
    rcv_ = outbox::zeromq::receiver(
        outbox::zeromq::receiver_options{.endpoint = pub_->endpoint(), .name = "restarted"});
  }

 private:
  outbox::zeromq::publisher_options publisher_options(const outbox::cloudevents_options& ce) {
    if constexpr (Ipc) {
      static std::atomic<int> counter{0};
      dir_ = std::filesystem::temp_directory_path() /
             ("outbox-zmq-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
      std::filesystem::create_directories(dir_);
      return {.endpoint = "ipc://" + (dir_ / "relay.sock").string(), .cloudevents = ce};
    } else {
      return {.endpoint = "tcp://127.0.0.1:*", .cloudevents = ce};
    }
  }

  std::filesystem::path dir_;
  std::optional<outbox::zeromq::publisher> pub_;
  std::optional<outbox::zeromq::receiver> rcv_;
};

using zeromq_tcp_fixture = zeromq_fixture<false>;
using zeromq_ipc_fixture = zeromq_fixture<true>;

/// The ZeroMQ transport fixtures of the end-to-end matrix: tcp and ipc.
using zeromq_fixtures = std::tuple<zeromq_tcp_fixture, zeromq_ipc_fixture>;

}  // namespace outbox::test
