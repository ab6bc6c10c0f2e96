#pragma once
/// @file
/// `outbox::kafka::receiver`: the consumer's side of the Kafka transport. A consumer-group member
/// that never commits an offset on its own: an offset is committed only once every record before
/// it in its partition was acked, i.e. after the consumer's transaction committed.

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
#include <outbox/kafka/detail/consumer_state.hpp>
#include <outbox/kafka/protocol.hpp>
#include <outbox/kafka/receiver_options.hpp>
#include <outbox/message.hpp>

namespace outbox::kafka {

/// A `concepts::receiver` over a Kafka consumer group.
///
/// Offsets: a record's offset is committed only after it and every record before it in its
/// partition were acked (per partition, in order; a later offset is never committed past an
/// unacked earlier one). `nack(d, true)` keeps the record's offset uncommitted and delivers it
/// again from here (marked redelivered) before anything newer; `nack(d, false)` passes it (Kafka
/// has no dead-letter route of its own: keep `dead_letter_route::store`). A record that is not
/// an outbox event is skipped and counted (`stats().malformed`), its offset passed.
///
/// Rebalances: when partitions are revoked, what was acked is committed synchronously and what
/// was not is forgotten (an ack for it later is ignored): the partition's next owner reads it
/// again from the committed offset, and the inbox absorbs whatever had been applied here.
///
/// Threading: one thread (the consumer's). Rebalances and commits are served inside `receive`.
/// Move-only; the callbacks' state is on the heap.
class receiver {
 public:
  /// Creates the consumer and subscribes; the group is joined inside the first `receive` calls
  /// (or `wait_for_assignment`).
  /// @throws outbox::error `misconfigured` (an unknown or refused property, no group, no topic).
  explicit receiver(receiver_options options)
      : options_(std::move(options)), state_(std::make_unique<detail::consumer_state>()) {
    check_options();
    properties forced{{"group.id", options_.group_id},
                      {"enable.auto.commit", "false"},
                      {"enable.auto.offset.store", "false"},
                      {"enable.partition.eof", "false"}};
    if (!options_.bootstrap_servers.empty())
      forced.emplace("bootstrap.servers", options_.bootstrap_servers);
    auto conf = detail::make_conf(options_.config, forced);
    if (!options_.config.contains("auto.offset.reset"))
      detail::set(conf.get(), "auto.offset.reset", "earliest");
    if (!options_.config.contains("socket.nagle.disable"))  // TCP_NODELAY, as the Java client
      detail::set(conf.get(), "socket.nagle.disable", "true");
    state_->commit_timeout = options_.commit_timeout;
    rd_kafka_conf_set_opaque(conf.get(), state_.get());
    rd_kafka_conf_set_rebalance_cb(conf.get(), &detail::consumer_state::on_rebalance);
    rd_kafka_conf_set_offset_commit_cb(conf.get(), &detail::consumer_state::on_commit);
    rd_kafka_conf_set_error_cb(conf.get(), &detail::consumer_state::on_error);
    rk_ = detail::make_handle(RD_KAFKA_CONSUMER, std::move(conf));
    rd_kafka_poll_set_consumer(rk_.get());
    detail::partitions_ptr topics(
        rd_kafka_topic_partition_list_new(static_cast<int>(options_.topics.size())));
    for (const auto& t : options_.topics)
      rd_kafka_topic_partition_list_add(topics.get(), t.c_str(), RD_KAFKA_PARTITION_UA);
    if (const auto err = rd_kafka_subscribe(rk_.get(), topics.get()); err)
      throw error(errc::misconfigured, "kafka", error_name(err),
                  std::string("subscribe: ") + rd_kafka_err2str(err));
  }

  receiver(const receiver&) = delete;
  receiver& operator=(const receiver&) = delete;
  /// Moves the consumer and its state; a moved-from receiver may only be destroyed or assigned
  /// to.
  receiver(receiver&&) noexcept = default;
  /// Closes this consumer as the destructor does, then takes over that of `other`.
  receiver& operator=(receiver&& other) noexcept {
    if (this != &other) {
      close();
      options_ = std::move(other.options_);
      next_tag_ = other.next_tag_;
      last_commit_ = other.last_commit_;
      state_ = std::move(other.state_);
      rk_ = std::move(other.rk_);
    }
    return *this;
  }
  /// Commits what was acked and leaves the group (its partitions go to the other members at
  /// once, instead of after the session timeout).
  ~receiver() { close(); }

  /// The next delivery, or `nullopt` after `timeout`. Serves rebalances and commits meanwhile.
  /// @throws outbox::error `transient` for a consumer error librdkafka reports (a broker away,
  ///         a subscribed topic that does not exist yet): the consumer's `run` backs off and
  ///         polls again; `misconfigured` for credentials, TLS or authorization failures and a
  ///         fatal consumer error.
  std::optional<delivery> receive(std::chrono::milliseconds timeout) {
    auto& st = *state_;
    if (!st.requeued.empty()) {
      // The group is served even while requeued deliveries are retried (a handler failing for
      // minutes while its database is away): a consumer that stops polling is dropped from the
      // group after max.poll.interval.ms, and a revocation must reach it before it applies a
      // record whose partition another member now owns (that member would apply the records
      // after it first). A record fetched meanwhile queues behind the requeued ones.
      commit_due();
      detail::message_ptr rec(rd_kafka_consumer_poll(rk_.get(), 0));
      if (rec) buffer(*rec);
      if (!st.requeued.empty()) return take_requeued();
    }
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      commit_due();
      const auto now = std::chrono::steady_clock::now();
      detail::message_ptr rec(rd_kafka_consumer_poll(rk_.get(), detail::timeout_ms(until - now)));
      if (!st.requeued.empty()) return take_requeued();  // cannot happen: no nack inside poll
      if (!rec) {
        // Idle: a client error librdkafka only reports to the error callback (every broker
        // away, credentials or rights refused) is the reason, and the consumer's run hears it.
        if (st.client_error != RD_KAFKA_RESP_ERR_NO_ERROR) {
          const auto err = std::exchange(st.client_error, RD_KAFKA_RESP_ERR_NO_ERROR);
          throw consumer_error(err, st.client_reason.c_str());
        }
        if (std::chrono::steady_clock::now() >= until) return std::nullopt;
        continue;
      }
      if (rec->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (rec->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) continue;
        throw consumer_error(rec->err, rd_kafka_message_errstr(rec.get()));
      }
      st.client_error = RD_KAFKA_RESP_ERR_NO_ERROR;  // records come: whatever was away is back
      if (auto d = accept(*rec)) return d;
      if (std::chrono::steady_clock::now() >= until) return std::nullopt;
    }
  }

  /// Marks `d` done: its offset becomes committable once every earlier one of its partition is.
  /// Unknown or stale tags (a partition revoked meanwhile) are ignored.
  /// @throws outbox::error `transient` when `commit_interval` is 0 and the commit failed (the
  ///         delivery may come again; the inbox absorbs it).
  void ack(const delivery& d) {
    settle(d);
    commit_due();
  }

  /// `requeue`: delivers `d` again from here, before anything newer (its offset stays
  /// uncommitted). Otherwise passes it, as `ack` does.
  void nack(const delivery& d, bool requeue) {
    auto& st = *state_;
    if (!requeue) return ack(d);
    auto it = st.tags.find(d.tag);
    if (it == st.tags.end()) return;
    // Back in its partition's offset order: ahead of the records of its partition fetched
    // meanwhile (`buffer`), or requeued before it, that come after it. Appended, a delivery
    // nacked twice went behind the record fetched while it was retried, and the consumer
    // applied an aggregate's event 101 before its 100 (the fault harness, CI).
    const auto& held = it->second;
    const auto at = std::find_if(st.requeued.begin(), st.requeued.end(), [&](const auto& r) {
      return r.second.tp == held.tp && r.second.offset > held.offset;
    });
    st.requeued.emplace(at, delivery{d.msg, 0, true}, held);
    st.tags.erase(it);
  }

  /// Kafka has no dead-letter route of its own (`consumer` refuses `dead_letter_route::transport`).
  [[nodiscard]] static constexpr bool has_dead_letter_route() noexcept { return false; }

  /// Polls until this member has partitions assigned (the group joined) or `timeout` passes;
  /// records fetched meanwhile wait for `receive`. For start-up readiness checks and tests.
  bool wait_for_assignment(std::chrono::milliseconds timeout) {
    auto& st = *state_;
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (st.assigned == 0 && std::chrono::steady_clock::now() < until) {
      detail::message_ptr rec(rd_kafka_consumer_poll(rk_.get(), 20));
      if (rec && rec->err == RD_KAFKA_RESP_ERR_NO_ERROR) buffer(*rec);
    }
    return st.assigned > 0;
  }

  /// Commits what is committable now, synchronously.
  /// @throws outbox::error `transient` when the group coordinator refuses it.
  void commit() {
    last_commit_ = std::chrono::steady_clock::now();
    if (const auto err = state_->commit(rk_.get(), nullptr, false); err)
      throw error(errc::transient, "kafka", error_name(err),
                  std::string("offset commit: ") + rd_kafka_err2str(err));
  }

  /// Records of the assigned partitions not yet acked here: each partition's high watermark
  /// (asked of its leader) minus its committable offset (or its committed offset, for a
  /// partition nothing was read from yet). For monitoring and tests.
  /// @throws outbox::error `transient` when a broker does not answer within `timeout`.
  [[nodiscard]] std::int64_t lag(std::chrono::milliseconds timeout) {
    rd_kafka_topic_partition_list_t* raw = nullptr;
    if (const auto err = rd_kafka_assignment(rk_.get(), &raw); err)
      throw error(errc::transient, "kafka", error_name(err), "assignment");
    detail::partitions_ptr parts(raw);
    if (const auto err = rd_kafka_committed(rk_.get(), parts.get(), detail::timeout_ms(timeout));
        err)
      throw error(errc::transient, "kafka", error_name(err), "committed offsets");
    std::int64_t lag = 0;
    for (int i = 0; i < parts->cnt; ++i) {
      const auto& e = parts->elems[i];
      std::int64_t low = 0;
      std::int64_t high = 0;
      if (const auto err = rd_kafka_query_watermark_offsets(rk_.get(), e.topic, e.partition, &low,
                                                            &high, detail::timeout_ms(timeout));
          err)
        throw error(errc::transient, "kafka", error_name(err), "watermark offsets");
      std::int64_t from = e.offset >= 0 ? e.offset : low;
      auto it = state_->partitions.find({e.topic, e.partition});
      if (it != state_->partitions.end() && it->second.committable() >= 0)
        from = it->second.committable();
      lag += std::max<std::int64_t>(0, high - from);
    }
    return lag;
  }

  /// Deliveries handed out and not yet acked, plus those requeued here.
  [[nodiscard]] std::size_t held() const noexcept {
    return state_->tags.size() + state_->requeued.size();
  }
  /// The record `d` came from, while `d` is handed out (neither acked nor nacked, its partition
  /// not revoked); nullopt otherwise. A redelivery of the same record (its offset was not
  /// committed when its partition moved) has the same position; the relay's second publish of
  /// a message has another. For logs and diagnostics.
  [[nodiscard]] std::optional<record_position> position(const delivery& d) const {
    const auto it = state_->tags.find(d.tag);
    if (it == state_->tags.end()) return std::nullopt;
    return record_position{it->second.tp.first, it->second.tp.second, it->second.offset};
  }
  /// Partitions assigned to this member now.
  [[nodiscard]] std::size_t assigned() const noexcept { return state_->assigned; }
  /// The counters so far (a copy; not synchronized: read on the thread that receives).
  [[nodiscard]] receiver_stats stats() const { return state_->stats; }
  /// The librdkafka consumer, for what this class does not wrap. Do not poll it.
  [[nodiscard]] rd_kafka_t* handle() const noexcept { return rk_.get(); }

 private:
  void check_options() {
    const auto& c = options_.config;
    const auto is = [&](std::string_view k, std::string_view want) {
      auto it = c.find(k);
      return it == c.end() || it->second == want;
    };
    if (options_.group_id.empty())
      throw error(errc::misconfigured, "kafka", {}, "receiver_options::group_id is required");
    if (c.contains("group.id"))
      throw error(errc::misconfigured, "kafka", {},
                  "set receiver_options::group_id, not config[\"group.id\"]");
    if (!is("enable.auto.commit", "false") || !is("enable.auto.offset.store", "false"))
      throw error(errc::misconfigured, "kafka", {},
                  "enable.auto.commit and enable.auto.offset.store must stay false: an offset "
                  "committed before the consumer's transaction loses the event on a crash");
    if (options_.topics.empty())
      throw error(errc::misconfigured, "kafka", {}, "receiver_options::topics is empty");
    if (c.contains("bootstrap.servers") && !options_.bootstrap_servers.empty())
      throw error(errc::misconfigured, "kafka", {},
                  "bootstrap servers given twice (receiver_options::bootstrap_servers and "
                  "config[\"bootstrap.servers\"])");
    if (options_.bootstrap_servers.empty() && !c.contains("bootstrap.servers") &&
        !c.contains("metadata.broker.list") && !c.contains("test.mock.num.brokers"))
      throw error(errc::misconfigured, "kafka", {}, "receiver_options::bootstrap_servers is empty");
    if (options_.commit_interval.count() < 0 || options_.commit_timeout.count() <= 0 ||
        options_.close_timeout.count() < 0)
      throw error(errc::misconfigured, "kafka", {},
                  "receiver_options: commit_interval and close_timeout may not be negative, "
                  "commit_timeout must be positive");
  }

  [[nodiscard]] error consumer_error(rd_kafka_resp_err_t err, const char* text) const {
    char fatal[512] = "";
    if (rd_kafka_fatal_error(rk_.get(), fatal, sizeof fatal) != RD_KAFKA_RESP_ERR_NO_ERROR)
      return error(errc::misconfigured, "kafka", error_name(err),
                   sanitize_text(std::string("the consumer raised a fatal error: ") + fatal));
    return error(classify_client(err), "kafka", error_name(err),
                 sanitize_text(std::string("consumer: ") + (text ? text : "")));
  }

  /// Registers a fetched record as handed out; nullopt (and its offset passed) when it is not an
  /// outbox event.
  std::optional<delivery> accept(const rd_kafka_message_t& rec) {
    auto& st = *state_;
    const detail::consumer_state::key k{rd_kafka_topic_name(rec.rkt), rec.partition};
    auto& p = st.partitions[k];
    if (p.generation == 0) p.generation = st.generation;
    p.next = std::max(p.next, rec.offset + 1);
    delivery d;
    std::string why;
    if (options_.cloudevents.mode != cloudevents_mode::off)
      why = decode_cloudevent(rec, d.msg);
    else if (!decode(rec, d.msg))
      why = "not an outbox event (no id, event_type or aggregate_type header, or no key)";
    if (!why.empty()) {
      ++st.stats.malformed;
      st.stats.last_malformed = std::move(why);
      return std::nullopt;
    }
    d.tag = ++next_tag_;
    p.outstanding.insert(rec.offset);
    st.tags.emplace(d.tag, detail::consumer_state::held{k, rec.offset, p.generation});
    ++st.stats.received;
    return d;
  }

  /// Registers a record fetched outside `receive`'s own wait and queues it behind the requeued
  /// deliveries (not marked redelivered). A consumer error is thrown as `receive` throws it.
  void buffer(const rd_kafka_message_t& rec) {
    auto& st = *state_;
    if (rec.err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (rec.err == RD_KAFKA_RESP_ERR__PARTITION_EOF) return;
      throw consumer_error(rec.err, rd_kafka_message_errstr(&rec));
    }
    if (auto d = accept(rec)) {
      auto held = st.tags.at(d->tag);
      st.tags.erase(d->tag);
      --st.stats.received;  // counted when it is handed out
      st.requeued.emplace_back(delivery{std::move(d->msg), 0, false}, std::move(held));
    }
  }

  delivery take_requeued() {
    auto& st = *state_;
    auto [d, held] = std::move(st.requeued.front());
    st.requeued.pop_front();
    d.tag = ++next_tag_;
    st.tags.emplace(d.tag, std::move(held));
    ++st.stats.received;
    return std::move(d);
  }

  void settle(const delivery& d) {
    auto& st = *state_;
    auto it = st.tags.find(d.tag);
    if (it == st.tags.end()) return;
    auto p = st.partitions.find(it->second.tp);
    if (p != st.partitions.end() && p->second.generation == it->second.generation)
      p->second.outstanding.erase(it->second.offset);
    st.tags.erase(it);
  }

  void commit_due() {
    const auto now = std::chrono::steady_clock::now();
    if (options_.commit_interval.count() == 0) return commit();
    if (now - last_commit_ < options_.commit_interval) return;
    last_commit_ = now;
    (void)state_->commit(rk_.get(), nullptr, true);
  }

  /// Closes the consumer within `close_timeout`: the revocation (which commits what was acked,
  /// within `commit_timeout`) and the leave of the group are served here; a coordinator that
  /// does not answer by then is left to notice the member gone (its session timeout).
  void close() noexcept {
    if (!rk_) return;
    rd_kafka_queue_t* q = rd_kafka_queue_new(rk_.get());
    const auto until = std::chrono::steady_clock::now() + options_.close_timeout;
    state_->commit_deadline = until;  // the revocation's commit too
    if (detail::error_ptr failed(rd_kafka_consumer_close_queue(rk_.get(), q)); !failed) {
      while (!rd_kafka_consumer_closed(rk_.get()) && std::chrono::steady_clock::now() < until) {
        rd_kafka_event_t* ev = rd_kafka_queue_poll(q, 100);
        if (ev == nullptr) continue;
        if (rd_kafka_event_type(ev) == RD_KAFKA_EVENT_REBALANCE)
          detail::consumer_state::on_rebalance(rk_.get(), rd_kafka_event_error(ev),
                                               rd_kafka_event_topic_partition_list(ev),
                                               state_.get());
        rd_kafka_event_destroy(ev);
      }
    }
    const bool closed = rd_kafka_consumer_closed(rk_.get()) != 0;
    rd_kafka_queue_destroy(q);
    rd_kafka_t* rk = rk_.release();
    if (closed) return rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
    // The coordinator did not answer within close_timeout, and librdkafka's teardown would wait
    // for it for up to session.timeout.ms more (45 s by default, seen): it finishes on a thread
    // of its own, which owns the callbacks' state until then (a process may end first).
    detail::consumer_state* state = state_.release();
    try {
      std::thread([rk, state] {
        rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
        delete state;
      }).detach();
    } catch (...) {  // no thread to be had: wait here
      rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
      delete state;
    }
  }

  receiver_options options_;
  std::uint64_t next_tag_ = 0;
  std::chrono::steady_clock::time_point last_commit_{};
  std::unique_ptr<detail::consumer_state> state_;
  detail::handle_ptr rk_;  // after state_: destroyed first
};

static_assert(concepts::receiver<receiver>);

}  // namespace outbox::kafka
