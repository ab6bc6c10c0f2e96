#pragma once
/// @file
/// `outbox::kafka::mock_cluster`: librdkafka's built-in mock cluster (rdkafka_mock.h), a real
/// Kafka protocol endpoint on loopback with no disk and no replication, owned as a move-only
/// object. For tests, demos and benchmarks (tools/kafka_mock_cluster serves one to other
/// processes); point production code at a real cluster. What the mock of librdkafka 2.0.2 does
/// and does not do is in adapters/kafka/README.md.

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include <librdkafka/rdkafka.h>
// rdkafka_mock.h must follow rdkafka.h.
#include <librdkafka/rdkafka_mock.h>

#include <outbox/error.hpp>
#include <outbox/kafka/detail/client.hpp>

namespace outbox::kafka {

/// A mock Kafka cluster of `brokers` brokers (ids 1..brokers) on ephemeral loopback ports,
/// served by librdkafka's threads until it is destroyed. Topics are created on first use with
/// 4 partitions, or by `create_topic`.
class mock_cluster {
 public:
  /// @throws outbox::error `transient` when the cluster cannot be started.
  explicit mock_cluster(int brokers = 3) {
    // The cluster lives inside a client instance of its own. No bootstrap servers: it talks to
    // nobody (warnings about that are not logged: log level 3). Its brokers' sockets take the
    // host's socket options: without TCP_NODELAY (Nagle), a response behind an unacknowledged
    // one waits for the client's delayed ACK, 40 ms a round (a producer waiting for each batch
    // of 1,000 reached 23,000 messages/s; with it, 270,000). Real brokers set TCP_NODELAY.
    auto conf = detail::make_conf({{"log_level", "3"}, {"socket.nagle.disable", "true"}});
    host_ = detail::make_handle(RD_KAFKA_PRODUCER, std::move(conf));
    cluster_ = rd_kafka_mock_cluster_new(host_.get(), brokers);
    if (cluster_ == nullptr)
      throw error(errc::transient, "kafka", {}, "the mock cluster could not be started");
    bootstraps_ = rd_kafka_mock_cluster_bootstraps(cluster_);
  }
  mock_cluster(const mock_cluster&) = delete;
  mock_cluster& operator=(const mock_cluster&) = delete;
  /// Takes over the cluster of `o`, which may then only be destroyed or assigned to.
  mock_cluster(mock_cluster&& o) noexcept
      : host_(std::move(o.host_)),
        cluster_(std::exchange(o.cluster_, nullptr)),
        bootstraps_(std::move(o.bootstraps_)) {}
  /// Destroys this cluster, then takes over that of `o`, which may then only be destroyed or
  /// assigned to.
  mock_cluster& operator=(mock_cluster&& o) noexcept {
    if (this != &o) {
      destroy();
      host_ = std::move(o.host_);
      cluster_ = std::exchange(o.cluster_, nullptr);
      bootstraps_ = std::move(o.bootstraps_);
    }
    return *this;
  }
  ~mock_cluster() { destroy(); }

  /// `127.0.0.1:port,...`: the value of `bootstrap.servers` for clients of this cluster.
  [[nodiscard]] const std::string& bootstrap_servers() const noexcept { return bootstraps_; }

  /// Creates `topic` with `partitions` partitions (before anyone uses it).
  /// @throws outbox::error `transient` when the mock refuses.
  void create_topic(const std::string& topic, int partitions = 4, int replication = 1) {
    check(rd_kafka_mock_topic_create(cluster_, topic.c_str(), partitions, replication),
          "create topic");
  }

  /// Makes broker `broker` the leader of `partition` of `topic`.
  void set_partition_leader(const std::string& topic, std::int32_t partition, std::int32_t broker) {
    check(rd_kafka_mock_partition_set_leader(cluster_, topic.c_str(), partition, broker),
          "partition leader");
  }
  /// Makes broker `broker` the coordinator of the consumer group `group`.
  void set_group_coordinator(const std::string& group, std::int32_t broker) {
    check(rd_kafka_mock_coordinator_set(cluster_, "group", group.c_str(), broker), "coordinator");
  }

  /// Takes broker `id` down (its connections are closed and it accepts none) or up again.
  void set_broker_down(std::int32_t id) {
    check(rd_kafka_mock_broker_set_down(cluster_, id), "broker down");
  }
  /// Brings broker `id` up again after `set_broker_down`.
  void set_broker_up(std::int32_t id) {
    check(rd_kafka_mock_broker_set_up(cluster_, id), "broker up");
  }

  /// Kafka API keys of the requests most worth failing.
  static constexpr std::int16_t produce_api = 0;
  static constexpr std::int16_t fetch_api = 1;          ///< Fetch: a consumer reads.
  static constexpr std::int16_t offset_commit_api = 8;  ///< OffsetCommit: a consumer commits.
  static constexpr std::int16_t heartbeat_api = 12;     ///< Heartbeat: a group member stays in.

  /// The next requests of Kafka API `api_key` (`produce_api`, `fetch_api`, ...) fail with
  /// `errors`, one each, in order.
  void push_request_errors(std::int16_t api_key,
                           std::initializer_list<rd_kafka_resp_err_t> errors) {
    rd_kafka_mock_push_request_errors_array(cluster_, api_key, errors.size(), errors.begin());
  }
  /// Forgets request errors pushed and not yet used.
  void clear_request_errors(std::int16_t api_key) {
    rd_kafka_mock_clear_request_errors(cluster_, api_key);
  }

  /// The librdkafka mock handle, for the rest of rdkafka_mock.h.
  [[nodiscard]] rd_kafka_mock_cluster_t* handle() const noexcept { return cluster_; }

 private:
  static void check(rd_kafka_resp_err_t err, const char* what) {
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
      throw error(errc::transient, "kafka", error_name(err),
                  std::string("mock cluster: ") + what + ": " + rd_kafka_err2str(err));
  }
  void destroy() noexcept {
    if (cluster_ != nullptr) rd_kafka_mock_cluster_destroy(cluster_);
    cluster_ = nullptr;
    host_.reset();
  }

  detail::handle_ptr host_;
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
  std::string bootstraps_;
};

}  // namespace outbox::kafka
