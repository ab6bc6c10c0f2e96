#pragma once
// Kafka: the cluster at --kafka, or a mock cluster of the run's own (kafka_cluster.hpp); a
// topic of four partitions and a consumer group of the run's own, two consumers in it.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <outbox/kafka/kafka.hpp>

#include "../args.hpp"
#include "../basics.hpp"
#include "../concepts.hpp"
#include "kafka_cluster.hpp"

namespace fault_harness {

struct kafka_kind {
  static constexpr const char* name = "kafka";
  /// Its cluster: --kafka BOOTSTRAP (host:port,...), default OUTBOX_TEST_KAFKA; none: a mock
  /// cluster of the run's own (own_cluster).
  static constexpr const char* server_flag = "kafka";
  static constexpr const char* server_env = "OUTBOX_TEST_KAFKA";
  static constexpr const char* server_form = "BOOTSTRAP";
  /// The confirm is the broker's delivery report: published is not applied.
  static constexpr bool confirm_is_applied = false;
  /// What --broker-outages can do: the brokers that lead the topic's partitions down, then up
  /// (the run's own mock cluster, kafka_cluster_process; producers and fetches find no
  /// leader). The group's coordinator is a broker of its own that stays up: librdkafka
  /// 2.0.2's mock aborts (rdkafka_mock_cgrp.c: "Assertion `!member->resp' failed") when a
  /// member joins again across its coordinator's outage. A cluster given by --kafka:
  /// node-restart, by --broker-down-cmd/--broker-up-cmd.
  static constexpr const char* outages = "node-restart";
  static constexpr const char* own_cluster_outages = "leaders-down";
  /// A consumer holds deliveries of its own (to copy in a storm) once it has joined the group
  /// and has partitions: 3 s for a first join on the mock, up to a session timeout more when a
  /// member left.
  static constexpr std::chrono::milliseconds consumer_warmup{6000};
  /// The producer's message.max.bytes here; an uncarriable event's record is larger.
  static constexpr std::size_t max_record_bytes = 256 * 1024;
  /// A mock cluster of the run's own in the orchestrator when no --kafka is given.
  static const char* missing(const args&) { return nullptr; }
  /// Without --kafka: that cluster (kafka_cluster_process), started by the orchestrator once the
  /// run's directory exists; its outages are taken by a word to it, no command.
  static bool own_cluster(const args& a) { return a.address(server_flag).empty(); }
  /// Starts it and points the run at it.
  static std::unique_ptr<kafka_cluster_process> start_own_cluster(args& a) {
    auto cluster = std::make_unique<kafka_cluster_process>(a);
    a.address(server_flag) = cluster->bootstrap_servers();
    return cluster;
  }
  /// --role kafka-cluster: the cluster's own process.
  static int run_cluster(const args& a) { return run_kafka_cluster(a, topic(a)); }
  /// Two members of one consumer group, sharing the topic's four partitions: a consumer fault
  /// is also a rebalance (the partitions of a killed member move after its session timeout).
  /// Order per aggregate holds: a key is in one partition, a partition has one owner.
  static int consumers(const args&) { return 2; }
  static std::string topic(const args& a) { return "outbox-faults-" + a.run; }
  static outbox::kafka::publisher publisher(const args& a) {
    const std::string t = topic(a);
    return outbox::kafka::publisher(
        {.bootstrap_servers = a.address(server_flag),
         .config = {{"message.max.bytes", std::to_string(max_record_bytes)},
                    {"linger.ms", "1"},
                    {"reconnect.backoff.max.ms", std::to_string(reconnect_max.count())},
                    {"socket.timeout.ms", std::to_string(request_timeout.count())}},
         .topic = [t](const outbox::message&) { return t; },
         .delivery_timeout = relay_publish_timeout - 500ms});
  }
  /// The consumers' session timeout, librdkafka's longest reconnect backoff and its request
  /// timeout (socket.timeout.ms) here. The mock left fetch requests unanswered after an outage
  /// until the request timeout, 60 s by default: every partition of a member stalled for it.
  static constexpr auto session = 3000ms;
  static constexpr auto reconnect_max = 1000ms;
  static constexpr auto request_timeout = 5000ms;
  /// The longest a consumer waits for a synchronous commit (a revocation) here.
  static constexpr auto commit_timeout = 1000ms;
  /// How long a partition may go without an owner, so that records acked (applied) before it
  /// and not yet committed come back that much later: a killed member is dropped after its
  /// session timeout, the rebalance waits up to another; a broker outage adds the reconnect
  /// backoff and a rebalance of every member (seen: 26 s with a 10 s backoff and two outages).
  static std::chrono::milliseconds partition_stall(int outages) {
    return 2 * session + commit_timeout + request_timeout +
           outages * (reconnect_max + commit_timeout + request_timeout + 3 * session);
  }
  /// A short session, so that a killed member's partitions move within seconds.
  static outbox::kafka::receiver receiver(const args& a) {
    return outbox::kafka::receiver(
        {.bootstrap_servers = a.address(server_flag),
         .group_id = topic(a),
         .topics = {topic(a)},
         .config = {{"session.timeout.ms", std::to_string(session.count())},
                    {"heartbeat.interval.ms", "300"},
                    {"reconnect.backoff.max.ms", std::to_string(reconnect_max.count())},
                    {"socket.timeout.ms", std::to_string(request_timeout.count())},
                    {"fetch.wait.max.ms", "10"}},
         .commit_interval = 20ms,
         .commit_timeout = commit_timeout});
  }
  /// A payload over the producer's message.max.bytes: refused `permanent` before it is
  /// produced, and the relay dead-letters it.
  static void make_uncarriable(outbox::event& e) {
    e.payload.pop_back();  // the closing brace of the JSON object
    e.payload += R"(,"pad":")" + std::string(max_record_bytes + 1024, 'x') + R"("})";
  }
  /// Records of the run's topic past its consumer group's committed offsets (each partition's
  /// high watermark less its committed offset), -1 when the cluster does not answer. Zero once
  /// the run drained and the members committed what they acked: the check on the same records
  /// redelivered, which no count bounds (a receiver whose commit stays behind a record never
  /// acked would deliver everything after it again at each rebalance, and keep it uncommitted).
  static long long uncommitted(const args& a) {
    namespace k = outbox::kafka::detail;
    const std::string t = topic(a);
    auto rk = k::make_handle(
        RD_KAFKA_CONSUMER,
        k::make_conf({{"bootstrap.servers", a.address(server_flag)}, {"group.id", t}}));
    rd_kafka_topic_t* handle = rd_kafka_topic_new(rk.get(), t.c_str(), nullptr);
    const rd_kafka_metadata_t* md = nullptr;
    const auto err = rd_kafka_metadata(rk.get(), 0, handle, &md, 5000);
    rd_kafka_topic_destroy(handle);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) return -1;
    const int n = md->topic_cnt == 1 ? md->topics[0].partition_cnt : 0;
    rd_kafka_metadata_destroy(md);
    if (n <= 0) return -1;
    k::partitions_ptr parts(rd_kafka_topic_partition_list_new(n));
    for (int i = 0; i < n; ++i) rd_kafka_topic_partition_list_add(parts.get(), t.c_str(), i);
    if (rd_kafka_committed(rk.get(), parts.get(), 5000) != RD_KAFKA_RESP_ERR_NO_ERROR) return -1;
    long long behind = 0;
    for (int i = 0; i < n; ++i) {
      std::int64_t low = 0;
      std::int64_t high = 0;
      if (parts->elems[i].err != RD_KAFKA_RESP_ERR_NO_ERROR ||
          rd_kafka_query_watermark_offsets(rk.get(), t.c_str(), i, &low, &high, 5000) !=
              RD_KAFKA_RESP_ERR_NO_ERROR)
        return -1;
      behind += high - std::max(parts->elems[i].offset, low);  // none committed: from the start
    }
    return behind;
  }
  /// The run's own cluster goes with the orchestrator; on a cluster given by --kafka the topic
  /// stays (deleting topics needs the Admin API and rights a test cluster may not grant).
  static void drop(const args&) {}
};
static_assert(transport_kind<kafka_kind>);

}  // namespace fault_harness
