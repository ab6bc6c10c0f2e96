#pragma once
/// @file
/// `outbox::amqp::receiver`: the consumer's side of the AMQP 0-9-1 transport. basic.consume with
/// manual acknowledgements on one queue, prefetch by basic.qos; `ack` after the consumer's commit.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>

#include <outbox/amqp/connection.hpp>
#include <outbox/amqp/protocol.hpp>
#include <outbox/concepts/transport.hpp>
#include <outbox/message.hpp>

namespace outbox::amqp {

/// Options of a receiver. Fill with designated initialisers.
struct receiver_options {
  connection_options connection{};  ///< URL, timeouts, TLS.
  std::string queue{};              ///< The queue to consume (required).
  /// true: declare the queue (durable) and bind it to `exchange` with `binding_key` on connect;
  /// false: consume a queue that exists (a passive declare; missing = `misconfigured`).
  bool declare_queue = true;
  std::string exchange = "outbox";      ///< Bound to when `declare_queue`.
  std::string exchange_type = "topic";  ///< Declared (durable) when `declare_queue`.
  std::string binding_key = "#";        ///< `#`: every event of the exchange.
  /// basic.qos: unacknowledged deliveries held at most. Above 1 (or with several consumers on
  /// the queue) a delivery nacked for a retry can be overtaken by a later event of its aggregate
  /// already delivered: for strict per-aggregate order, 1 and one consumer per queue.
  std::uint16_t prefetch = 100;
  /// The queue's `x-dead-letter-exchange`, where RabbitMQ sends what is nacked without requeue
  /// (malformed deliveries; failed ones with `consumer_options::dead_letters = transport`);
  /// empty: they are dropped. It must exist when the receiver connects (a passive declare;
  /// missing = `misconfigured`, native code 404). Set as a queue argument when `declare_queue` (a
  /// queue that exists with other arguments makes the declare fail: 406, `misconfigured`); with
  /// `declare_queue` false, name the exchange the queue's policy sets, so `has_dead_letter_route()`
  /// says so. RabbitMQ dead-letters from classic queues at most once: bind a queue to this
  /// exchange.
  std::string dead_letter_exchange{};
  /// CloudEvents: any mode but `off` reads binary-mode (`cloudEvents:*` headers) and
  /// structured-mode deliveries as well as plain outbox ones; `source` is not used.
  cloudevents_options cloudevents{};
};

/// A `concepts::receiver` over AMQP 0-9-1. `receive` returns the next basic.deliver parsed back
/// into an `outbox::message` (message_id = id, type = event_type, headers aggregate_type and
/// aggregate_id, the other string headers as headers (except the broker's dead-lettering
/// headers `x-death`, `x-first-death-*`, `x-last-death-*`), body = payload, its exact bytes,
/// `content_type` = content_type, `application/json` when the property is absent or empty);
/// `redelivered` is the broker's flag. A malformed delivery (no valid message_id, missing
/// aggregate headers, a non-string header, a timestamp outside what `time_point` represents, a
/// content type that is not a media type) is rejected without requeue and counted
/// (`malformed()`). The payload is never checked: it is the application's, whatever its type.
/// `ack` = basic.ack, `nack(requeue)` = basic.nack. A lost connection is `transient`; the next
/// `receive` reconnects, and the broker redelivers what was not acknowledged (acks of deliveries
/// from the old connection are ignored: their tags died with it).
///
/// Threading: one connection, one thread. Move-only (see the move constructor).
class receiver {
 public:
  /// @throws outbox::error `misconfigured` for a bad URL or an empty queue name.
  explicit receiver(receiver_options options)
      : options_(with_heartbeat(std::move(options))), conn_(options_.connection) {
    if (options_.queue.empty())
      throw error(errc::misconfigured, "amqp", {}, "receiver_options.queue must not be empty");
    if (options_.prefetch == 0)
      throw error(errc::misconfigured, "amqp", {}, "receiver_options.prefetch must be > 0");
    require_short_string(options_.queue, "receiver_options.queue");
    require_short_string(options_.exchange, "receiver_options.exchange");
    require_short_string(options_.exchange_type, "receiver_options.exchange_type");
    require_short_string(options_.binding_key, "receiver_options.binding_key");
    require_short_string(options_.dead_letter_exchange, "receiver_options.dead_letter_exchange");
  }
  receiver(const receiver&) = delete;
  receiver& operator=(const receiver&) = delete;
  /// Move-only: the connection, its consumer and the deliveries held go with the receiver (their
  /// tags stay valid for it); moving into a receiver closes its own connection first (the broker
  /// requeues what it held). A moved-from receiver may only be destroyed or assigned to.
  receiver(receiver&&) = default;
  /// Moves the receiver, as the move constructor does.
  receiver& operator=(receiver&&) = default;

  /// Connects now: declares and binds the queue, starts consuming.
  /// @throws outbox::error `transient` or `misconfigured`.
  void connect() { ensure(); }

  /// The next delivery, or `nullopt` after `timeout`.
  /// @throws outbox::error `transient` when the connection is lost (the next call reconnects).
  std::optional<delivery> receive(std::chrono::milliseconds timeout) {
    ensure();
    const auto until = std::chrono::steady_clock::now() + timeout;
    amqp_connection_state_t s = conn_.state();
    for (;;) {
      amqp_maybe_release_buffers(s);
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
          until - std::chrono::steady_clock::now());
      timeval tv = detail::to_timeval(left);
      amqp_envelope_t env{};
      const amqp_rpc_reply_t r = amqp_consume_message(s, &env, &tv, 0);
      if (r.reply_type == AMQP_RESPONSE_NORMAL) {
        delivery d;
        d.tag = env.delivery_tag;
        d.redelivered = env.redelivered != 0;
        std::string why;
        if (options_.cloudevents.mode != cloudevents_mode::off)
          why = decode_cloudevent(env.message, d.msg);
        else if (!decode(env.message, d.msg))
          why = "not an outbox event (no valid message_id, type or aggregate headers)";
        amqp_destroy_envelope(&env);
        if (!why.empty()) {
          ++malformed_;
          last_malformed_ = std::move(why);
          if (amqp_basic_nack(s, connection::channel, d.tag, 0, 0) != AMQP_STATUS_OK)
            conn_.fail(errc::transient, {}, "basic.nack of a malformed delivery failed");
          continue;
        }
        unacked_.insert(d.tag);
        d.tag = encode(d.tag);
        return d;
      }
      if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT)
        return std::nullopt;
      if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
          r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
        // Another frame than basic.deliver: a close or a cancel ends this connection.
        amqp_frame_t frame{};
        const int rc = amqp_simple_wait_frame(s, &frame);
        if (rc != AMQP_STATUS_OK)
          conn_.fail(errc::transient, amqp_error_string2(rc), "connection lost");
        if (frame.frame_type == AMQP_FRAME_METHOD) {
          if (const auto closed = decode_close(frame.payload.method)) conn_.fail(*closed);
          if (frame.payload.method.id == AMQP_BASIC_CANCEL_METHOD)
            conn_.fail(errc::transient, {}, "the broker cancelled the consumer (queue deleted?)");
        }
        continue;
      }
      conn_.check(r, "basic.consume");
    }
  }

  /// basic.ack of `d` (after the consumer's commit). A delivery of an earlier connection is
  /// ignored (the broker requeued it when that connection died).
  /// @throws outbox::error `transient` when the ack cannot be sent.
  void ack(const delivery& d) { settle(d, true, false); }

  /// basic.nack of `d`: `requeue` delivers it again (marked redelivered), otherwise it is dropped
  /// (or dead-lettered by the queue's own `x-dead-letter-exchange`, if configured).
  void nack(const delivery& d, bool requeue) { settle(d, false, requeue); }

  /// True when a `nack(d, false)` goes somewhere (the queue has a dead-letter exchange) rather
  /// than dropping the delivery: what `consumer_options::dead_letters = transport` needs.
  [[nodiscard]] bool has_dead_letter_route() const noexcept {
    return !options_.dead_letter_exchange.empty();
  }

  /// Deliveries handed out and not yet acknowledged on the current connection.
  [[nodiscard]] std::size_t held() const noexcept { return unacked_.size(); }
  /// The most it hands out unacknowledged (`prefetch`): a consumer holding deliveries back for
  /// their predecessor keeps fewer than that (`consumer_options::max_deferred`).
  [[nodiscard]] std::size_t max_held() const noexcept { return options_.prefetch; }
  /// Deliveries rejected as malformed so far.
  [[nodiscard]] std::uint64_t malformed() const noexcept { return malformed_; }
  /// Why the last delivery counted in `malformed` was rejected.
  [[nodiscard]] const std::string& last_malformed() const noexcept { return last_malformed_; }
  /// The rabbitmq-c connection (null while disconnected), for what this adapter does not cover.
  [[nodiscard]] amqp_connection_state_t native_handle() const noexcept { return conn_.state(); }
  /// Connections opened so far.
  [[nodiscard]] std::uint64_t connections() const noexcept { return conn_.generation(); }

 private:
  // A delivery's tag carries the connection generation in its top 16 bits, so an ack of a
  // delivery from an earlier connection is recognised (and ignored) instead of acking a
  // different delivery that happens to have the same tag on the new channel.
  [[nodiscard]] std::uint64_t encode(std::uint64_t tag) const noexcept {
    return ((conn_.generation() & 0xFFFF) << 48) | (tag & ((std::uint64_t{1} << 48) - 1));
  }

  void settle(const delivery& d, bool ack, bool requeue) {
    if (!conn_.open() || (d.tag >> 48) != (conn_.generation() & 0xFFFF)) return;
    const std::uint64_t tag = d.tag & ((std::uint64_t{1} << 48) - 1);
    if (unacked_.erase(tag) == 0) return;
    const int rc =
        ack ? amqp_basic_ack(conn_.state(), connection::channel, tag, 0)
            : amqp_basic_nack(conn_.state(), connection::channel, tag, 0, requeue ? 1 : 0);
    if (rc != AMQP_STATUS_OK)
      conn_.fail(errc::transient, amqp_error_string2(rc),
                 ack ? "basic.ack failed" : "basic.nack failed");
  }

  /// A receiver calls rabbitmq-c at least every poll: heartbeats on unless asked otherwise.
  static receiver_options with_heartbeat(receiver_options o) {
    if (!o.connection.heartbeat) o.connection.heartbeat = std::chrono::seconds(30);
    return o;
  }

  void ensure() {
    if (!conn_.ensure()) return;
    unacked_.clear();
    amqp_connection_state_t s = conn_.state();
    const amqp_channel_t ch = connection::channel;
    amqp_basic_qos(s, ch, 0, options_.prefetch, 0);
    conn_.check(amqp_get_rpc_reply(s), "basic.qos");
    if (!options_.dead_letter_exchange.empty()) {
      // A dead-letter exchange that does not exist would drop what is rejected: passive
      // declare (missing = 404, `misconfigured`).
      amqp_exchange_declare(s, ch, bytes(options_.dead_letter_exchange), bytes("topic"), 1, 0, 0, 0,
                            amqp_empty_table);
      conn_.check(amqp_get_rpc_reply(s), "exchange.declare (passive) of the dead-letter exchange");
    }
    if (options_.declare_queue) {
      amqp_exchange_declare(s, ch, bytes(options_.exchange), bytes(options_.exchange_type), 0, 1, 0,
                            0, amqp_empty_table);
      conn_.check(amqp_get_rpc_reply(s), "exchange.declare");
      amqp_table_entry_t dlx{};
      dlx.key = bytes("x-dead-letter-exchange");
      dlx.value.kind = AMQP_FIELD_KIND_UTF8;
      dlx.value.value.bytes = bytes(options_.dead_letter_exchange);
      const amqp_table_t args{options_.dead_letter_exchange.empty() ? 0 : 1, &dlx};
      amqp_queue_declare(s, ch, bytes(options_.queue), 0, 1, 0, 0, args);
      conn_.check(amqp_get_rpc_reply(s), "queue.declare");
      amqp_queue_bind(s, ch, bytes(options_.queue), bytes(options_.exchange),
                      bytes(options_.binding_key), amqp_empty_table);
      conn_.check(amqp_get_rpc_reply(s), "queue.bind");
    } else {
      amqp_queue_declare(s, ch, bytes(options_.queue), 1, 0, 0, 0, amqp_empty_table);
      conn_.check(amqp_get_rpc_reply(s), "queue.declare (passive)");
    }
    amqp_basic_consume(s, ch, bytes(options_.queue), amqp_empty_bytes, 0, 0, 0, amqp_empty_table);
    conn_.check(amqp_get_rpc_reply(s), "basic.consume");
  }

  receiver_options options_;
  connection conn_;
  std::unordered_set<std::uint64_t> unacked_;  // raw tags on the current connection
  std::uint64_t malformed_ = 0;
  std::string last_malformed_{};
};

static_assert(concepts::receiver<receiver>);

}  // namespace outbox::amqp
