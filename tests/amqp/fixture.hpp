#pragma once
// The AMQP (RabbitMQ) transport fixtures of the transport conformance suite and the end-to-end
// tests: a unique exchange and queue per fixture on the broker at OUTBOX_TEST_AMQP, both deleted
// afterwards. The receiver connects (declaring and binding its queue) before anything is
// published, so nothing is unroutable. amqp_tls_fixture does the same over amqps://
// (OUTBOX_TEST_AMQPS), verifying the broker and showing a client certificate.

#include <chrono>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include <outbox/amqp/amqp.hpp>
#include <outbox/uuid.hpp>

#include "../support/services.hpp"

namespace outbox::test {

/// A plain rabbitmq-c connection for the tests' own checks (queue depth, clean-up).
class amqp_admin {
 public:
  explicit amqp_admin(const outbox::amqp::connection_options& c) : conn_(c) { conn_.ensure(); }
  explicit amqp_admin(const std::string& url)
      : amqp_admin(outbox::amqp::connection_options{.url = url}) {}
  outbox::amqp::connection& conn() { return conn_; }

  /// Ready messages in `queue` (not those handed out and unacknowledged).
  std::uint32_t ready(const std::string& queue) {
    conn_.ensure();
    auto* ok = amqp_queue_declare(conn_.state(), outbox::amqp::connection::channel,
                                  outbox::amqp::bytes(queue), 1, 0, 0, 0, amqp_empty_table);
    conn_.check(amqp_get_rpc_reply(conn_.state()), "queue.declare (passive)");
    return ok->message_count;
  }
  void delete_queue(const std::string& queue) {
    conn_.ensure();
    amqp_queue_delete(conn_.state(), outbox::amqp::connection::channel, outbox::amqp::bytes(queue),
                      0, 0);
    conn_.check(amqp_get_rpc_reply(conn_.state()), "queue.delete");
  }
  void delete_exchange(const std::string& exchange) {
    conn_.ensure();
    amqp_exchange_delete(conn_.state(), outbox::amqp::connection::channel,
                         outbox::amqp::bytes(exchange), 0);
    conn_.check(amqp_get_rpc_reply(conn_.state()), "exchange.delete");
  }

 private:
  outbox::amqp::connection conn_;
};

struct amqp_fixture {
  static constexpr const char* name = "amqp";
  /// What it needs to run (services.hpp).
  static constexpr service_need service{.env = "OUTBOX_TEST_AMQP"};
  /// Capability: nack(requeue) delivers again (the broker requeues it, marked redelivered).
  static constexpr bool redelivers_on_nack = true;
  /// Capability: a confirm is the broker's (publisher confirms), not a consumer's ack.
  static constexpr bool confirms_on_consumer_ack = false;
  /// One connection per publisher, not thread-safe: concurrent relays share it through a lock.
  static constexpr bool thread_safe_publisher = false;
  /// Capability: one queue, one consumer: the whole batch arrives in publish order.
  static constexpr bool keeps_batch_order = true;
  /// The broker requeues a nacked delivery at its place in the queue, but the later ones are
  /// out already under the receiver's prefetch: they come first (docs/guarantees.md, Order per
  /// aggregate).
  static constexpr bool redelivers_in_place = false;

  static std::string url() { return service_address("OUTBOX_TEST_AMQP"); }

  /// The CloudEvents layout of the AMQP binding: `cloudEvents:<attribute>` headers.
  static constexpr std::string_view cloudevents_prefix = outbox::amqp::cloudevents_prefix;

  amqp_fixture() : amqp_fixture(outbox::amqp::connection_options{.url = url()}) {}
  /// A publisher writing CloudEvents as `pub` says, a receiver reading them when `rcv` is not off.
  amqp_fixture(outbox::cloudevents_options pub, outbox::cloudevents_options rcv)
      : amqp_fixture(outbox::amqp::connection_options{.url = url()}, std::move(pub),
                     std::move(rcv)) {}
  ~amqp_fixture() {
    rcv_.reset();
    pub_.reset();
    try {
      amqp_admin admin(connection_);
      admin.delete_queue(queue_);
      admin.delete_exchange(exchange_);
    } catch (const std::exception&) {
      // the broker went away: nothing left to clean up on it
    }
  }
  amqp_fixture(const amqp_fixture&) = delete;
  amqp_fixture& operator=(const amqp_fixture&) = delete;

  outbox::amqp::publisher& publisher() { return *pub_; }
  outbox::amqp::receiver& receiver() { return *rcv_; }
  const std::string& exchange() const { return exchange_; }
  const std::string& queue() const { return queue_; }

  outbox::amqp::publisher_options publisher_options() const {
    return {.connection = connection_, .exchange = exchange_, .cloudevents = pub_ce_};
  }
  outbox::amqp::receiver_options receiver_options() const {
    return {
        .connection = connection_, .queue = queue_, .exchange = exchange_, .cloudevents = rcv_ce_};
  }
  /// Why the receiver last rejected a delivery as not an event.
  [[nodiscard]] std::string last_malformed() const { return rcv_->last_malformed(); }

  /// Publishes an already published message again (a duplicate delivery); true once confirmed.
  bool redeliver(const outbox::message& m) {
    const auto r = pub_->publish(std::span(&m, 1),
                                 std::chrono::steady_clock::now() + std::chrono::seconds(60));
    return r.size() == 1 && r[0].confirmed;
  }
  /// Deliveries not yet acknowledged: ready in the queue plus held by the receiver (a delivery
  /// the broker sent and the receiver has not read yet is counted by neither; the tests ask
  /// after the consumer went idle).
  [[nodiscard]] std::size_t outstanding() {
    return amqp_admin(connection_).ready(queue_) + (rcv_ ? rcv_->held() : 0u);
  }
  /// Closes the receiver (its queue stays, bound): messages wait in the queue for other clients.
  void close_receiver() { rcv_.reset(); }
  /// Replaces the receiver with a fresh one (a consumer process that restarted).
  void restart_receiver() {
    rcv_.reset();
    rcv_ = outbox::amqp::receiver(receiver_options());  // moved in
    rcv_->connect();
  }

 protected:
  /// Every client of the fixture (publisher, receiver, admin) connects with `c`.
  explicit amqp_fixture(outbox::amqp::connection_options c, outbox::cloudevents_options pub = {},
                        outbox::cloudevents_options rcv = {})
      : connection_(std::move(c)),
        pub_ce_(std::move(pub)),
        rcv_ce_(std::move(rcv)),
        exchange_("outbox-test-" + make_uuid_v7().to_string()),
        queue_("outbox-test-q-" + make_uuid_v7().to_string()),
        pub_(outbox::amqp::publisher(publisher_options())) {
    restart_receiver();
    pub_->connect();
  }

 private:
  outbox::amqp::connection_options connection_;
  outbox::cloudevents_options pub_ce_;
  outbox::cloudevents_options rcv_ce_;
  std::string exchange_;
  std::string queue_;
  std::optional<outbox::amqp::publisher> pub_;
  std::optional<outbox::amqp::receiver> rcv_;
};

/// The AMQP fixture over TLS: amqps:// to the broker's TLS listener (OUTBOX_TEST_AMQPS), the
/// broker verified against the test CA and host name, a client certificate shown (the files in
/// OUTBOX_TEST_AMQP_TLS_DIR, written by scripts/services.sh).
struct amqp_tls_fixture : amqp_fixture {
  static constexpr const char* name = "amqps";
  static constexpr service_need service{.env = "OUTBOX_TEST_AMQPS"};

  static std::string url() { return service_address("OUTBOX_TEST_AMQPS"); }
  /// A file of the TLS directory (ca.pem, client.pem, ...).
  static std::string tls_file(const std::string& name) {
    return service_address("OUTBOX_TEST_AMQP_TLS_DIR") + "/" + name;
  }
  static outbox::amqp::connection_options connection() {
    return {.url = url(),
            .tls = {.ca_cert = tls_file("ca.pem"),
                    .client_cert = tls_file("client.pem"),
                    .client_key = tls_file("client.key")}};
  }

  amqp_tls_fixture() : amqp_fixture(connection()) {}
};

/// The AMQP transport fixtures of the end-to-end matrix.
using amqp_fixtures = std::tuple<amqp_fixture>;

}  // namespace outbox::test
