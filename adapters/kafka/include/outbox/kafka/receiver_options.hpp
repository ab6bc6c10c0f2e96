#pragma once
/// @file
/// The Kafka receiver's options, counters and record positions.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <outbox/kafka/protocol.hpp>

namespace outbox::kafka {

/// Options of a receiver. Fill with designated initialisers.
struct receiver_options {
  /// `host:port[,host:port...]` (librdkafka's `bootstrap.servers`; or give that in `config`).
  std::string bootstrap_servers{};
  /// Required: the consumer group (`group.id`). Every member of one consumer service uses the
  /// same group; the partitions are shared among them.
  std::string group_id{};
  /// Topics to subscribe to: names, or regular expressions starting with `^`. The default
  /// follows the publisher's default pattern (every `outbox.event.*` topic).
  std::vector<std::string> topics{"^outbox\\.event\\..*"};
  /// Any librdkafka consumer property, passed through (security, TLS, SASL, `session.timeout.ms`,
  /// `partition.assignment.strategy`, ...); values never appear in errors. `auto.offset.reset`
  /// defaults to `earliest` here (a new group starts with what the topic holds, not after it).
  /// Refused (`misconfigured`): `enable.auto.commit` or `enable.auto.offset.store` other than
  /// false (an offset committed before the transaction loses the event on a crash), and
  /// `group.id` (set `group_id`).
  properties config{};
  /// How often acknowledged offsets are committed (asynchronously; and always synchronously when
  /// partitions are revoked and on close). Longer: fewer commits, more redeliveries after a
  /// crash (the inbox absorbs them). 0: synchronously at every ack.
  std::chrono::milliseconds commit_interval{100};
  /// The longest a synchronous commit waits (when partitions are revoked, on close, `commit`):
  /// a group coordinator that does not answer must not stall consumption. What could not be
  /// committed is delivered again to the partition's next owner (the inbox absorbs it).
  std::chrono::milliseconds commit_timeout{5000};
  /// The longest the destructor waits to commit and leave the group.
  std::chrono::milliseconds close_timeout{10000};
  /// CloudEvents: any mode but `off` reads binary-mode (`ce_*` headers) and structured-mode
  /// records as well as plain outbox records (`decode_cloudevent`); `source` is not used.
  cloudevents_options cloudevents{};
};

/// Counters of one receiver.
struct receiver_stats {
  std::uint64_t received = 0;   ///< Records handed out (redeliveries of a requeue included).
  std::uint64_t malformed = 0;  ///< Records that are not outbox events: skipped, offset passed.
  std::uint64_t commits = 0;    ///< Offset commits sent.
  std::uint64_t commit_failures = 0;  ///< Commits the group coordinator refused (redelivered).
  std::uint64_t rebalances = 0;       ///< Assignments and revocations.
  std::uint64_t dropped = 0;  ///< Deliveries held when their partition was revoked (redelivered).
  std::string last_malformed{};  ///< Why the last record counted in `malformed` was skipped.
};

/// Where a record sits in Kafka.
struct record_position {
  std::string topic{};          ///< The topic.
  std::int32_t partition = -1;  ///< The partition (-1 until set).
  std::int64_t offset = -1;     ///< The offset in that partition (-1 until set).
  /// Equal when topic, partition and offset are.
  friend bool operator==(const record_position&, const record_position&) = default;
};

}  // namespace outbox::kafka
