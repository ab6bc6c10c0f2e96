#pragma once
/// @file
/// The Kafka receiver's state shared with librdkafka's callbacks: the offsets each assigned
/// partition may commit, and what a rebalance, an error or a commit result changes in it.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <librdkafka/rdkafka.h>

#include <outbox/concepts/transport.hpp>
#include <outbox/error.hpp>
#include <outbox/kafka/detail/client.hpp>
#include <outbox/kafka/protocol.hpp>
#include <outbox/kafka/receiver_options.hpp>
#include <outbox/message.hpp>

namespace outbox::kafka::detail {

/// The offsets of one assigned partition this member has seen.
struct partition_offsets {
  std::set<std::int64_t> outstanding{};  ///< Handed out, not yet acked.
  std::int64_t next = -1;                ///< One past the highest offset seen (-1: none yet).
  std::int64_t committed = -1;           ///< The highest offset the coordinator confirmed.
  std::uint64_t generation = 0;          ///< Bumped at each assignment: older tags are stale.

  /// What may be committed: the first offset not yet acked, or `next` when all are.
  [[nodiscard]] std::int64_t committable() const noexcept {
    return outstanding.empty() ? next : *outstanding.begin();
  }
};

/// What the rebalance and commit callbacks touch: at a stable address (the receiver moves).
struct consumer_state {
  using key = std::pair<std::string, std::int32_t>;
  struct held {
    key tp;
    std::int64_t offset = 0;
    std::uint64_t generation = 0;
  };
  std::map<key, partition_offsets> partitions{};
  std::unordered_map<std::uint64_t, held> tags{};  ///< Deliveries handed out, by tag.
  std::deque<std::pair<delivery, held>> requeued{};
  std::uint64_t generation = 0;
  std::size_t assigned = 0;
  std::chrono::milliseconds commit_timeout{5000};  ///< receiver_options::commit_timeout.
  /// While closing: synchronous commits end by then too (close_timeout).
  std::chrono::steady_clock::time_point commit_deadline =
      std::chrono::steady_clock::time_point::max();
  rd_kafka_resp_err_t client_error = RD_KAFKA_RESP_ERR_NO_ERROR;  ///< See on_error.
  std::string client_reason{};
  receiver_stats stats{};

  /// Commits the committable offsets of `which` (every partition when null) that are past what
  /// the coordinator confirmed: a commit that failed (a rebalance in progress, the coordinator
  /// away) is sent again by the next one, not only once another record is acked. Returns the
  /// error of a synchronous commit (an asynchronous one's comes to `on_commit`).
  rd_kafka_resp_err_t commit(rd_kafka_t* rk, const rd_kafka_topic_partition_list_t* which,
                             bool async) {
    partitions_ptr list(rd_kafka_topic_partition_list_new(4));
    const auto add = [&](const key& k, const partition_offsets& p) {
      const auto at = p.committable();
      if (at < 0 || at <= p.committed) return;
      rd_kafka_topic_partition_list_add(list.get(), k.first.c_str(), k.second)->offset = at;
    };
    if (which == nullptr) {
      for (const auto& [k, p] : partitions) add(k, p);
    } else {
      for (int i = 0; i < which->cnt; ++i) {
        const auto& e = which->elems[i];
        auto it = partitions.find({e.topic, e.partition});
        if (it != partitions.end()) add(it->first, it->second);
      }
    }
    if (list->cnt == 0) return RD_KAFKA_RESP_ERR_NO_ERROR;
    ++stats.commits;
    if (async) {
      (void)rd_kafka_commit(rk, list.get(), 1);
      return RD_KAFKA_RESP_ERR_NO_ERROR;
    }
    // Waited for on a queue of its own, for at most commit_timeout: rd_kafka_commit's own wait
    // lasts until socket.timeout.ms (a minute) when the coordinator is away, and a consumer
    // stuck in it consumes nothing (seen: every partition of a group stalled 64 s after a
    // broker outage). A commit that times out may still land; the coordinator refuses it
    // should the group have moved on to another generation.
    rd_kafka_queue_t* q = rd_kafka_queue_new(rk);
    auto err = rd_kafka_commit_queue(rk, list.get(), q, nullptr, nullptr);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      const auto wait = std::min<std::chrono::steady_clock::duration>(
          commit_timeout, commit_deadline - std::chrono::steady_clock::now());
      rd_kafka_event_t* ev = rd_kafka_queue_poll(q, detail::timeout_ms(wait));
      if (ev == nullptr) {
        err = RD_KAFKA_RESP_ERR__TIMED_OUT;
      } else {
        err = rd_kafka_event_error(ev);
        confirmed(rd_kafka_event_topic_partition_list(ev));
        rd_kafka_event_destroy(ev);
      }
    }
    rd_kafka_queue_destroy(q);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) ++stats.commit_failures;
    return err;
  }

  /// Records what the coordinator confirmed (each partition of `offsets` has its own error).
  void confirmed(const rd_kafka_topic_partition_list_t* offsets) noexcept {
    if (offsets == nullptr) return;
    for (int i = 0; i < offsets->cnt; ++i) {
      const auto& e = offsets->elems[i];
      if (e.err != RD_KAFKA_RESP_ERR_NO_ERROR || e.offset < 0) continue;
      try {
        auto it = partitions.find({e.topic, e.partition});
        if (it != partitions.end()) it->second.committed = std::max(it->second.committed, e.offset);
      } catch (...) {  // out of memory for the key: the offset is committed again later
      }
    }
  }

  void forget(const rd_kafka_topic_partition_list_t* revoked) {
    for (int i = 0; i < revoked->cnt; ++i) {
      const key k{revoked->elems[i].topic, revoked->elems[i].partition};
      partitions.erase(k);
      std::erase_if(tags, [&](const auto& t) { return t.second.tp == k; });
      const auto before = requeued.size();
      std::erase_if(requeued, [&](const auto& r) { return r.second.tp == k; });
      stats.dropped += before - requeued.size();
    }
  }

  static void on_rebalance(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                           rd_kafka_topic_partition_list_t* parts, void* self) noexcept {
    auto* s = static_cast<consumer_state*>(self);
    const bool cooperative = std::string_view(rd_kafka_rebalance_protocol(rk)) == "COOPERATIVE";
    ++s->stats.rebalances;
    try {
      if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        ++s->generation;
        for (int i = 0; i < parts->cnt; ++i) {
          auto& p = s->partitions[{parts->elems[i].topic, parts->elems[i].partition}];
          p = partition_offsets{};
          p.generation = s->generation;
        }
        if (cooperative)
          error_ptr(rd_kafka_incremental_assign(rk, parts));
        else
          rd_kafka_assign(rk, parts);
        s->assigned += static_cast<std::size_t>(parts->cnt);
        return;
      }
      // Revoked (or an error): what was acked is committed before the partitions go, unless
      // they are lost already (another member may own them); what was not is redelivered to
      // their next owner, and the inbox absorbs what had committed.
      if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS && !rd_kafka_assignment_lost(rk))
        (void)s->commit(rk, parts, false);
      s->forget(parts);
      if (cooperative) {
        error_ptr(rd_kafka_incremental_unassign(rk, parts));
        s->assigned -= std::min(s->assigned, static_cast<std::size_t>(parts->cnt));
      } else {
        rd_kafka_assign(rk, nullptr);
        s->assigned = 0;
      }
    } catch (...) {  // out of memory: give the partitions up, they are redelivered elsewhere
      rd_kafka_assign(rk, nullptr);
      s->assigned = 0;
    }
  }

  /// A client error (served inside `receive`): kept when it is one the consumer's `run` must
  /// hear of (librdkafka reports these only here, and retries on its own): every broker away,
  /// credentials, TLS or rights refused, a fatal error. Disconnects it rides out are not kept.
  static void on_error(rd_kafka_t*, int code, const char* reason, void* self) noexcept {
    auto* s = static_cast<consumer_state*>(self);
    switch (const auto err = static_cast<rd_kafka_resp_err_t>(code)) {
      case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
      case RD_KAFKA_RESP_ERR__AUTHENTICATION:
      case RD_KAFKA_RESP_ERR__SSL:
      case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
      case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
      case RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED:
      case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
      case RD_KAFKA_RESP_ERR__FATAL:
        s->client_error = err;
        try {
          s->client_reason = reason ? reason : "";
        } catch (...) {
        }
        break;
      default:
        break;
    }
  }

  /// The outcome of an asynchronous commit (served inside `receive`).
  static void on_commit(rd_kafka_t*, rd_kafka_resp_err_t err,
                        rd_kafka_topic_partition_list_t* offsets, void* self) noexcept {
    auto* s = static_cast<consumer_state*>(self);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR && err != RD_KAFKA_RESP_ERR__NO_OFFSET)
      ++s->stats.commit_failures;
    s->confirmed(offsets);
  }
};

}  // namespace outbox::kafka::detail
