#pragma once
/// @file
/// `outbox::amqp::publisher`: the relay's side of the AMQP 0-9-1 transport (RabbitMQ) over
/// rabbitmq-c. Publisher confirms, `mandatory` with basic.return handled, persistent messages.

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <outbox/amqp/connection.hpp>
#include <outbox/amqp/protocol.hpp>
#include <outbox/concepts/transport.hpp>
#include <outbox/message.hpp>

namespace outbox::amqp {

/// Options of a publisher. Fill with designated initialisers.
struct publisher_options {
  connection_options connection{};      ///< URL, timeouts, TLS.
  std::string exchange = "outbox";      ///< Where events are published.
  std::string exchange_type = "topic";  ///< The type `declare_exchange` declares it with.
  /// true: declare the exchange (durable, not auto-deleted) on connect; false: require that it
  /// exists (a passive declare; missing = `misconfigured`).
  bool declare_exchange = true;
  /// The routing key of a message; empty: `<aggregate_type>.<event_type>`.
  std::function<std::string(const message&)> routing_key{};
  /// Publishing this many messages without reading, it reads the confirms that came in.
  std::size_t drain_every = 256;
  /// The largest payload sent, in bytes; a larger one is that message's `permanent` failure.
  /// RabbitMQ closes the channel (406) for a body over its `max_message_size` (128 MiB unless
  /// configured), which would fail the whole batch: set this to the broker's value if it is lower.
  std::size_t max_message_bytes = 128 * 1024 * 1024;
  /// true (the default): a message the broker returns as unroutable (basic.return, 312
  /// NO_ROUTE: no queue bound for its routing key) is a `transient` failure, retried with
  /// backoff, so a binding that is missing for a while (a broker restart, a consumer that
  /// declares its queue after the relay started) costs no dead letter; the storm guard does not
  /// see those. false: its `permanent` failure, so the relay's storm guard pauses the route
  /// after a few (`relay_options::storm_guard`): for topologies declared before any publish,
  /// where a missing binding is a mistake to stop at.
  bool retry_unroutable = true;
  /// CloudEvents (off by default): binary mode writes `cloudEvents:*` headers, structured mode
  /// a JSON envelope (docs/cloudevents.md). A message whose headers cannot be extension
  /// attributes fails `permanent`. A bad `source` is refused (`misconfigured`).
  cloudevents_options cloudevents{};
};

/// A `concepts::transport` over AMQP 0-9-1. `publish` puts the whole batch on the wire
/// (confirm mode, `mandatory`, delivery_mode 2), then reads basic.ack / basic.nack (with their
/// `multiple` flag) and basic.return frames until every message has an outcome or `until`:
/// an ack = confirmed; a nack = `transient` failure; a message returned as unroutable (RabbitMQ
/// sends basic.return before the basic.ack of the same delivery tag) = a failure with
/// the reply code (`transient` by default: `publisher_options::retry_unroutable`). A message
/// with no answer by `until`, or still unconfirmed when the connection is lost (sent or not),
/// is `in_doubt`: the relay defers it without counting an attempt (the broker may have it); the
/// next `publish` reconnects. When the broker answered nothing for anything written (frozen,
/// stopped reading, or the connection lost first), `publish` throws `transient` instead. A
/// message that AMQP cannot carry (a routing key, `type` or header name over 255 bytes, headers
/// that do not fit in a frame, see `unsendable`) is that message's `permanent` failure, found
/// before any byte of it is written: the rest of the batch goes out on the same connection. A
/// connect that ends past `until` sends nothing (`transient`): a late batch would be a copy of what
/// another relay sent.
///
/// Threading: one connection, not thread-safe; use it from one thread (or behind a lock).
/// Move-only (see the move constructor).
class publisher {
 public:
  /// Parses the URL; connects lazily (first `publish`) unless `connect()` is called.
  /// @throws outbox::error `misconfigured` for a bad URL.
  explicit publisher(publisher_options options)
      : options_(std::move(options)),
        ce_(options_.cloudevents, "amqp"),
        conn_(options_.connection) {
    if (options_.exchange.empty())
      throw error(errc::misconfigured, "amqp", {},
                  "publisher_options.exchange must not be empty (the default exchange cannot "
                  "route by <aggregate_type>.<event_type>)");
    require_short_string(options_.exchange, "publisher_options.exchange");
    require_short_string(options_.exchange_type, "publisher_options.exchange_type");
  }

  publisher(const publisher&) = delete;
  publisher& operator=(const publisher&) = delete;
  /// Move-only: the connection (open or not) goes with the publisher; moving into a publisher
  /// closes its own connection first. A moved-from publisher may only be destroyed or assigned
  /// to. Nothing (no thread, no callback) keeps the address of a publisher.
  publisher(publisher&&) = default;
  /// Moves the publisher, as the move constructor does.
  publisher& operator=(publisher&&) = default;

  /// The route of `m` (`concepts::routing_transport`, for the relay's storm guard):
  /// `amqp:<exchange>/<routing key>`.
  [[nodiscard]] std::string route(const message& m) const {
    return "amqp:" + options_.exchange + "/" +
           (options_.routing_key ? options_.routing_key(m) : m.aggregate_type + "." + m.event_type);
  }

  /// Opens the connection now (declares the exchange, enters confirm mode).
  /// @throws outbox::error `transient` or `misconfigured`.
  void connect() { ensure(); }

  /// Where it publishes, without credentials.
  [[nodiscard]] const std::string& where() const noexcept { return conn_.where(); }
  /// The rabbitmq-c connection (null while disconnected), for what this adapter does not cover.
  [[nodiscard]] amqp_connection_state_t native_handle() const noexcept { return conn_.state(); }
  /// Connections opened so far (reconnects after failures add one each).
  [[nodiscard]] std::uint64_t connections() const noexcept { return conn_.generation(); }

  /// Publishes `batch` and waits until `until` for its confirms. See the class comment.
  /// @throws outbox::error when no connection can be opened (`transient`), or the exchange is
  ///         missing or access refused (`misconfigured`); `transient` when the broker answered
  ///         nothing (no ack, nack, return or close) for anything written: frozen, stopped
  ///         reading, or the connection lost first. The relay then counts no attempt, so a broker
  ///         that hangs never dead-letters the backlog.
  std::vector<publish_result> publish(std::span<const message> batch,
                                      std::chrono::steady_clock::time_point until) {
    written_ = 0;
    answers_ = 0;
    auto results = publish_all(batch, until);
    if (written_ > 0 && answers_ == 0) {
      std::string why = "no confirm, nack or return for any of the " + std::to_string(written_) +
                        " messages written; nothing confirmed";
      for (const auto& r : results)
        if (!r.confirmed && r.error_class == errc::in_doubt) {
          why = r.error + "; nothing of the " + std::to_string(written_) +
                " messages written was answered";
          break;
        }
      throw error(errc::transient, "amqp", {}, why);
    }
    return results;
  }

 private:
  std::vector<publish_result> publish_all(std::span<const message> batch,
                                          std::chrono::steady_clock::time_point until) {
    std::vector<publish_result> results;
    if (batch.empty()) return results;
    ensure();
    // A (re)connect that ended past the deadline (a broker slow to answer its handshake) sends
    // nothing: the caller's claim may have run out meanwhile, and another relay published the
    // batch; sent now, it would arrive as late copies. The connection stays for the next call.
    if (std::chrono::steady_clock::now() >= until)
      throw error(
          errc::transient, "amqp", {},
          "connected only after the publish deadline; nothing sent (" + conn_.where() + ")");
    results.resize(batch.size());
    pending_.clear();
    by_id_.clear();
    returned_.clear();
    for (std::size_t i = 0; i < batch.size(); ++i) {
      results[i].id = batch[i].id;
      results[i].confirmed = false;
      results[i].error_class = errc::in_doubt;
      results[i].error = "no confirm by the deadline";
    }
    std::string key;
    encoded_message out;
    const wire_limits limits{
        .frame_max = static_cast<std::size_t>(amqp_get_frame_max(conn_.state())),
        .max_message_bytes = options_.max_message_bytes,
        .custom_routing_key = static_cast<bool>(options_.routing_key)};
    std::size_t sent = 0;
    for (; sent < batch.size(); ++sent) {
      const message& m = batch[sent];
      key = options_.routing_key ? options_.routing_key(m) : m.aggregate_type + "." + m.event_type;
      std::string why = unsendable(m, key, limits);
      if (why.empty() && ce_.on()) why = cloudevents_unsendable(ce_, m, limits, out);
      if (!why.empty()) {
        results[sent].error_class = errc::permanent;
        results[sent].error = std::move(why);
        continue;
      }
      if (!ce_.on()) encode(m, out);  // the CloudEvent is encoded by its check
      // rabbitmq-c writes without a time limit: a broker that stops reading (an alarm, frozen,
      // a half-open connection) would block here past `until` once the socket buffers fill.
      ++written_;
      if (!writable_by(until)) {
        lost(results, "the broker stopped reading: nothing could be written by the deadline");
        return results;
      }
      const int rc =
          amqp_basic_publish(conn_.state(), connection::channel, bytes(options_.exchange),
                             bytes(key), 1, 0, &out.properties, bytes(out.body));
      if (rc != AMQP_STATUS_OK) {
        if (rc == AMQP_STATUS_BAD_AMQP_DATA || rc == AMQP_STATUS_TABLE_TOO_BIG) {
          // rabbitmq-c could not encode this message after all (`unsendable` should have said
          // so): it is this message's failure. Its basic.publish may already be on the wire
          // without its content, so the connection cannot be used any further.
          results[sent].error_class = errc::permanent;
          results[sent].error =
              std::string("rabbitmq-c cannot encode this message: ") + amqp_error_string2(rc);
        }
        lost(results, std::string("publish failed: ") + amqp_error_string2(rc));
        return results;
      }
      const std::uint64_t tag = ++next_tag_;
      pending_.emplace(tag, sent);
      by_id_.emplace(std::move(out.id), sent);
      if (options_.drain_every != 0 && (sent + 1) % options_.drain_every == 0)
        if (!read_frames(results, std::chrono::steady_clock::now(), true)) return results;
    }
    heard_ = false;
    if (read_frames(results, until, false) && !pending_.empty() && !heard_) {
      // Confirms missing at the deadline and not a frame from the broker meanwhile: it is stuck
      // or the connection half-open. Drop it, so the next publish finds out by reconnecting (a
      // failed connect throws and the relay spends no attempt) instead of publishing into it
      // again. (A broker that is merely slow keeps its connection; its late acks are ignored.)
      conn_.drop();
      pending_.clear();
    }
    return results;
  }

  void ensure() {
    if (!conn_.ensure()) return;
    next_tag_ = 0;  // delivery tags restart with the channel
    amqp_connection_state_t s = conn_.state();
    amqp_confirm_select(s, connection::channel);
    conn_.check(amqp_get_rpc_reply(s), "confirm.select");
    amqp_exchange_declare(s, connection::channel, bytes(options_.exchange),
                          bytes(options_.exchange_type), options_.declare_exchange ? 0 : 1, 1, 0, 0,
                          amqp_empty_table);
    conn_.check(amqp_get_rpc_reply(s),
                options_.declare_exchange ? "exchange.declare" : "exchange.declare (passive)");
  }

  /// The connection failed: every message without an outcome is `in_doubt` (sent or not, the
  /// broker did not answer for it), or `cls` when the broker closed it with a reason.
  void lost(std::vector<publish_result>& results, const std::string& why,
            errc cls = errc::in_doubt) {
    conn_.drop();
    for (std::size_t i = 0; i < results.size(); ++i) {
      if (results[i].confirmed || returned_.contains(i) ||
          results[i].error_class == errc::permanent)
        continue;
      results[i].error_class = cls;
      results[i].error = why + " (" + conn_.where() + ")";
    }
    pending_.clear();
  }

  void settle(std::vector<publish_result>& results, std::uint64_t tag, bool ack,
              bool up_to_multiple) {
    auto settle_one = [&](std::size_t i) {
      ++answers_;
      if (returned_.contains(i)) return;  // already failed by its basic.return
      if (ack) {
        results[i].confirmed = true;
        results[i].error.clear();
      } else {
        results[i].error_class = errc::transient;
        results[i].error = "nacked by the broker";
      }
    };
    if (up_to_multiple) {
      const auto end = pending_.upper_bound(tag);
      for (auto it = pending_.begin(); it != end; ++it) settle_one(it->second);
      pending_.erase(pending_.begin(), end);
    } else if (auto it = pending_.find(tag); it != pending_.end()) {
      settle_one(it->second);
      pending_.erase(it);
    }
  }

  /// Reads confirms and returns until nothing is pending or `until` (`poll`: only what is
  /// already there). @return false when the connection was lost.
  bool read_frames(std::vector<publish_result>& results,
                   std::chrono::steady_clock::time_point until, bool poll) {
    amqp_connection_state_t s = conn_.state();
    while (!pending_.empty()) {
      amqp_maybe_release_buffers(s);
      const auto left = until - std::chrono::steady_clock::now();
      if (!poll && left <= std::chrono::steady_clock::duration::zero()) break;
      timeval tv =
          detail::to_timeval(poll ? std::chrono::microseconds(0)
                                  : std::chrono::duration_cast<std::chrono::microseconds>(left));
      amqp_frame_t frame{};
      const int rc = amqp_simple_wait_frame_noblock(s, &frame, &tv);
      if (rc == AMQP_STATUS_TIMEOUT) {
        if (poll) break;
        continue;
      }
      if (rc != AMQP_STATUS_OK) {
        lost(results, std::string("connection lost: ") + amqp_error_string2(rc));
        return false;
      }
      heard_ = true;
      if (frame.frame_type != AMQP_FRAME_METHOD) continue;
      switch (frame.payload.method.id) {
        case AMQP_BASIC_ACK_METHOD: {
          const auto* a = static_cast<const amqp_basic_ack_t*>(frame.payload.method.decoded);
          settle(results, a->delivery_tag, true, a->multiple != 0);
          break;
        }
        case AMQP_BASIC_NACK_METHOD: {
          const auto* n = static_cast<const amqp_basic_nack_t*>(frame.payload.method.decoded);
          settle(results, n->delivery_tag, false, n->multiple != 0);
          break;
        }
        case AMQP_BASIC_RETURN_METHOD: {
          const auto* r = static_cast<const amqp_basic_return_t*>(frame.payload.method.decoded);
          ++answers_;
          const std::string reason =
              "unroutable: returned by the broker with " + std::to_string(r->reply_code) + " " +
              to_string(r->reply_text) + " (exchange " + to_string(r->exchange) + ", routing key " +
              to_string(r->routing_key) + ")";
          // The returned content (header and body frames) follows; its message_id names it.
          amqp_message_t returned{};
          const amqp_rpc_reply_t rr = amqp_read_message(s, frame.channel, &returned, 0);
          if (rr.reply_type != AMQP_RESPONSE_NORMAL) {
            lost(results, "connection lost while reading a returned message");
            return false;
          }
          if (returned.properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG) {
            if (auto it = by_id_.find(to_string(returned.properties.message_id));
                it != by_id_.end()) {
              returned_.insert(it->second);
              results[it->second].confirmed = false;
              results[it->second].error_class =
                  options_.retry_unroutable ? errc::transient : errc::permanent;
              results[it->second].error = reason;
            }
          }
          amqp_destroy_message(&returned);
          break;
        }
        case AMQP_CHANNEL_CLOSE_METHOD:
        case AMQP_CONNECTION_CLOSE_METHOD: {
          ++answers_;
          const broker_close closed = *decode_close(frame.payload.method);
          // A vanished exchange that this publisher declares comes back with the reconnect. A
          // close about the node (320 CONNECTION_FORCED: closed by an operator, or shutting
          // down; 506 RESOURCE_ERROR) says nothing of the messages: what has no outcome may have
          // been routed, or was never written: in doubt. (A protocol error may be a message's.)
          const errc cls = closed.code == 320 || closed.code == 506          ? errc::in_doubt
                           : closed.code == 404 && options_.declare_exchange ? errc::transient
                                                                             : closed.kind();
          lost(results, closed.describe(), cls);
          return false;
        }
        default:
          break;
      }
    }
    if (!poll) returned_.clear();
    return true;
  }

  /// True when the socket can take more bytes before `until` (poll for POLLOUT).
  bool writable_by(std::chrono::steady_clock::time_point until) const {
    pollfd p{amqp_get_sockfd(conn_.state()), POLLOUT, 0};
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      const int rc = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(0, left.count())));
      if (rc > 0) return true;  // writable, or an error the write itself will report
      if (rc == 0) return false;
      if (errno != EINTR) return true;
    }
  }

  publisher_options options_;
  cloudevents ce_;
  connection conn_;
  bool heard_ = false;       ///< A frame arrived during the last wait for confirms.
  std::size_t written_ = 0;  ///< Messages of the last `publish` whose write began.
  std::size_t answers_ = 0;  ///< Acks, nacks, returns and closes the broker sent for it.
  std::uint64_t next_tag_ = 0;
  std::map<std::uint64_t, std::size_t> pending_;        // delivery tag -> batch index
  std::unordered_map<std::string, std::size_t> by_id_;  // message_id -> batch index
  std::unordered_set<std::size_t> returned_;            // batch indexes returned
};

static_assert(concepts::routing_transport<publisher>);

}  // namespace outbox::amqp
