#pragma once
/// @file
/// `outbox::zeromq::receiver`: the consumer's side of the ZeroMQ transport. A DEALER socket that
/// announces its frame limit (LIMIT) and itself with a credit window (HELLO), receives EVENTs and
/// acknowledges each one (ACK) when the consumer calls `ack`, which `outbox::consumer` does after
/// its commit. An EVENT it refuses for its content is NACKed by id.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include <zmq.hpp>

#include <outbox/concepts/transport.hpp>
#include <outbox/message.hpp>
#include <outbox/uuid.hpp>
#include <outbox/zeromq/protocol.hpp>

namespace outbox::zeromq {

/// CURVE client settings of a receiver (Z85 keys).
struct curve_client {
  std::string server_public_key{};  ///< The publisher's public key.
  std::string public_key{};         ///< This consumer's key pair.
  std::string secret_key{};         ///< The secret key of that pair.
};

/// Options of a receiver. Fill with designated initialisers.
struct receiver_options {
  std::string endpoint{};         ///< The publisher's endpoint.
  bool bind = false;              ///< Connect (default), or bind.
  std::string name = "consumer";  ///< Announced in HELLO (1..255 bytes, UTF-8).
  std::uint32_t credit = 1000;    ///< Deliveries held unacknowledged at most.
  /// Larger frames are refused and counted. Announced to the publisher (LIMIT), which then fails
  /// an event this consumer cannot take as `permanent` instead of sending it.
  std::size_t max_frame_bytes = 2u << 20;
  std::chrono::milliseconds hello_interval{500};  ///< Re-announce while idle (relay restarts).
  std::chrono::milliseconds send_timeout{1000};   ///< For acks when the relay is slow to read.
  std::optional<curve_client> curve{};            ///< Authenticate and encrypt (CURVE).
  /// CloudEvents: any mode but `off` reads both modes (protocol.hpp) and plain events; an
  /// EVENT that is not a CloudEvent after all (a required attribute missing) is NACKed with
  /// the reason, so the relay dead-letters it. `source` is not used.
  cloudevents_options cloudevents{};
};

/// A `concepts::receiver` over ZeroMQ. `ack` sends the confirm the relay waits for; `nack` with
/// requeue delivers the event again locally (the relay keeps waiting for its ack); `nack`
/// without requeue rejects it (the relay sees a permanent failure and dead-letters it).
/// A receiver that dies with unacknowledged deliveries loses nothing: the relay gets no ack by
/// its deadline and re-sends them (to any consumer), and the inbox absorbs the duplicates.
///
/// Threading: owns its own `zmq::context_t` and DEALER socket; use it from one thread (one
/// consumer thread). The routing id is random per receiver, so a restarted consumer is a new
/// peer; a reconnecting one keeps its id (the relay sets ROUTER_HANDOVER). Move-only (see the
/// move constructor).
class receiver {
 public:
  /// @throws outbox::error `misconfigured` for a bad endpoint or CURVE without libzmq support.
  explicit receiver(receiver_options options)
      : options_(std::move(options)), dealer_(ctx_, zmq::socket_type::dealer) {
    if (options_.credit == 0 || options_.credit > 1'000'000)
      throw error(errc::misconfigured, "zeromq", {}, "receiver_options.credit must be 1..1000000");
    if (detail::check_name(options_.name) != detail::verdict::ok)
      throw error(errc::misconfigured, "zeromq", {},
                  "receiver_options.name must be 1..255 bytes of UTF-8");
    if (options_.max_frame_bytes == 0)  // it is announced, and a LIMIT of 0 is refused
      throw error(errc::misconfigured, "zeromq", {},
                  "receiver_options.max_frame_bytes must be > 0");
    try {
      dealer_.set(zmq::sockopt::linger, 0);
      dealer_.set(zmq::sockopt::routing_id, "c-" + make_uuid_v7().to_string());
      dealer_.set(zmq::sockopt::sndtimeo, static_cast<int>(options_.send_timeout.count()));
      dealer_.set(zmq::sockopt::rcvhwm, static_cast<int>(options_.credit) * 2 + 16);
      dealer_.set(zmq::sockopt::maxmsgsize,
                  static_cast<std::int64_t>(options_.max_frame_bytes) * 4 + 4096);
      if (options_.curve) {
        if (!has_curve())
          throw error(errc::misconfigured, "zeromq", {}, "CURVE keys given, libzmq has no CURVE");
        dealer_.set(zmq::sockopt::curve_serverkey, options_.curve->server_public_key);
        dealer_.set(zmq::sockopt::curve_publickey, options_.curve->public_key);
        dealer_.set(zmq::sockopt::curve_secretkey, options_.curve->secret_key);
      }
      if (options_.bind)
        dealer_.bind(options_.endpoint);
      else
        dealer_.connect(options_.endpoint);
      endpoint_ = options_.bind ? dealer_.get(zmq::sockopt::last_endpoint) : options_.endpoint;
      hello();  // queued until the connection is up
    } catch (const zmq::error_t& e) {
      throw make_error(e, (options_.bind ? "bind " : "connect ") + options_.endpoint);
    }
  }

  receiver(const receiver&) = delete;
  receiver& operator=(const receiver&) = delete;
  /// Move-only: the context, the DEALER socket (and so the routing id the relay knows), the
  /// deliveries held and the counters go with the receiver; moving into a receiver closes its
  /// own socket first (the relay re-sends what it held, as for a consumer that died). A
  /// moved-from receiver may only be destroyed or assigned to.
  receiver(receiver&&) = default;
  /// Closes the socket of this receiver, then takes over that of `other` (see above).
  receiver& operator=(receiver&& other) noexcept {
    if (this != &other) {
      dealer_.close();  // before its context: terminating a context waits for its sockets
      ctx_ = std::move(other.ctx_);
      dealer_ = std::move(other.dealer_);
      options_ = std::move(other.options_);
      endpoint_ = std::move(other.endpoint_);
      last_hello_ = other.last_hello_;
      unacked_ = std::move(other.unacked_);
      requeued_ = std::move(other.requeued_);
      wire_ids_ = std::move(other.wire_ids_);
      last_malformed_ = std::move(other.last_malformed_);
      next_tag_ = other.next_tag_;
      stats_ = other.stats_;
    }
    return *this;
  }

  /// The next delivery, or `nullopt` after `timeout`. Malformed messages are counted and skipped;
  /// an EVENT refused for its content whose id is readable is NACKed, so the relay fails it at
  /// once (see protocol.hpp).
  /// @throws outbox::error (`transient`) when the socket fails.
  std::optional<delivery> receive(std::chrono::milliseconds timeout) {
    if (!requeued_.empty()) {
      delivery d = std::move(requeued_.front());
      requeued_.pop_front();
      d.tag = ++next_tag_;
      unacked_.emplace(d.tag, wire_id(d.msg.id));
      return d;
    }
    const auto until = std::chrono::steady_clock::now() + timeout;
    detail::frames f;
    try {
      for (;;) {
        const auto now = std::chrono::steady_clock::now();
        if (now - last_hello_ >= options_.hello_interval) hello();
        f.clear();
        if (zmq::recv_multipart(dealer_, std::back_inserter(f), zmq::recv_flags::dontwait)) {
          message m;
          if (decode(f, m)) {
            const bool again = m.attempts > 1;  // claimed before: may have been delivered
            delivery d{std::move(m), ++next_tag_, again};
            unacked_.emplace(d.tag, wire_id(d.msg.id));
            return d;
          }
          continue;
        }
        if (now >= until) return std::nullopt;
        const auto wait =
            std::min(std::chrono::duration_cast<std::chrono::milliseconds>(until - now) +
                         std::chrono::milliseconds(1),
                     options_.hello_interval);
        zmq::pollitem_t item{dealer_.handle(), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, wait);
      }
    } catch (const zmq::error_t& e) {
      throw make_error(e, "receive");
    }
  }

  /// Confirms `d` to the relay (call it after the consumer's transaction committed).
  /// @throws outbox::error (`transient`) when the ack cannot be sent; the relay then re-sends.
  void ack(const delivery& d) { settle(d, command::ack, {}); }

  /// `requeue`: delivers `d` again (locally, marked redelivered). Otherwise rejects it.
  void nack(const delivery& d, bool requeue) {
    if (requeue) {
      if (unacked_.erase(d.tag) == 0) return;
      requeued_.push_back(delivery{d.msg, 0, true});
      return;
    }
    settle(d, command::nack, "rejected by the consumer");
  }

  /// Deliveries held: received and not yet acked, plus those requeued locally.
  [[nodiscard]] std::size_t held() const noexcept { return unacked_.size() + requeued_.size(); }
  /// The most the relay sends it unacknowledged (`credit`): a consumer holding deliveries back
  /// for their predecessor keeps fewer than that (`consumer_options::max_deferred`).
  [[nodiscard]] std::size_t max_held() const noexcept { return options_.credit; }
  /// The endpoint, with the actual port when bound to `tcp://...:*`.
  [[nodiscard]] const std::string& endpoint() const noexcept { return endpoint_; }
  /// The wire counters so far (not synchronized: read on the thread that receives).
  [[nodiscard]] const wire_stats& stats() const noexcept { return stats_; }
  /// Why the last EVENT refused as not a CloudEvent was NACKed.
  [[nodiscard]] const std::string& last_malformed() const noexcept { return last_malformed_; }

 private:
  void hello() {
    // LIMIT first, so the publisher knows it when the HELLO makes this consumer eligible (one
    // pipe: the order holds). A publisher that predates LIMIT counts it as bad_field.
    detail::frames limit;
    limit.push_back(detail::text_frame(protocol_version));
    limit.push_back(detail::text_frame(command::limit));
    limit.push_back(detail::text_frame(std::to_string(options_.max_frame_bytes)));
    detail::frames f;
    f.push_back(detail::text_frame(protocol_version));
    f.push_back(detail::text_frame(command::hello));
    f.push_back(detail::text_frame(std::to_string(options_.credit)));
    f.push_back(detail::text_frame(options_.name));
    last_hello_ = std::chrono::steady_clock::now();
    // Not connected yet, or the relay is not reading: the next interval tries again.
    zmq::pollitem_t item{dealer_.handle(), 0, ZMQ_POLLOUT, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(0));
    if ((item.revents & ZMQ_POLLOUT) == 0) return;
    if (!detail::send_frames(dealer_, limit)) return;
    ++stats_.sent;
    if (detail::send_frames(dealer_, f)) ++stats_.sent;
  }

  void settle(const delivery& d, std::string_view cmd, std::string_view reason) {
    auto it = unacked_.find(d.tag);
    if (it == unacked_.end()) return;  // settled already
    detail::frames f;
    f.push_back(detail::text_frame(protocol_version));
    f.push_back(detail::text_frame(cmd));
    f.push_back(detail::id_frame(it->second));
    if (cmd == command::nack) f.push_back(detail::text_frame(reason));
    if (it->second != d.msg.id) wire_ids_.erase(d.msg.id);
    unacked_.erase(it);
    bool sent = false;
    try {
      sent = detail::send_frames(dealer_, f);
    } catch (const zmq::error_t& e) {
      throw make_error(e, "send ack");
    }
    if (!sent)
      throw error(errc::transient, "zeromq", native_code(EAGAIN),
                  "send ack: timed out (the event will be re-sent)");
    ++stats_.sent;
  }

  bool decode(const detail::frames& f, message& m) {
    std::string_view cmd;
    auto v = detail::check_envelope(f, 0, options_.max_frame_bytes, cmd);
    // A command of the other direction is a bad field, whatever its frame count.
    if ((v == detail::verdict::ok || v == detail::verdict::bad_frame_count) && !cmd.empty() &&
        cmd != command::event && cmd != command::ping)
      v = detail::verdict::bad_field;
    if (v == detail::verdict::ok && cmd == command::ping) {  // the relay checking we are here
      ++stats_.received;
      return false;
    }
    std::string_view why;
    if (v == detail::verdict::ok) v = detail::decode_event(f, m, why);
    std::string ce_why;
    if (v == detail::verdict::ok && options_.cloudevents.mode != cloudevents_mode::off) {
      const message w = std::move(m);
      ce_why = decode_layout(w, cloudevents_prefix, m);
      if (!ce_why.empty()) {
        v = detail::verdict::bad_field;
        why = ce_why;
        last_malformed_ = ce_why;
      } else if (m.id != w.id) {
        wire_ids_.insert_or_assign(m.id, w.id);  // a foreign id: ACK the id the relay sent
      }
    }
    detail::count(stats_, v);
    if (v == detail::verdict::oversized || v == detail::verdict::bad_utf8 ||
        v == detail::verdict::bad_field)
      refuse(f, v, why);
    return v == detail::verdict::ok;
  }

  /// NACKs an EVENT refused for its content, when its id is readable: it will never be accepted,
  /// so the relay should fail it now (permanent) rather than wait for its deadline and retry it.
  /// A NACK that cannot be sent at once is skipped: the deadline then fails the event.
  void refuse(const detail::frames& f, detail::verdict v, std::string_view why) {
    const auto id = detail::refusable_event_id(f);
    if (!id) return;
    std::string reason = "refused by the receiver: ";
    if (v == detail::verdict::oversized)
      reason +=
          "a frame exceeds max_frame_bytes (" + std::to_string(options_.max_frame_bytes) + ")";
    else
      reason +=
          (v == detail::verdict::bad_utf8 ? "not valid UTF-8: " : "bad field: ") + std::string(why);
    detail::frames nack;
    nack.push_back(detail::text_frame(protocol_version));
    nack.push_back(detail::text_frame(command::nack));
    nack.push_back(detail::id_frame(*id));
    nack.push_back(detail::text_frame(reason));
    zmq::pollitem_t item{dealer_.handle(), 0, ZMQ_POLLOUT, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(0));
    if ((item.revents & ZMQ_POLLOUT) == 0) return;
    if (detail::send_frames(dealer_, nack)) ++stats_.sent;
  }

  // A member added here goes into the move assignment too.
  receiver_options options_;
  zmq::context_t ctx_;  ///< Declared before the socket: destroyed after it.
  zmq::socket_t dealer_;
  std::string endpoint_;
  std::chrono::steady_clock::time_point last_hello_{};
  std::unordered_map<std::uint64_t, uuid> unacked_;
  std::deque<delivery> requeued_;
  std::uint64_t next_tag_ = 0;
  wire_stats stats_;
  /// The EVENT id of a delivery whose CloudEvents id maps to another (`decode_layout`).
  std::unordered_map<uuid, uuid> wire_ids_;
  std::string last_malformed_{};

  /// The id ACK and NACK name for a delivery of id `id`.
  [[nodiscard]] uuid wire_id(const uuid& id) const {
    const auto it = wire_ids_.find(id);
    return it == wire_ids_.end() ? id : it->second;
  }
};

static_assert(concepts::receiver<receiver>);

}  // namespace outbox::zeromq
