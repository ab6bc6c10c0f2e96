#pragma once
// The Kafka transport fixtures of the transport conformance suite and the end-to-end tests: a
// topic of their own on the cluster at OUTBOX_TEST_KAFKA (bootstrap servers), or, when that is
// empty or unset, on a mock cluster started in this process (librdkafka's rdkafka_mock, shared
// by every fixture of the process); a publisher routing every event to that topic and a receiver
// in a consumer group of its own, joined before the fixture is handed out.

#include <chrono>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>

#include <outbox/kafka/kafka.hpp>
#include <outbox/uuid.hpp>

#include "../support/services.hpp"

namespace outbox::test {

/// The cluster the Kafka tests use: OUTBOX_TEST_KAFKA, or a mock cluster of this process.
class kafka_cluster {
 public:
  static kafka_cluster& instance() {
    static kafka_cluster c;
    return c;
  }
  [[nodiscard]] const std::string& bootstrap_servers() const { return bootstrap_; }
  /// The in-process mock cluster, or nullptr when OUTBOX_TEST_KAFKA names a cluster.
  [[nodiscard]] outbox::kafka::mock_cluster* mock() { return mock_ ? &*mock_ : nullptr; }

  /// Creates `topic` with `partitions` partitions: on the mock directly, on a real cluster with
  /// the Admin API (CreateTopics; an existing topic is an error, so names must be fresh).
  void create_topic(const std::string& topic, int partitions) {
    if (mock_) return mock_->create_topic(topic, partitions, 1);
    outbox::kafka::detail::handle_ptr admin = outbox::kafka::detail::make_handle(
        RD_KAFKA_PRODUCER, outbox::kafka::detail::make_conf({{"bootstrap.servers", bootstrap_}}));
    char err[512] = "";
    rd_kafka_NewTopic_t* nt = rd_kafka_NewTopic_new(topic.c_str(), partitions, 1, err, sizeof err);
    if (nt == nullptr) throw std::runtime_error(std::string("NewTopic: ") + err);
    rd_kafka_queue_t* q = rd_kafka_queue_new(admin.get());
    rd_kafka_CreateTopics(admin.get(), &nt, 1, nullptr, q);
    rd_kafka_event_t* ev = rd_kafka_queue_poll(q, 30'000);
    std::string failure;
    if (ev == nullptr) {
      failure = "no answer in 30 s";
    } else if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      failure = rd_kafka_event_error_string(ev);
    } else {
      std::size_t n = 0;
      const auto* res =
          rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
      if (n == 1 && rd_kafka_topic_result_error(res[0]) != RD_KAFKA_RESP_ERR_NO_ERROR)
        failure = rd_kafka_topic_result_error_string(res[0]);
    }
    if (ev) rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    rd_kafka_NewTopic_destroy(nt);
    if (!failure.empty()) throw std::runtime_error("CreateTopics " + topic + ": " + failure);
  }

 private:
  kafka_cluster() : bootstrap_(service_address("OUTBOX_TEST_KAFKA")) {
    if (bootstrap_.empty()) {
      mock_.emplace(3);
      bootstrap_ = mock_->bootstrap_servers();
    }
  }
  std::string bootstrap_;
  std::optional<outbox::kafka::mock_cluster> mock_;
};

/// Consumer settings for tests: a member that left is replaced within seconds, not 45; a fetch
/// with nothing to return comes back after 10 ms (the mock broker holds it for the whole
/// fetch.wait.max.ms, 500 ms by default, even when a record arrives meanwhile).
inline outbox::kafka::properties kafka_test_consumer_config() {
  return {{"session.timeout.ms", "6000"},
          {"heartbeat.interval.ms", "500"},
          {"fetch.wait.max.ms", "10"}};
}

/// A topic of its own and a receiver in a consumer group of its own that has joined it.
struct joined_receiver {
  std::string topic;
  std::string group;
  std::unique_ptr<outbox::kafka::receiver> receiver;
};

/// A new topic of `partitions` partitions and a receiver that joined a new group on it (one
/// that reads CloudEvents when `cloudevents`).
inline joined_receiver join_new_group(int partitions, bool cloudevents = false) {
  joined_receiver j{"outbox-test-" + make_uuid_v7().to_string(),
                    "outbox-test-group-" + make_uuid_v7().to_string(), nullptr};
  kafka_cluster::instance().create_topic(j.topic, partitions);
  j.receiver = std::make_unique<outbox::kafka::receiver>(outbox::kafka::receiver_options{
      .bootstrap_servers = kafka_cluster::instance().bootstrap_servers(),
      .group_id = j.group,
      .topics = {j.topic},
      .config = kafka_test_consumer_config(),
      .cloudevents = {.mode = cloudevents ? outbox::cloudevents_mode::binary
                                          : outbox::cloudevents_mode::off}});
  if (!j.receiver->wait_for_assignment(std::chrono::seconds(60)))
    throw std::runtime_error("kafka fixture: no partitions assigned within 60 s");
  return j;
}

/// Receivers that joined their groups ahead of time. A consumer group's first join takes 3 s on
/// the mock cluster (a fixed delay of its coordinator), which a fixture per test case would pay
/// every time: instead, a few are joined in the background, concurrently, and each fixture
/// takes one (a fresh topic and group all the same) and starts the next. Not a shared receiver:
/// each is handed to one fixture, on one thread after the other.
class warm_receivers {
 public:
  static warm_receivers& instance() {
    static warm_receivers w;
    return w;
  }
  joined_receiver take(int partitions, bool cloudevents = false) {
    std::unique_lock lock(mutex_);
    auto& pool = pools_[partitions * 2 + (cloudevents ? 1 : 0)];
    while (pool.size() < depth + 1)
      pool.push_back(std::async(std::launch::async, join_new_group, partitions, cloudevents));
    auto next = std::move(pool.front());
    pool.pop_front();
    lock.unlock();
    return next.get();
  }

 private:
  static constexpr std::size_t depth = 3;  ///< Joining in the background at any time, per size.
  warm_receivers() { (void)kafka_cluster::instance(); }  // destroyed after the joins are done
  std::mutex mutex_;
  std::map<int, std::deque<std::future<joined_receiver>>> pools_;
};

template <int Partitions>
struct kafka_fixture_of {
  static constexpr const char* name = Partitions == 1 ? "kafka" : "kafka-partitions";
  /// An empty address means "start a mock cluster here" (services.hpp): the cases always run.
  static constexpr service_need service{.env = "OUTBOX_TEST_KAFKA", .in_process = true};
  /// Capability: nack(requeue) delivers again (locally, in the receiver).
  static constexpr bool redelivers_on_nack = true;
  /// Capability: a confirm is the broker's delivery report, not a consumer's ack.
  static constexpr bool confirms_on_consumer_ack = false;
  /// Not thread-safe (one relay thread): concurrent relays share it through a lock.
  static constexpr bool thread_safe_publisher = false;
  /// Over several partitions the order holds per aggregate (key), not across the batch.
  static constexpr bool keeps_batch_order = Partitions == 1;
  /// Capability: a requeued delivery comes again before the later records of its partition.
  static constexpr bool redelivers_in_place = true;

  /// The CloudEvents layout of the Kafka binding: `ce_<attribute>` headers.
  static constexpr std::string_view cloudevents_prefix = outbox::kafka::cloudevents_prefix;

  kafka_fixture_of() : kafka_fixture_of(outbox::cloudevents_options{}, {}) {}
  /// A publisher writing CloudEvents as `pub` says, a receiver reading them when `rcv` is not off.
  kafka_fixture_of(outbox::cloudevents_options pub, const outbox::cloudevents_options& rcv)
      : pub_ce_(std::move(pub)), rcv_ce_(rcv) {
    auto joined =
        warm_receivers::instance().take(Partitions, rcv_ce_.mode != outbox::cloudevents_mode::off);
    topic_ = std::move(joined.topic);
    group_ = std::move(joined.group);
    rcv_ = std::move(joined.receiver);
    pub_.emplace(publisher_options());
    pub_->connect(std::chrono::seconds(60));
  }
  kafka_fixture_of(const kafka_fixture_of&) = delete;
  kafka_fixture_of& operator=(const kafka_fixture_of&) = delete;

  outbox::kafka::publisher& publisher() { return *pub_; }
  outbox::kafka::receiver& receiver() { return *rcv_; }
  const std::string& topic() const { return topic_; }
  const std::string& group() const { return group_; }
  static const std::string& bootstrap() { return kafka_cluster::instance().bootstrap_servers(); }

  outbox::kafka::publisher_options publisher_options() const {
    const std::string t = topic_;
    return {.bootstrap_servers = bootstrap(),
            .topic = [t](const outbox::message&) { return t; },
            .delivery_timeout = std::chrono::seconds(5),
            .cloudevents = pub_ce_};
  }
  outbox::kafka::receiver_options receiver_options() const {
    return {.bootstrap_servers = bootstrap(),
            .group_id = group_,
            .topics = {topic_},
            .config = kafka_test_consumer_config(),
            .cloudevents = rcv_ce_};
  }
  /// Why the receiver last skipped a record as not an event.
  [[nodiscard]] std::string last_malformed() const { return rcv_->stats().last_malformed; }

  /// Publishes an already published message again (a duplicate delivery); true once confirmed.
  bool redeliver(const outbox::message& m) {
    const auto r = pub_->publish(std::span(&m, 1),
                                 std::chrono::steady_clock::now() + std::chrono::seconds(60));
    return r.size() == 1 && r[0].confirmed;
  }
  /// Records of the topic not yet acked by the receiver's group (the receiver's lag).
  [[nodiscard]] std::size_t outstanding() {
    return static_cast<std::size_t>(rcv_->lag(std::chrono::seconds(60)));
  }
  /// Records the receiver's client fetched and `receive` has not taken yet: the length of its
  /// consumer queue (records, and the rare event between them, such as a commit's result).
  [[nodiscard]] std::size_t fetched_ahead() const {
    rd_kafka_queue_t* q = rd_kafka_queue_get_consumer(rcv_->handle());
    const std::size_t n = q != nullptr ? rd_kafka_queue_length(q) : 0;
    if (q != nullptr) rd_kafka_queue_destroy(q);
    return n;
  }
  /// Replaces the receiver with a fresh member of the same group (a consumer that restarted),
  /// and waits until it has its partitions.
  void restart_receiver() {
    rcv_.reset();
    rcv_ = std::make_unique<outbox::kafka::receiver>(receiver_options());
    if (!rcv_->wait_for_assignment(std::chrono::seconds(60)))
      throw std::runtime_error("kafka fixture: no partitions assigned within 60 s");
  }

 private:
  outbox::cloudevents_options pub_ce_;
  outbox::cloudevents_options rcv_ce_;
  std::string topic_;
  std::string group_;
  std::optional<outbox::kafka::publisher> pub_;
  std::unique_ptr<outbox::kafka::receiver> rcv_;
};

/// A topic of one partition: the whole batch in publish order.
using kafka_fixture = kafka_fixture_of<1>;
/// A topic of four partitions: order per aggregate (the key), as in production.
using kafka_partitions_fixture = kafka_fixture_of<4>;

/// The Kafka transport fixtures of the end-to-end matrix: four partitions.
using kafka_fixtures = std::tuple<kafka_partitions_fixture>;

}  // namespace outbox::test
