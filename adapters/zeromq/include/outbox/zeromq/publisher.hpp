#pragma once
/// @file
/// `outbox::zeromq::publisher`: the relay's side of the ZeroMQ transport. A ROUTER socket
/// (ROUTER_MANDATORY, send timeout) hands events to consumers by credit and treats each
/// consumer's ACK (sent after its transaction committed) as the confirm.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include <outbox/concepts/transport.hpp>
#include <outbox/message.hpp>
#include <outbox/zeromq/protocol.hpp>

namespace outbox::zeromq {

/// CURVE server settings of a publisher (Z85 keys).
struct curve_server {
  std::string public_key{};  ///< Given to consumers as their `server_public_key`.
  std::string secret_key{};  ///< The secret key of the publisher, paired with `public_key`.
  /// Consumer public keys allowed in. Empty: any consumer that knows the server key.
  std::vector<std::string> allowed_clients{};
};

/// Options of a publisher. Fill with designated initialisers.
struct publisher_options {
  /// tcp://host:port (port `*` = an ephemeral one, see `endpoint()`), or ipc://path.
  std::string endpoint{};
  bool bind = true;                             ///< Bind (consumers connect), or connect.
  std::size_t max_frame_bytes = 2u << 20;       ///< Larger frames are refused (either way).
  std::chrono::milliseconds send_timeout{100};  ///< Per send when a consumer's pipe is full.
  int high_water_mark = 100'000;                ///< Per-peer queue limit (messages).
  /// While awaiting acks, consumers holding unacked events are pinged this often; one that is
  /// gone (ROUTER_MANDATORY: unroutable) fails its events at once instead of at the deadline.
  std::chrono::milliseconds probe_interval{200};
  /// ZMTP heartbeats, so a consumer whose host died (no FIN) is disconnected too (0 = off).
  std::chrono::milliseconds heartbeat_interval{1000};
  std::optional<curve_server> curve{};  ///< Authenticate and encrypt (CURVE).
  /// CloudEvents (off by default; the layout: protocol.hpp). A message whose headers cannot be
  /// extension attributes fails `permanent`. A bad `source` is refused (`misconfigured`).
  cloudevents_options cloudevents{};
};

/// A `concepts::transport` over ZeroMQ with end-to-end acknowledgements.
///
/// Threading: a publisher owns its own `zmq::context_t` and sockets, which are not thread-safe:
/// use it from one thread at a time (one relay thread). It does I/O only inside `publish` and
/// `poll`, so between batches consumers' hellos and late acks wait in the socket. Move-only (see
/// the move constructor).
class publisher {
 public:
  /// Binds (or connects) the ROUTER socket.
  /// @throws outbox::error `misconfigured` for a bad endpoint or CURVE without libzmq support,
  ///         `transient` for e.g. an address in use.
  explicit publisher(publisher_options options)
      : options_(std::move(options)),
        ce_(options_.cloudevents, "zeromq"),
        router_(ctx_, zmq::socket_type::router) {
    try {
      router_.set(zmq::sockopt::linger, 0);
      router_.set(zmq::sockopt::router_mandatory, 1);  // unroutable = an error, not a silent drop
      router_.set(zmq::sockopt::router_handover, 1);   // a reconnecting consumer keeps its id
      router_.set(zmq::sockopt::sndtimeo, static_cast<int>(options_.send_timeout.count()));
      router_.set(zmq::sockopt::sndhwm, options_.high_water_mark);
      router_.set(zmq::sockopt::rcvhwm, options_.high_water_mark);
      if (options_.heartbeat_interval.count() > 0) {
        router_.set(zmq::sockopt::heartbeat_ivl,
                    static_cast<int>(options_.heartbeat_interval.count()));
        router_.set(zmq::sockopt::heartbeat_timeout,
                    static_cast<int>(options_.heartbeat_interval.count()) * 3);
      }
      // A hard memory guard well above the protocol limit; frames between the two are counted.
      router_.set(zmq::sockopt::maxmsgsize,
                  static_cast<std::int64_t>(options_.max_frame_bytes) * 4 + 4096);
      if (options_.curve) {
        if (!has_curve())
          throw error(errc::misconfigured, "zeromq", {}, "CURVE keys given, libzmq has no CURVE");
        if (!options_.curve->allowed_clients.empty()) {
          zap_.emplace(ctx_, zmq::socket_type::rep);
          zap_->set(zmq::sockopt::linger, 0);
          zap_->bind("inproc://zeromq.zap.01");
          router_.set(zmq::sockopt::zap_domain, "outbox");
        }
        router_.set(zmq::sockopt::curve_server, true);
        router_.set(zmq::sockopt::curve_secretkey, options_.curve->secret_key);
      }
      if (options_.bind) {
        router_.bind(options_.endpoint);
        endpoint_ = router_.get(zmq::sockopt::last_endpoint);
      } else {
        router_.connect(options_.endpoint);
        endpoint_ = options_.endpoint;
      }
    } catch (const zmq::error_t& e) {
      throw make_error(e, (options_.bind ? "bind " : "connect ") + options_.endpoint);
    }
  }

  publisher(const publisher&) = delete;
  publisher& operator=(const publisher&) = delete;
  /// Move-only: the context, the sockets (bound or connected), the consumers known and the
  /// counters go with the publisher; moving into a publisher closes its own sockets first. A
  /// moved-from publisher may only be destroyed or assigned to. Nothing (no thread, no callback)
  /// keeps the address of a publisher: the ZAP handler is a socket served inside its calls.
  publisher(publisher&&) = default;
  /// Closes the sockets of this publisher, then takes over those of `other` (see above).
  publisher& operator=(publisher&& other) noexcept {
    if (this != &other) {
      // Sockets before their context: terminating a context waits until its sockets are closed.
      zap_.reset();
      router_.close();
      ctx_ = std::move(other.ctx_);
      router_ = std::move(other.router_);
      zap_ = std::move(other.zap_);
      other.zap_.reset();
      options_ = std::move(other.options_);
      ce_ = std::move(other.ce_);
      endpoint_ = std::move(other.endpoint_);
      peers_ = std::move(other.peers_);
      announced_limits_ = std::move(other.announced_limits_);
      next_ = other.next_;
      pending_ = std::move(other.pending_);
      stats_ = other.stats_;
    }
    return *this;
  }

  /// Sends every message of `batch` in order, each to a consumer with credit that can take it
  /// (messages of one aggregate to the same consumer), then waits until `until` for the
  /// consumers' acks. Returns a confirmed result per acked message; a failed one per nacked
  /// (permanent), refused (permanent: a frame over `max_frame_bytes` or over what every connected
  /// consumer announced, a `created_at` the wire cannot carry) or unacknowledged message
  /// (transient). An event's content type goes with it (see protocol.hpp); one that is not a
  /// media type (`validate.hpp`) is refused `permanent`, never sent.
  /// @throws outbox::error `transient` when nothing could be sent by `until` because no consumer
  ///         was connected (or none had credit): back-pressure, not a failure of the messages,
  ///         so the relay releases the batch without counting an attempt; `transient` too when
  ///         the socket itself fails.
  std::vector<publish_result> publish(std::span<const message> batch,
                                      std::chrono::steady_clock::time_point until) {
    std::vector<publish_result> results;
    results.reserve(batch.size());
    if (batch.empty()) return results;
    pending_.clear();
    pending_.reserve(batch.size());
    std::unordered_map<std::string, std::string> sticky;  // aggregate -> routing id
    // Aggregates whose remaining messages wait for the next call (their consumer vanished, or
    // cannot take the next one), with the reason: sending them elsewhere could reorder them.
    std::unordered_map<std::string, std::string> held;
    std::size_t settled = 0;  // acked or nacked (or failed by a probe) so far
    auto next_probe = std::chrono::steady_clock::now() + options_.probe_interval;
    std::size_t i = 0;
    try {
      service(std::chrono::milliseconds(0));
      std::optional<detail::frames> encoded;  // batch[i], encoded once per send attempt
      std::size_t largest = 0;                // its largest frame
      const auto refuse = [&](std::string why) {
        results.push_back({batch[i].id, false, errc::permanent, std::move(why)});
        encoded.reset();
        ++i;
      };
      while (i < batch.size()) {
        const message& m = batch[i];
        if (!encoded) {
          if (!detail::wire_carries(m.created_at)) {
            refuse(
                "zeromq: created_at is outside what the wire carries (Unix ms within +-292 "
                "years of 1970)");
            continue;
          }
          if (auto why = outbox::content_type_problem(m.content_type); !why.empty()) {
            refuse("zeromq: the content_type " + why);  // the receiver would refuse it
            continue;
          }
          if (ce_.on()) {
            if (auto why = ce_.unmappable(m); !why.empty()) {
              refuse("zeromq: CloudEvents: " + why);
              continue;
            }
            encoded = detail::encode_event(ce_.to_layout(m, cloudevents_prefix));
          } else {
            encoded = detail::encode_event(m);
          }
          largest = detail::largest_frame(*encoded);
        }
        if (largest > options_.max_frame_bytes) {
          refuse("zeromq: a frame exceeds max_frame_bytes (" +
                 std::to_string(options_.max_frame_bytes) + ")");
          continue;
        }
        std::string key = m.aggregate_type + '\0' + m.aggregate_id;
        if (auto h = held.find(key); h != held.end()) {
          results.push_back({m.id, false, errc::transient, h->second});
          encoded.reset();
          ++i;
          continue;
        }
        peer* p = nullptr;
        if (auto s = sticky.find(key); s != sticky.end()) {
          p = find_peer(s->second);
          if (p == nullptr) {
            held.emplace(std::move(key),
                         "zeromq: the consumer of an earlier event of this aggregate vanished");
            continue;
          }
          if (!p->carries(largest)) {
            held.emplace(std::move(key),
                         "zeromq: the consumer of an earlier event of this aggregate announced a "
                         "smaller max_frame_bytes (" +
                             std::to_string(p->max_frame) + ") than this event needs");
            continue;
          }
          if (p->credit <= 0) p = nullptr;
        } else {
          if (const auto room = largest_room(); room && largest > *room) {
            refuse("zeromq: a frame of " + std::to_string(largest) +
                   " bytes exceeds the max_frame_bytes of every connected consumer (largest " +
                   std::to_string(*room) + ")");
            continue;
          }
          p = next_peer(largest);
        }
        if (p == nullptr) {
          const auto now = std::chrono::steady_clock::now();
          if (now >= until) break;
          if (now >= next_probe) {  // the consumer we wait for may be gone
            settled += probe(results);
            next_probe = now + options_.probe_interval;
          }
          // Acks that arrive meanwhile settle messages already sent and give credit back.
          settled += service(std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::min(until, next_probe) - now) +
                                 std::chrono::milliseconds(1),
                             &results);
          continue;
        }
        const std::string rid = p->routing_id;
        bool sent = false;
        try {
          sent = detail::send_frames(router_, *encoded, &rid);
        } catch (const zmq::error_t& e) {
          if (e.num() != EHOSTUNREACH) throw;
          ++stats_.unroutable;
          drop_peer(rid);
          encoded.reset();
          continue;  // the same message, to another consumer
        }
        encoded.reset();
        if (!sent) {  // its pipe is full: no credit until it acks something
          p->credit = 0;
          continue;
        }
        ++stats_.sent;
        --p->credit;
        sticky.emplace(std::move(key), rid);
        pending_.emplace(m.id, inflight{rid, false});
        ++i;
      }
      if (i < batch.size() && pending_.empty()) {
        // Nothing went on the wire: nobody is there to receive. Failing the messages would spend
        // an attempt each, and a consumer outage would dead-letter the backlog; a throw makes the
        // relay release the batch as it is and back off, as for a broker that is down.
        throw error(errc::transient, "zeromq", {},
                    peers_.empty() ? "publish: no consumer connected by the deadline"
                                   : "publish: no consumer had credit by the deadline");
      }
      for (std::size_t k = i; k < batch.size(); ++k)
        results.push_back({batch[k].id, false, errc::transient,
                           peers_.empty() ? "zeromq: no consumer connected by the deadline"
                                          : "zeromq: no consumer had credit by the deadline"});
      std::size_t open = pending_.size() - settled;
      while (open > 0) {
        const auto now = std::chrono::steady_clock::now();
        if (now >= until) break;
        if (now >= next_probe) {
          open -= probe(results);
          next_probe = now + options_.probe_interval;
          if (open == 0) break;
        }
        open -= service(std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::min(until, next_probe) - now) +
                            std::chrono::milliseconds(1),
                        &results);
      }
    } catch (const zmq::error_t& e) {
      pending_.clear();
      throw make_error(e, "publish");
    }
    for (auto& [id, f] : pending_) {
      if (f.done) continue;
      results.push_back(
          {id, false, errc::transient, "zeromq: no ack from the consumer by the deadline"});
      if (peer* p = find_peer(f.routing_id)) p->credit = std::min(p->credit + 1, p->window);
    }
    pending_.clear();
    return results;
  }

  /// Handles what consumers sent (hellos, late acks, CURVE authentication) for up to `timeout`,
  /// without publishing. Call it while idle to keep handshakes moving.
  void poll(std::chrono::milliseconds timeout) {
    try {
      service(timeout);
    } catch (const zmq::error_t& e) {
      throw make_error(e, "poll");
    }
  }

  /// The bound endpoint with the actual port (for `tcp://...:*`).
  [[nodiscard]] const std::string& endpoint() const noexcept { return endpoint_; }
  /// Consumers that announced themselves and were not found gone.
  [[nodiscard]] std::size_t consumers() const noexcept { return peers_.size(); }
  /// The wire counters so far (not synchronized: read on the thread that publishes).
  [[nodiscard]] const wire_stats& stats() const noexcept { return stats_; }

 private:
  struct peer {
    std::string routing_id;
    std::string name;
    int window = 0;
    int credit = 0;
    /// The receiver's `max_frame_bytes` (LIMIT); 0 = not announced (a receiver that predates
    /// LIMIT): only the publisher's own limit applies, and the receiver drops what it refuses.
    std::size_t max_frame = 0;

    [[nodiscard]] bool carries(std::size_t frame_bytes) const noexcept {
      return max_frame == 0 || frame_bytes <= max_frame;
    }
  };
  struct inflight {
    std::string routing_id;
    bool done = false;
  };

  peer* find_peer(const std::string& rid) {
    for (auto& p : peers_)
      if (p.routing_id == rid) return &p;
    return nullptr;
  }
  void drop_peer(const std::string& rid) {
    std::erase_if(peers_, [&](const peer& p) { return p.routing_id == rid; });
  }
  /// Round robin among consumers with credit that can take a frame of `frame_bytes`.
  peer* next_peer(std::size_t frame_bytes) {
    for (std::size_t k = 0; k < peers_.size(); ++k) {
      peer& p = peers_[(next_ + k) % peers_.size()];
      if (p.credit > 0 && p.carries(frame_bytes)) {
        next_ = (next_ + k + 1) % peers_.size();
        return &p;
      }
    }
    return nullptr;
  }
  /// The largest frame some connected consumer takes: `nullopt` when there is no consumer or
  /// one announced no limit (nothing to refuse up front).
  std::optional<std::size_t> largest_room() const noexcept {
    if (peers_.empty()) return std::nullopt;
    std::size_t room = 0;
    for (const auto& p : peers_) {
      if (p.max_frame == 0) return std::nullopt;
      room = std::max(room, p.max_frame);
    }
    return room;
  }

  /// Waits up to `timeout` for input, then handles everything available. Returns how many
  /// pending messages were settled (acked or nacked), recording their results in `results`.
  std::size_t service(std::chrono::milliseconds timeout,
                      std::vector<publish_result>* results = nullptr) {
    zmq::pollitem_t items[2] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                                {zap_ ? zap_->handle() : nullptr, 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, zap_ ? 2 : 1, timeout);
    if (zap_ && (items[1].revents & ZMQ_POLLIN)) serve_zap();
    std::size_t settled = 0;
    detail::frames f;
    for (;;) {
      f.clear();
      if (!zmq::recv_multipart(router_, std::back_inserter(f), zmq::recv_flags::dontwait)) break;
      settled += handle(f, results);
      if (zap_) serve_zap();
    }
    return settled;
  }

  std::size_t handle(const detail::frames& f, std::vector<publish_result>* results) {
    std::string_view cmd;
    auto v = detail::check_envelope(f, 1, options_.max_frame_bytes, cmd);
    if ((v == detail::verdict::ok || v == detail::verdict::bad_frame_count) &&
        (cmd == command::event || cmd == command::ping))
      v = detail::verdict::bad_field;  // a command of the other direction
    if (v != detail::verdict::ok) {
      detail::count(stats_, v);
      return 0;
    }
    const std::string rid(detail::view(f[0]));
    if (cmd == command::limit) {
      const auto bytes = detail::parse_int(detail::view(f[3]));
      if (!bytes || *bytes < 1) {
        ++stats_.bad_field;
        return 0;
      }
      ++stats_.received;
      if (peer* p = find_peer(rid)) {
        p->max_frame = static_cast<std::size_t>(*bytes);
      } else {  // sent before the HELLO it belongs to; bounded, as anyone may send it
        if (announced_limits_.size() >= max_announced_limits) announced_limits_.clear();
        announced_limits_.insert_or_assign(rid, static_cast<std::size_t>(*bytes));
      }
      return 0;
    }
    if (cmd == command::hello) {
      const auto credit = detail::parse_int(detail::view(f[3]));
      const auto name = detail::view(f[4]);
      if (!credit || *credit < 1 || *credit > 1'000'000) {
        ++stats_.bad_field;
        return 0;
      }
      // The README promises this: an empty or over-long name is a bad field (a nameless peer
      // must not be served), a name of a valid length that is not UTF-8 is bad_utf8.
      if (const auto v = detail::check_name(name); v != detail::verdict::ok) {
        detail::count(stats_, v);
        return 0;
      }
      ++stats_.received;
      if (peer* p = find_peer(rid)) {
        p->credit =
            std::min(p->credit + static_cast<int>(*credit) - p->window, static_cast<int>(*credit));
        p->window = static_cast<int>(*credit);
        p->name = name;
      } else {
        peer fresh{rid, std::string(name), static_cast<int>(*credit), static_cast<int>(*credit)};
        if (auto l = announced_limits_.find(rid); l != announced_limits_.end()) {
          fresh.max_frame = l->second;
          announced_limits_.erase(l);
        }
        peers_.push_back(std::move(fresh));
      }
      return 0;
    }
    // ACK or NACK.
    const auto id = detail::parse_id(detail::view(f[3]));
    if (!id) {
      ++stats_.bad_field;
      return 0;
    }
    std::string_view reason;
    if (cmd == command::nack) {
      reason = detail::view(f[4]);
      if (!is_valid_utf8(reason)) {
        ++stats_.bad_utf8;
        return 0;
      }
    }
    peer* p = find_peer(rid);
    if (p != nullptr) p->credit = std::min(p->credit + 1, p->window);
    auto it = pending_.find(*id);
    if (it == pending_.end() || it->second.done || it->second.routing_id != rid ||
        results == nullptr) {
      ++stats_.unknown_acks;  // late (after its deadline), forged, or from another consumer
      return 0;
    }
    ++stats_.received;
    it->second.done = true;
    if (cmd == command::ack)
      results->push_back({*id, true, {}, {}});
    else
      results->push_back(
          {*id, false, errc::permanent, "zeromq: rejected by consumer: " + std::string(reason)});
    return 1;
  }

  /// Pings every consumer that holds unacked events of this batch. One that is gone (the
  /// ROUTER has no pipe to it any more) fails its events now. Returns how many were failed.
  std::size_t probe(std::vector<publish_result>& results) {
    std::vector<std::string> holders;
    for (const auto& [id, f] : pending_)
      if (!f.done && std::find(holders.begin(), holders.end(), f.routing_id) == holders.end())
        holders.push_back(f.routing_id);
    std::size_t failed = 0;
    for (const auto& rid : holders) {
      detail::frames ping;
      ping.push_back(detail::text_frame(protocol_version));
      ping.push_back(detail::text_frame(command::ping));
      try {
        (void)detail::send_frames(router_, ping, &rid);  // a full pipe: alive, just busy
        continue;
      } catch (const zmq::error_t& e) {
        if (e.num() != EHOSTUNREACH) throw;
      }
      ++stats_.unroutable;
      drop_peer(rid);
      for (auto& [id, f] : pending_) {
        if (f.done || f.routing_id != rid) continue;
        f.done = true;
        ++failed;
        results.push_back(
            {id, false, errc::transient, "zeromq: the consumer disconnected before acking"});
      }
    }
    return failed;
  }

  /// Answers one ZAP request (RFC 27): CURVE client keys on the allow list get 200.
  void serve_zap() {
    detail::frames req;
    while (zmq::recv_multipart(*zap_, std::back_inserter(req), zmq::recv_flags::dontwait)) {
      bool allowed = false;
      if (req.size() >= 7 && detail::view(req[5]) == "CURVE" && req[6].size() == 32) {
        char z85[41] = {};
        zmq_z85_encode(z85, static_cast<const std::uint8_t*>(req[6].data()), 32);
        const std::string_view key(z85, 40);
        allowed = std::find(options_.curve->allowed_clients.begin(),
                            options_.curve->allowed_clients.end(),
                            key) != options_.curve->allowed_clients.end();
      }
      detail::frames reply;
      reply.push_back(detail::text_frame("1.0"));
      reply.push_back(req.size() >= 2 ? zmq::message_t(req[1].data(), req[1].size())
                                      : zmq::message_t());
      reply.push_back(detail::text_frame(allowed ? "200" : "400"));
      reply.push_back(detail::text_frame(allowed ? "OK" : "client key not allowed"));
      reply.push_back(zmq::message_t());
      reply.push_back(zmq::message_t());
      if (!allowed) ++stats_.denied;
      (void)detail::send_frames(*zap_, reply);
      req.clear();
    }
  }

  // A member added here goes into the move assignment too.
  publisher_options options_;
  cloudevents ce_;
  zmq::context_t ctx_;  ///< Declared before the sockets: destroyed after them.
  zmq::socket_t router_;
  std::optional<zmq::socket_t> zap_;
  std::string endpoint_;
  std::vector<peer> peers_;
  /// LIMITs of peers whose HELLO has not been read yet (routing id -> max_frame_bytes).
  static constexpr std::size_t max_announced_limits = 1024;
  std::unordered_map<std::string, std::size_t> announced_limits_;
  std::size_t next_ = 0;
  std::unordered_map<uuid, inflight> pending_;
  wire_stats stats_;
};

static_assert(concepts::transport<publisher>);

}  // namespace outbox::zeromq
