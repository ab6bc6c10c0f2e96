#pragma once
/// @file
/// `outbox::nats::receiver`: the consumer's side of the NATS JetStream transport. A durable pull
/// consumer with explicit acks, fetched in batches; `ack` after the consumer's commit.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <nats/nats.h>

#include <outbox/concepts/transport.hpp>
#include <outbox/message.hpp>
#include <outbox/nats/connection.hpp>
#include <outbox/nats/protocol.hpp>
#include <outbox/nats/stream.hpp>

namespace outbox::nats {

/// Options of a receiver. Fill with designated initialisers.
struct receiver_options {
  connection_options connection{};  ///< URL, credentials, TLS, timeouts.
  /// The stream to consume (its `create`: created when missing, as the publisher does).
  stream_options stream{};
  std::string durable{};  ///< The durable consumer's name (required).
  /// true: the consumer is created when missing (explicit acks, every message of the stream,
  /// the settings below); false: it must exist (missing = `misconfigured`).
  bool create_consumer = true;
  std::string filter_subject{};  ///< When created: the subjects it takes (empty: all).
  /// When created: how long the server waits for an ack before it delivers a message again
  /// (a receiver that died). A requeued delivery held here is kept alive (in progress).
  std::chrono::milliseconds ack_wait{std::chrono::seconds(30)};
  /// When created: messages handed out unacknowledged at most (`max_held()` reads the
  /// consumer's value, created or not).
  std::int64_t max_ack_pending = 256;
  int fetch_batch = 64;  ///< Messages fetched per request, at most.
  /// A fetch from a deleted consumer only times out, as an idle one does: while nothing comes,
  /// `receive` asks the server whether the consumer exists this often (one API request).
  std::chrono::milliseconds check_every{std::chrono::seconds(5)};
  /// `nack(d, true)`: unset, the delivery comes again from here, before anything fetched
  /// after it (order per aggregate kept; the consumer has waited its retry delay already);
  /// set, a NAK with this delay: the server delivers it again then, to any receiver of the
  /// consumer, after later messages.
  std::optional<std::chrono::milliseconds> nak_delay{};
  /// CloudEvents: any mode but `off` reads both modes, plain events and foreign CloudEvents
  /// (`decode_cloudevent`); `source` is not used.
  cloudevents_options cloudevents{};
};

/// A `concepts::receiver` over a JetStream durable pull consumer. `receive` hands out the
/// next message fetched (`natsSubscription_Fetch`, up to `fetch_batch` at a time), decoded by
/// `decode`; `redelivered` when the server delivered it before or it was requeued here. A
/// malformed message (not an outbox event) is terminated (`natsMsg_Term`: never delivered
/// again) and counted (`malformed()`). `ack` = JetStream ack; `nack(d, true)`: see
/// `receiver_options::nak_delay`; `nack(d, false)` = Term (JetStream has no dead-letter
/// route). Closing the receiver NAKs everything it holds, so another one gets it at once.
///
/// A consumer deleted under the receiver: `receive` throws `transient` when
/// `create_consumer` (the next `receive` creates it again, from the stream's first message:
/// the inbox absorbs what was applied) or `misconfigured` otherwise (`consumer::run` stops).
/// A lost connection: `receive` throws `transient` while libnats reconnects. A connection libnats
/// closed for good is opened again by the next `receive`; what was held or fetched on it is
/// dropped (its subscription is gone; the server delivers it again after `ack_wait`).
///
/// Threading: one thread. Move-only.
class receiver {
 public:
  /// @throws outbox::error `misconfigured` for a bad URL, no durable name, or a bad batch.
  explicit receiver(receiver_options options)
      : options_(std::move(options)), conn_(std::make_unique<connection>(options_.connection)) {
    if (options_.durable.empty())
      throw error(errc::misconfigured, "nats", {}, "receiver_options.durable must not be empty");
    if (options_.stream.name.empty())
      throw error(errc::misconfigured, "nats", {}, "receiver_options.stream.name is empty");
    if (options_.fetch_batch <= 0 || options_.max_ack_pending <= 0)
      throw error(errc::misconfigured, "nats", {},
                  "receiver_options.fetch_batch and max_ack_pending must be > 0");
  }
  receiver(const receiver&) = delete;
  receiver& operator=(const receiver&) = delete;
  /// Move-only: the subscription and the messages held go with it.
  receiver(receiver&&) noexcept = default;
  /// Moves the receiver, giving back (NAK) what it held first.
  receiver& operator=(receiver&& other) noexcept {
    if (this != &other) {
      give_back();
      options_ = std::move(other.options_);
      sub_ = std::move(other.sub_);
      js_ = std::move(other.js_);
      conn_ = std::move(other.conn_);
      ready_ = std::move(other.ready_);
      held_ = std::move(other.held_);
      max_held_ = other.max_held_;
      malformed_ = other.malformed_;
      last_malformed_ = std::move(other.last_malformed_);
      checked_ = other.checked_;
    }
    return *this;
  }
  /// NAKs what it holds (delivered again at once to the next receiver), then closes.
  ~receiver() { give_back(); }

  /// Connects now: sets the stream and the consumer up, subscribes.
  /// @throws outbox::error `transient` or `misconfigured`.
  void connect() { ensure(); }

  /// The next delivery, or `nullopt` after `timeout`.
  /// @throws outbox::error `transient` (connection lost; consumer deleted and to be created
  ///         again) or `misconfigured` (consumer deleted, `create_consumer` false).
  std::optional<delivery> receive(std::chrono::milliseconds timeout) {
    ensure();
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (!ready_.empty()) {
        auto node = ready_.extract(ready_.begin());
        delivery d = std::move(node.mapped().d);
        held_.emplace(d.tag, std::move(node.mapped().msg));
        return d;
      }
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      fetch(std::min(left, options_.check_every));
    }
  }

  /// JetStream ack of `d`. A delivery this receiver does not hold is ignored.
  /// @throws outbox::error `transient` when the ack cannot be sent.
  void ack(const delivery& d) {
    auto it = held_.find(d.tag);
    if (it == held_.end()) return;
    msg_ptr msg = std::move(it->second);
    held_.erase(it);
    const natsStatus s = natsMsg_Ack(msg.get(), nullptr);
    if (s != NATS_OK) conn_->fail(s, "ack");
  }

  /// `requeue`: see `receiver_options::nak_delay`; otherwise Term (never delivered again).
  /// @throws outbox::error `transient` when it cannot be sent.
  void nack(const delivery& d, bool requeue) {
    auto it = held_.find(d.tag);
    if (it == held_.end()) return;
    msg_ptr msg = std::move(it->second);
    held_.erase(it);
    natsStatus s = NATS_OK;
    if (!requeue) {
      s = natsMsg_Term(msg.get(), nullptr);
    } else if (options_.nak_delay) {
      s = natsMsg_NakWithDelay(msg.get(), options_.nak_delay->count(), nullptr);
    } else {
      // Back in stream order, ahead of what was fetched after it; the server's ack timer
      // starts again, so it does not deliver it elsewhere meanwhile.
      s = natsMsg_InProgress(msg.get(), nullptr);
      delivery again = d;
      again.redelivered = true;
      ready_.emplace(d.tag, fetched{std::move(again), std::move(msg)});
    }
    if (s != NATS_OK) conn_->fail(s, requeue ? "nak" : "term");
  }

  /// JetStream has no dead-letter route: `nack(d, false)` terminates the message.
  [[nodiscard]] static constexpr bool has_dead_letter_route() noexcept { return false; }
  /// Deliveries handed out and not yet acknowledged.
  [[nodiscard]] std::size_t held() const noexcept { return held_.size(); }
  /// Messages fetched and not handed out yet.
  [[nodiscard]] std::size_t fetched_ahead() const noexcept { return ready_.size(); }
  /// The most it holds unacknowledged: the consumer's max ack pending (0 before connecting).
  [[nodiscard]] std::size_t max_held() const noexcept { return max_held_; }
  /// Messages terminated as malformed so far.
  [[nodiscard]] std::uint64_t malformed() const noexcept { return malformed_; }
  /// Why the last message counted in `malformed` was terminated.
  [[nodiscard]] const std::string& last_malformed() const noexcept { return last_malformed_; }
  /// The libnats connection (null before the first connect).
  [[nodiscard]] natsConnection* native_handle() const noexcept { return conn_->handle(); }

 private:
  struct fetched {
    delivery d;
    msg_ptr msg;
  };
  struct sub_deleter {
    void operator()(natsSubscription* s) const noexcept { natsSubscription_Destroy(s); }
  };

  void ensure() {
    if (sub_ && conn_->open()) return;
    retire();
    conn_->ensure();
    js_ = conn_->jetstream([] {
      jsOptions o;
      jsOptions_Init(&o);
      return o;
    }());
    ensure_stream(*conn_, js_.get(), options_.stream);
    const char* stream = options_.stream.name.c_str();
    const char* durable = options_.durable.c_str();
    jsConsumerInfo* info = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    natsStatus s = js_GetConsumerInfo(&info, js_.get(), stream, durable, nullptr, &code);
    if (s != NATS_OK && code == JSConsumerNotFoundErr) {
      if (!options_.create_consumer)
        throw error(errc::misconfigured, "nats", std::to_string(code),
                    "the consumer " + options_.durable + " of stream " + options_.stream.name +
                        " does not exist (receiver_options.create_consumer is false)");
      jsConsumerConfig cc;
      jsConsumerConfig_Init(&cc);
      cc.Durable = durable;
      cc.AckPolicy = js_AckExplicit;
      cc.DeliverPolicy = js_DeliverAll;
      cc.AckWait = std::chrono::duration_cast<std::chrono::nanoseconds>(options_.ack_wait).count();
      cc.MaxAckPending = options_.max_ack_pending;
      cc.MaxDeliver = -1;
      if (!options_.filter_subject.empty()) cc.FilterSubject = options_.filter_subject.c_str();
      s = js_AddConsumer(&info, js_.get(), stream, &cc, nullptr, &code);
    }
    if (s != NATS_OK) conn_->fail(s, "consumer " + options_.durable, code);
    max_held_ = info->Config && info->Config->MaxAckPending > 0
                    ? static_cast<std::size_t>(info->Config->MaxAckPending)
                    : static_cast<std::size_t>(options_.max_ack_pending);
    jsConsumerInfo_Destroy(info);
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = stream;
    so.Consumer = durable;  // bind: the subscription never deletes it
    natsSubscription* sub = nullptr;
    s = js_PullSubscribe(&sub, js_.get(), nullptr, durable, nullptr, &so, &code);
    if (s != NATS_OK) conn_->fail(s, "pull subscribe to " + options_.durable, code);
    sub_.reset(sub);
    checked_ = std::chrono::steady_clock::now();
  }

  void fetch(std::chrono::milliseconds timeout) {
    const std::size_t room = max_held_ > held_.size() ? max_held_ - held_.size() : 1;
    const int batch = static_cast<int>(
        std::min<std::size_t>(room, static_cast<std::size_t>(options_.fetch_batch)));
    natsMsgList list{};
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus s = natsSubscription_Fetch(&list, sub_.get(), batch, timeout.count(), &code);
    if (s == NATS_TIMEOUT) {
      natsMsgList_Destroy(&list);
      const auto now = std::chrono::steady_clock::now();
      if (now - checked_ >= options_.check_every) {
        checked_ = now;
        if (consumer_deleted()) lost(s, code);
      }
      return;
    }
    if (s != NATS_OK) lost(s, code);
    for (int i = 0; i < list.Count; ++i) {
      msg_ptr msg(list.Msgs[i]);
      list.Msgs[i] = nullptr;
      jsMsgMetaData* meta = nullptr;
      if (natsMsg_GetMetaData(&meta, msg.get()) != NATS_OK) continue;  // not a JetStream one
      const std::uint64_t seq = meta->Sequence.Stream;
      const bool again = meta->NumDelivered > 1;
      jsMsgMetaData_Destroy(meta);
      // Delivered again while held here (its ack wait ran out): the one held stands for it.
      if (held_.contains(seq) || ready_.contains(seq)) continue;
      delivery d;
      d.tag = seq;
      d.redelivered = again;
      std::string why;
      if (options_.cloudevents.mode != cloudevents_mode::off)
        why = decode_cloudevent(msg.get(), d.msg);
      else if (!decode(msg.get(), d.msg))
        why = "not an outbox event (no valid id, event type or aggregate headers)";
      if (!why.empty()) {
        ++malformed_;
        last_malformed_ = std::move(why);
        (void)natsMsg_Term(msg.get(), nullptr);
        continue;
      }
      ready_.emplace(seq, fetched{std::move(d), std::move(msg)});
    }
    natsMsgList_Destroy(&list);
  }

  /// True when the server says the consumer does not exist (any other answer: false).
  bool consumer_deleted() {
    jsConsumerInfo* info = nullptr;
    jsErrCode why = static_cast<jsErrCode>(0);
    const natsStatus look = js_GetConsumerInfo(&info, js_.get(), options_.stream.name.c_str(),
                                               options_.durable.c_str(), nullptr, &why);
    jsConsumerInfo_Destroy(info);
    return look != NATS_OK && why == JSConsumerNotFoundErr;
  }

  /// A fetch failed: the consumer was deleted, or the connection is down.
  [[noreturn]] void lost(natsStatus s, jsErrCode code) {
    if (consumer_deleted()) {
      const jsErrCode why = JSConsumerNotFoundErr;
      retire();  // on a closed connection: the next `ensure` opens another
      conn_->close();
      throw error(options_.create_consumer ? errc::transient : errc::misconfigured, "nats",
                  std::to_string(why),
                  "the consumer " + options_.durable + " of stream " + options_.stream.name +
                      " was deleted" +
                      (options_.create_consumer
                           ? std::string("; the next receive creates it again")
                           : std::string(" (receiver_options.create_consumer is false)")));
    }
    conn_->fail(s == NATS_OK ? NATS_ERR : s, "fetch from " + options_.durable, code);
  }

  /// NAKs everything held or fetched ahead (delivered again at once), then closes.
  void give_back() noexcept {
    for (auto& [seq, msg] : held_)
      if (msg) (void)natsMsg_Nak(msg.get(), nullptr);
    for (auto& [seq, f] : ready_)
      if (f.msg) (void)natsMsg_Nak(f.msg.get(), nullptr);
    held_.clear();
    ready_.clear();
    if (conn_ && conn_->handle()) (void)natsConnection_FlushTimeout(conn_->handle(), 1000);
    retire();
    if (conn_) conn_->close();
  }

  /// Drops what is held or fetched (their messages refer to the subscription) and the
  /// subscription, destroyed only once the connection is closed (`connection::disconnect`):
  /// never beside libnats' reader.
  void retire() noexcept {
    held_.clear();
    ready_.clear();
    if (sub_) conn_->disconnect();
    sub_.reset();
    js_.reset();
  }

  receiver_options options_;
  std::unique_ptr<connection> conn_;
  detail::js_ptr js_;
  std::unique_ptr<natsSubscription, sub_deleter> sub_;
  std::map<std::uint64_t, fetched> ready_;  // stream sequence -> fetched, not handed out
  std::map<std::uint64_t, msg_ptr> held_;   // stream sequence -> handed out, not settled
  std::size_t max_held_ = 0;
  std::uint64_t malformed_ = 0;
  std::string last_malformed_{};
  std::chrono::steady_clock::time_point checked_{};  // the consumer last known to exist
};

static_assert(concepts::receiver<receiver>);

}  // namespace outbox::nats
