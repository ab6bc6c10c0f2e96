#pragma once
/// @file
/// `outbox::kafka::publisher`: the relay's side of the Kafka transport. An idempotent librdkafka
/// producer (`enable.idempotence=true`, `acks=all`); a batch is produced without waiting per
/// message and settled from its delivery reports, matched by event id.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <librdkafka/rdkafka.h>

#include <outbox/concepts/transport.hpp>
#include <outbox/error.hpp>
#include <outbox/kafka/detail/client.hpp>
#include <outbox/kafka/protocol.hpp>
#include <outbox/message.hpp>
#include <outbox/time.hpp>

namespace outbox::kafka {

/// Options of a publisher. Fill with designated initialisers.
struct publisher_options {
  /// `host:port[,host:port...]` (librdkafka's `bootstrap.servers`; or give that in `config`).
  std::string bootstrap_servers{};
  /// Any librdkafka producer property, passed through (`security.protocol`, `ssl.ca.location`,
  /// `sasl.mechanisms`, `sasl.username`, `sasl.password`, `linger.ms`, `compression.type`, ...).
  /// Values never appear in errors. Refused (`misconfigured`), because the outbox's guarantees
  /// rest on them: `enable.idempotence` other than true, `acks` other than all, a
  /// `transactional.id`, and `message.timeout.ms` / `delivery.timeout.ms` (set
  /// `delivery_timeout`).
  properties config{};
  /// The topic of an event: `{aggregate_type}` and `{event_type}` are replaced. The default is
  /// the layout of Debezium's outbox event router.
  std::string topic_pattern{default_topic_pattern};
  /// When set, the topic of an event instead of `topic_pattern` (for aggregate types that are
  /// not valid topic names, or a single topic for everything).
  topic_router::function topic{};
  /// How long librdkafka may try to deliver one message (`message.timeout.ms`): after it, the
  /// message fails `transient` and the relay retries it later. Keep it below the relay's
  /// `publish_timeout` (10 s by default), so every message's report arrives within the relay's
  /// deadline; one that does not is retried too (it may land twice: the inbox absorbs it).
  std::chrono::milliseconds delivery_timeout{5000};
  /// CloudEvents (off by default): binary mode writes `ce_*` headers and `content-type`,
  /// structured mode a JSON envelope (docs/cloudevents.md). A message whose headers cannot be
  /// extension attributes fails `permanent`. A bad `source` is refused (`misconfigured`).
  cloudevents_options cloudevents{};
};

/// Counters of one publisher.
struct publisher_stats {
  std::uint64_t produced = 0;   ///< Records handed to the producer.
  std::uint64_t confirmed = 0;  ///< Delivery reports without an error.
  std::uint64_t failed = 0;     ///< Messages that failed, locally or by their report.
  /// Reports that arrived after their `publish` call had returned (the message counted as not
  /// confirmed then, and is retried: a duplicate on the topic, absorbed by the inbox).
  std::uint64_t late_reports = 0;
  std::uint64_t recreated = 0;  ///< Producers replaced after a fatal error.
};

namespace detail {
/// What the delivery-report and error callbacks write: one per publisher, at a stable address
/// (the publisher moves, this does not).
struct producer_state {
  struct slot {
    bool resolved = false;
    bool produced = false;  ///< Handed to the producer (else still waiting on its aggregate).
    bool local = false;     ///< Failed before it was produced (`unsendable`, the producer's own).
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    std::string reason{};
  };
  std::uint64_t call = 0;           ///< The `publish` call whose reports are awaited.
  std::vector<slot> slots{};        ///< One per message of that call.
  std::vector<std::size_t> done{};  ///< Slots resolved since the caller last looked.
  std::uint64_t late = 0;
  rd_kafka_resp_err_t last_client_error = RD_KAFKA_RESP_ERR_NO_ERROR;
  std::string last_client_reason{};

  // A message's opaque: the call (high 40 bits) and its index in the call (low 24 bits).
  static constexpr unsigned index_bits = 24;
  static void* opaque(std::uint64_t call, std::size_t index) noexcept {
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(call << index_bits | index));
  }

  static void on_delivery(rd_kafka_t*, const rd_kafka_message_t* rec, void* self) noexcept {
    auto* s = static_cast<producer_state*>(self);
    const auto v = reinterpret_cast<std::uintptr_t>(rec->_private);
    const std::uint64_t call = static_cast<std::uint64_t>(v) >> index_bits;
    const std::size_t index = v & ((std::uintptr_t{1} << index_bits) - 1);
    if (call != (s->call & ((std::uint64_t{1} << (64 - index_bits)) - 1)) ||
        index >= s->slots.size() || s->slots[index].resolved) {
      ++s->late;
      return;
    }
    slot& sl = s->slots[index];
    sl.resolved = true;
    sl.err = rec->err;
    if (rec->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      try {
        // The error's text, not rd_kafka_message_errstr: for a delivery report that returns
        // the message's payload (no NUL at its end).
        sl.reason = rd_kafka_err2str(rec->err);
        if (rd_kafka_message_status(rec) == RD_KAFKA_MSG_STATUS_POSSIBLY_PERSISTED)
          sl.reason += " (possibly persisted: retried, a duplicate is absorbed by the inbox)";
      } catch (...) {  // out of memory: the error name alone is reported
      }
    }
    try {
      s->done.push_back(index);
    } catch (...) {  // out of memory: the slot is resolved, the chain after it waits to the end
    }
  }

  static void on_error(rd_kafka_t*, int err, const char* reason, void* self) noexcept {
    auto* s = static_cast<producer_state*>(self);
    s->last_client_error = static_cast<rd_kafka_resp_err_t>(err);
    try {
      s->last_client_reason = reason ? reason : "";
    } catch (...) {
    }
  }
};
}  // namespace detail

/// A `concepts::transport` over Kafka: an idempotent producer whose delivery reports are the
/// confirms.
///
/// Each event becomes one record: topic from `topic_pattern` (or `topic`), key = aggregate_id
/// (with the default `murmur2_random` partitioner, the partition a Java producer or Debezium
/// picks for that key), value = payload, timestamp = created_at, headers `id`, `event_type`,
/// `aggregate_type`, `content-type`, then the event's own (adapters/kafka/README.md); with
/// `publisher_options::cloudevents`, the CloudEvents Kafka binding's instead.
///
/// Threading: one thread at a time (one relay thread); the delivery reports are served inside
/// `publish`. Move-only; the callbacks' state is on the heap, so moving keeps it valid.
class publisher {
 public:
  /// Creates the producer (it connects lazily: an unreachable cluster is not an error here).
  /// @throws outbox::error `misconfigured` for an unknown property, an invalid value (named,
  ///         never shown), a refused property (see `publisher_options::config`), a bad
  ///         `topic_pattern`.
  explicit publisher(publisher_options options)
      : options_(std::move(options)),
        secrets_(detail::secrets_of(options_.config, options_.bootstrap_servers)),
        router_(options_.topic_pattern, options_.topic),
        ce_(options_.cloudevents, "kafka"),
        state_(std::make_unique<detail::producer_state>()) {
    check_options();
    rk_ = create();
  }

  publisher(const publisher&) = delete;
  publisher& operator=(const publisher&) = delete;
  /// Moves the producer and its state; a moved-from publisher may only be destroyed or
  /// assigned to.
  publisher(publisher&&) noexcept = default;
  /// Ends this producer as the destructor does, then takes over that of `other`.
  publisher& operator=(publisher&& other) noexcept {
    if (this != &other) {
      close();
      options_ = std::move(other.options_);
      secrets_ = std::move(other.secrets_);
      router_ = std::move(other.router_);
      ce_ = std::move(other.ce_);
      max_record_bytes_ = other.max_record_bytes_;
      stats_ = other.stats_;
      state_ = std::move(other.state_);
      rk_ = std::move(other.rk_);
    }
    return *this;
  }
  /// Does not wait for messages still in the producer: they were not confirmed, so the relay
  /// publishes them again.
  ~publisher() { close(); }

  /// Produces every message of `batch`, then serves delivery reports until each message has
  /// one or `until` passes. Messages of one aggregate are produced one after another: the next
  /// only once the one before it was confirmed, so a failure (too large, timed out) never lets
  /// a later event of its aggregate overtake it; after a failure the rest of its aggregate in
  /// `batch` is held back (not produced: `in_doubt` behind one without a report, else
  /// `transient`). Other aggregates go out pipelined. (The
  /// relay hands over at most one event per aggregate per call anyway.)
  ///
  /// Results: confirmed by a report without an error; `permanent` for a message that cannot be
  /// carried (`unsendable`: checked before it is produced) or that the broker refuses for good;
  /// `misconfigured` for an authorization failure; `in_doubt` for no report by `until` (the
  /// topic may have it), and for a message held back behind one (not produced): the relay
  /// defers both without counting an attempt; `transient` for the rest: a timeout (also
  /// "possibly persisted"), a message held back behind a failure, a fatal producer error (the
  /// producer is recreated and the message retried).
  /// @throws outbox::error `transient` when not one message of a non-empty batch was confirmed
  ///         and every failure was transient or in doubt (the cluster is unreachable, or the
  ///         producer failed): the relay releases the batch without counting an attempt, so an
  ///         outage never dead-letters the backlog.
  std::vector<publish_result> publish(std::span<const message> batch,
                                      std::chrono::steady_clock::time_point until) {
    std::vector<publish_result> results;
    if (batch.empty()) return results;
    if (batch.size() >= (std::size_t{1} << detail::producer_state::index_bits))
      throw error(errc::misconfigured, "kafka", {}, "a batch of over 16 million messages");
    auto& st = *state_;
    ++st.call;
    st.slots.assign(batch.size(), {});
    st.done.clear();

    // next[i]: the next message of i's aggregate in the batch (chained: produced after i).
    constexpr std::size_t none = static_cast<std::size_t>(-1);
    std::vector<std::size_t> next(batch.size(), none);
    std::vector<std::size_t> heads;
    {
      struct key_hash {
        std::size_t operator()(
            const std::pair<std::string_view, std::string_view>& k) const noexcept {
          const std::hash<std::string_view> h;
          return h(k.first) * 31 + h(k.second);
        }
      };
      std::unordered_map<std::pair<std::string_view, std::string_view>, std::size_t, key_hash> last;
      last.reserve(batch.size());
      for (std::size_t i = 0; i < batch.size(); ++i) {
        auto [it, fresh] = last.try_emplace({batch[i].aggregate_type, batch[i].aggregate_id}, i);
        if (fresh) {
          heads.push_back(i);
        } else {
          next[it->second] = i;
          it->second = i;
        }
      }
    }

    std::string topic;
    const auto produce = [&](std::size_t i) { produce_one(batch[i], i, topic, until); };
    for (const auto i : heads) produce(i);

    std::size_t open = batch.size();
    rd_kafka_resp_err_t fatal = RD_KAFKA_RESP_ERR_NO_ERROR;  // the underlying error, when fatal
    std::string fatal_reason;
    std::vector<std::size_t> ready;
    for (;;) {
      // Reports already in (a local failure resolves its slot at once): chain or hold back.
      ready.swap(st.done);
      st.done.clear();
      for (const auto i : ready) {
        --open;
        if (st.slots[i].err == RD_KAFKA_RESP_ERR_NO_ERROR) {
          if (next[i] != none) produce(next[i]);
        } else {
          for (auto j = next[i]; j != none; j = next[j]) {
            auto& held = st.slots[j];
            held.resolved = true;
            held.err = RD_KAFKA_RESP_ERR__PREV_IN_PROGRESS;
            held.reason = "held back: an earlier event of its aggregate failed in this batch";
            --open;
          }
        }
      }
      ready.clear();
      if (!st.done.empty()) continue;
      // A fatal error fails what is produced after it at once: looked for before the loop may
      // end for want of open messages.
      if (char buf[512] = ""; (fatal = rd_kafka_fatal_error(rk_.get(), buf, sizeof buf)) !=
                              RD_KAFKA_RESP_ERR_NO_ERROR) {
        fatal_reason = buf;
        break;
      }
      if (open == 0) break;
      const auto now = std::chrono::steady_clock::now();
      if (now >= until) break;
      rd_kafka_poll(rk_.get(), std::min(detail::timeout_ms(until - now), 50));
    }
    // A message the broker refused for good along with others is tried again alone, one at a
    // time (rare: each such message costs a round trip).
    if (fatal == RD_KAFKA_RESP_ERR_NO_ERROR) {
      std::size_t refused = 0;
      for (const auto& sl : st.slots)
        refused += sl.resolved && !sl.local && sl.err != RD_KAFKA_RESP_ERR_NO_ERROR &&
                   classify_delivery(sl.err) == errc::permanent;
      for (std::size_t i = 0; refused > 1 && i < batch.size(); ++i) {
        const auto& sl = st.slots[i];
        if (sl.resolved && !sl.local && sl.err != RD_KAFKA_RESP_ERR_NO_ERROR &&
            classify_delivery(sl.err) == errc::permanent)
          produce_alone(batch, i, until);
      }
    }
    if (fatal != RD_KAFKA_RESP_ERR_NO_ERROR) {
      // The producer can do nothing more: a new one takes its place, and what it had not
      // confirmed is retried (the relay's next attempt; a copy may be on the topic already).
      const std::string why = "the producer raised a fatal error (" + error_name(fatal) + ": " +
                              fatal_reason + "); it was recreated and the message is retried";
      close();
      rk_ = create();
      ++stats_.recreated;
      for (auto& sl : st.slots)
        if (!sl.resolved) {
          sl.resolved = true;
          sl.err = RD_KAFKA_RESP_ERR__FATAL;
          sl.reason = why;
        }
    }
    stats_.late_reports = st.late;

    results.resize(batch.size());
    bool any_confirmed = false;
    bool all_transient = true;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      auto& r = results[i];
      const auto& sl = st.slots[i];
      r.id = batch[i].id;
      if (sl.resolved && sl.err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        r.confirmed = true;
        any_confirmed = true;
        ++stats_.confirmed;
        continue;
      }
      ++stats_.failed;
      if (!sl.resolved) {  // no answer: the topic may have it, or it was not produced
        r.error_class = errc::in_doubt;
        r.error = sl.produced
                      ? "no delivery report before the publish deadline (retried; should it land "
                        "after all, the inbox absorbs the copy)"
                      : "not produced: an earlier event of its aggregate had no delivery report "
                        "before the publish deadline";
      } else {
        r.error_class =
            sl.err == RD_KAFKA_RESP_ERR__PREV_IN_PROGRESS || sl.err == RD_KAFKA_RESP_ERR__FATAL
                ? errc::transient
                : classify_delivery(sl.err);
        r.error = sanitize_text((sl.err == RD_KAFKA_RESP_ERR__PREV_IN_PROGRESS
                                     ? std::string()
                                     : error_name(sl.err) + ": ") +
                                sl.reason);
      }
      if (r.error_class != errc::transient && r.error_class != errc::in_doubt)
        all_transient = false;
    }
    st.slots.clear();
    if (!any_confirmed && all_transient) {
      // Back-pressure: the relay releases the batch. Credentials or rights refused are not,
      // and stop it (the same reason connect() gives).
      const auto client = st.last_client_error;
      std::string why = results.front().error + " (topic " + topic_of(batch.front()) + ")";
      if (client != RD_KAFKA_RESP_ERR_NO_ERROR)
        why += "; last client error: " + error_name(client) + ": " + st.last_client_reason;
      throw error(
          client != RD_KAFKA_RESP_ERR_NO_ERROR ? classify_client(client) : errc::transient, "kafka",
          error_name(client != RD_KAFKA_RESP_ERR_NO_ERROR ? client
                                                          : RD_KAFKA_RESP_ERR__MSG_TIMED_OUT),
          "no message of the batch was confirmed: " + sanitize_text(scrub(why)));
    }
    st.last_client_error = RD_KAFKA_RESP_ERR_NO_ERROR;
    return results;
  }

  /// Waits until the producer has reached a broker of the cluster (a metadata round trip), or
  /// `timeout` passes: a readiness check for start-up; `publish` does not need it.
  /// @throws outbox::error `transient` when no broker answered in time, `misconfigured` for
  ///         credentials, TLS or authorization failures.
  void connect(std::chrono::milliseconds timeout) {
    const rd_kafka_metadata_t* md = nullptr;
    const auto err = rd_kafka_metadata(rk_.get(), 0, nullptr, &md, detail::timeout_ms(timeout));
    if (md != nullptr) rd_kafka_metadata_destroy(md);
    rd_kafka_poll(rk_.get(), 0);  // the error callback may know why
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      auto& st = *state_;
      const auto cause =
          st.last_client_error != RD_KAFKA_RESP_ERR_NO_ERROR ? st.last_client_error : err;
      throw error(classify_client(cause), "kafka", error_name(cause),
                  sanitize_text(
                      scrub("no broker answered: " + std::string(rd_kafka_err2str(err)) +
                            (st.last_client_reason.empty() ? "" : "; " + st.last_client_reason))));
    }
  }

  /// The route of `m` (`concepts::routing_transport`, for the relay's storm guard):
  /// `kafka:<topic>` ("kafka:?" when the topic function throws).
  [[nodiscard]] std::string route(const message& m) const { return "kafka:" + topic_of(m); }
  /// The largest record (payload, key and headers) this producer takes: its `message.max.bytes`.
  [[nodiscard]] std::size_t max_record_bytes() const noexcept { return max_record_bytes_; }
  /// The counters so far (a copy; not synchronized: read on the thread that publishes).
  [[nodiscard]] publisher_stats stats() const noexcept { return stats_; }
  /// The librdkafka producer, for what this class does not wrap (metadata, statistics). Do not
  /// produce on it, nor serve its callbacks (`rd_kafka_poll`) outside `publish`.
  [[nodiscard]] rd_kafka_t* handle() const noexcept { return rk_.get(); }

 private:
  void check_options() {
    const auto& c = options_.config;
    const auto value = [&](std::string_view k) -> const std::string* {
      auto it = c.find(k);
      return it == c.end() ? nullptr : &it->second;
    };
    if (const auto* v = value("enable.idempotence"); v && *v != "true")
      throw error(errc::misconfigured, "kafka", {},
                  "enable.idempotence must stay true: without it a retried produce may reorder or "
                  "duplicate an aggregate's events");
    if (const auto* v = value("acks"); v && *v != "all" && *v != "-1")
      throw error(errc::misconfigured, "kafka", {},
                  "acks must stay all: a confirm must mean every in-sync replica has the event");
    if (value("transactional.id"))
      throw error(errc::misconfigured, "kafka", {},
                  "transactional.id is not supported: the outbox relay needs no Kafka transactions "
                  "(the inbox deduplicates)");
    if (value("message.timeout.ms") || value("delivery.timeout.ms"))
      throw error(errc::misconfigured, "kafka", {},
                  "set publisher_options::delivery_timeout, not message.timeout.ms or "
                  "delivery.timeout.ms");
    if (value("bootstrap.servers") && !options_.bootstrap_servers.empty())
      throw error(errc::misconfigured, "kafka", {},
                  "bootstrap servers given twice (publisher_options::bootstrap_servers and "
                  "config[\"bootstrap.servers\"])");
    if (options_.bootstrap_servers.empty() && !value("bootstrap.servers") &&
        !value("metadata.broker.list") && !value("test.mock.num.brokers"))
      throw error(errc::misconfigured, "kafka", {},
                  "publisher_options::bootstrap_servers is empty");
    if (const auto* v = value("delivery.report.only.error"); v && *v != "false")
      throw error(errc::misconfigured, "kafka", {},
                  "delivery.report.only.error must stay false: a delivery report is the confirm "
                  "of each message");
    if (const auto* v = value("partitioner"); v && *v == "random")
      throw error(errc::misconfigured, "kafka", {},
                  "partitioner random ignores the key: an aggregate's events would spread over "
                  "partitions and lose their order (the default is murmur2_random)");
    if (options_.delivery_timeout.count() <= 0)
      throw error(errc::misconfigured, "kafka", {},
                  "publisher_options::delivery_timeout must be positive");
  }

  detail::handle_ptr create() {
    properties forced{{"enable.idempotence", "true"},
                      {"acks", "all"},
                      {"message.timeout.ms", std::to_string(options_.delivery_timeout.count())}};
    if (!options_.bootstrap_servers.empty())
      forced.emplace("bootstrap.servers", options_.bootstrap_servers);
    properties defaults;
    // Keys land where a Java producer (and Debezium) puts them; librdkafka's own default,
    // consistent_random (CRC32), places them elsewhere.
    if (!options_.config.contains("partitioner")) defaults.emplace("partitioner", "murmur2_random");
    // TCP_NODELAY, as the Java client sets it: a relay waits for a batch's reports, and the
    // last segment of a request must not wait for an acknowledgement first.
    if (!options_.config.contains("socket.nagle.disable"))
      defaults.emplace("socket.nagle.disable", "true");
    // No linger: a publish call produces its whole batch at once and then waits for the
    // reports, so librdkafka's 5 ms wait for more messages only delays them. Measured on the
    // mock, producing and awaiting 1,000 at a time: linger 0 350,000/s, 1 ms 510,000/s, 5 ms
    // 156,000/s; one message at a time (a hot aggregate's waves): 3,800/s, 700/s, 180/s.
    if (!options_.config.contains("linger.ms") &&
        !options_.config.contains("queue.buffering.max.ms"))
      defaults.emplace("linger.ms", "0");
    auto conf = detail::make_conf(options_.config, forced);
    for (const auto& [k, v] : defaults) detail::set(conf.get(), k, v);
    const auto max = detail::get(conf.get(), "message.max.bytes");
    max_record_bytes_ = max.empty() ? 1'000'000 : std::stoull(max);
    rd_kafka_conf_set_opaque(conf.get(), state_.get());
    rd_kafka_conf_set_dr_msg_cb(conf.get(), &detail::producer_state::on_delivery);
    rd_kafka_conf_set_error_cb(conf.get(), &detail::producer_state::on_error);
    properties given = options_.config;
    if (!options_.bootstrap_servers.empty())
      given.emplace("bootstrap.servers", options_.bootstrap_servers);
    return detail::make_handle(RD_KAFKA_PRODUCER, std::move(conf), given);
  }

  /// Produces `m` as slot `i` of the current call, or resolves the slot with why it cannot be.
  void produce_one(const message& m, std::size_t i, std::string& topic,
                   std::chrono::steady_clock::time_point until) {
    auto& st = *state_;
    const auto fail = [&](rd_kafka_resp_err_t err, std::string reason) {
      auto& sl = st.slots[i];
      sl.resolved = true;
      sl.local = true;
      sl.err = err;
      sl.reason = std::move(reason);
      st.done.push_back(i);
    };
    try {
      topic = router_(m);
    } catch (const std::exception& e) {
      return fail(RD_KAFKA_RESP_ERR__INVALID_ARG,
                  std::string("publisher_options::topic threw: ") + e.what());
    }
    if (auto why = unsendable(m, topic, max_record_bytes_); !why.empty())
      return fail(RD_KAFKA_RESP_ERR__INVALID_ARG, std::move(why));
    // With CloudEvents: the binding's headers and value, checked before anything is produced.
    std::string ce_value;
    std::vector<std::pair<std::string, std::string>> ce_headers;
    if (ce_.on()) {
      if (auto why = ce_.unmappable(m); !why.empty())
        return fail(RD_KAFKA_RESP_ERR__INVALID_ARG, "CloudEvents: " + why);
      ce_headers = cloudevents_headers(ce_, m, ce_value);
      std::size_t size = ce_value.size() + m.aggregate_id.size();
      for (const auto& [k, v] : ce_headers) size += k.size() + v.size() + 10;
      if (size > max_record_bytes_)
        return fail(RD_KAFKA_RESP_ERR__INVALID_ARG,
                    "the CloudEvents record is " + std::to_string(size) +
                        " bytes: over the producer's message.max.bytes (" +
                        std::to_string(max_record_bytes_) + ")");
    }
    const std::string id = m.id.to_string();
    for (;;) {
      rd_kafka_headers_t* hdrs = rd_kafka_headers_new(4 + m.headers.size());
      const auto add = [&](std::string_view k, std::string_view v) {
        rd_kafka_header_add(hdrs, k.data(), static_cast<ssize_t>(k.size()), v.data(),
                            static_cast<ssize_t>(v.size()));
      };
      if (ce_.on()) {
        for (const auto& [k, v] : ce_headers) add(k, v);
      } else {
        add(id_header, id);
        add(event_type_header, m.event_type);
        add(aggregate_type_header, m.aggregate_type);
        add(content_type_header, m.content_type);
        for (const auto& [k, v] : m.headers) add(k, v);
      }
      const rd_kafka_resp_err_t err =
          detail::record_fields{}
              .topic(topic.c_str())
              .key(m.aggregate_id)
              .value(ce_.on() ? std::string_view(ce_value) : std::string_view(m.payload))
              .timestamp_ms(to_unix<std::milli>(m.created_at))
              .headers(hdrs)
              .flags(RD_KAFKA_MSG_F_COPY)
              .opaque(detail::producer_state::opaque(st.call, i))
              .produce(rk_.get());
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {  // the headers belong to the message now
        st.slots[i].produced = true;
        ++stats_.produced;
        return;
      }
      rd_kafka_headers_destroy(hdrs);
      if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL && std::chrono::steady_clock::now() < until) {
        rd_kafka_poll(rk_.get(), 10);  // reports free room in the queue
        continue;
      }
      return fail(err, err == RD_KAFKA_RESP_ERR__QUEUE_FULL
                           ? "the producer's queue stayed full until the publish deadline"
                           : rd_kafka_err2str(err));
    }
  }

  /// `text` without the values of the secret properties (see detail::secrets_of).
  [[nodiscard]] std::string scrub(std::string text) const {
    return detail::scrub(std::move(text), secrets_);
  }

  /// The topic of `m` for an error text ("?" when the topic function throws).
  [[nodiscard]] std::string topic_of(const message& m) const {
    try {
      return router_(m);
    } catch (...) {
      return "?";
    }
  }

  /// Produces message `i` of `batch` again, alone, and waits for its report (or `until`): a
  /// broker refuses a whole request for good (too large a batch, a record it cannot take, a
  /// timestamp out of its range), so a message refused with others may be innocent. Refused
  /// alone, it is at fault. The rest of its aggregate stays held back, whatever the outcome.
  void produce_alone(std::span<const message> batch, std::size_t i,
                     std::chrono::steady_clock::time_point until) {
    auto& st = *state_;
    st.slots[i] = {};
    std::string topic;
    produce_one(batch[i], i, topic, until);
    while (!st.slots[i].resolved && std::chrono::steady_clock::now() < until)
      rd_kafka_poll(rk_.get(),
                    std::min(detail::timeout_ms(until - std::chrono::steady_clock::now()), 50));
    st.done.clear();
  }

  /// Ends the producer without waiting: what it still holds was not confirmed (the relay
  /// publishes it again), so it is purged rather than flushed.
  void close() noexcept {
    if (!rk_) return;
    rd_kafka_purge(rk_.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_poll(rk_.get(), 0);  // the purged messages' reports: late, counted as such
    rk_.reset();
  }

  publisher_options options_;
  std::vector<std::string> secrets_;  ///< What no error text may show (detail::secrets_of).
  topic_router router_;
  cloudevents ce_;
  std::size_t max_record_bytes_ = 1'000'000;
  publisher_stats stats_{};
  std::unique_ptr<detail::producer_state> state_;
  detail::handle_ptr rk_;  // after state_: destroyed first
};

static_assert(concepts::routing_transport<publisher>);

}  // namespace outbox::kafka
