#pragma once
/// @file
/// `outbox::amqp::connection`: one rabbitmq-c connection with one channel, opened from an
/// amqp:// or amqps:// URL (TLS: detail/tls.hpp), and the translation of rabbitmq-c and AMQP
/// failures into `outbox::error` (adapter "amqp"). Shared by the publisher and the receiver; it
/// knows nothing of messages (protocol.hpp does).

#include <sys/time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>
#include <openssl/err.h>

#include <outbox/amqp/detail/tls.hpp>
#include <outbox/amqp/protocol.hpp>
#include <outbox/error.hpp>

namespace outbox::amqp {

/// The parts of an amqp:// URL, and the URL without its credentials (for error texts).
struct endpoint {
  std::string host{};      ///< The broker host name or address.
  int port = 5672;         ///< The TCP port.
  std::string user{};      ///< The login user.
  std::string password{};  ///< The login password (never put in an error text).
  std::string vhost{};     ///< The virtual host ("/" when the URL names none).
  bool tls = false;        ///< True for an amqps:// URL: the connection uses TLS.
  std::string redacted{};  ///< amqp://host:port/vhost: never holds the user or the password.
};

/// Parses `url` with `amqp_parse_url`.
/// @throws outbox::error `misconfigured` (the text never repeats the URL: it may hold a password).
inline endpoint parse_url(const std::string& url) {
  std::vector<char> buf(url.begin(), url.end());
  buf.push_back('\0');
  amqp_connection_info info{};
  amqp_default_connection_info(&info);
  const int rc = amqp_parse_url(buf.data(), &info);
  if (rc != AMQP_STATUS_OK)
    throw error(errc::misconfigured, "amqp", amqp_error_string2(rc),
                "the amqp:// URL cannot be parsed");
  endpoint e;
  e.host = info.host ? info.host : "";
  e.port = info.port;
  e.user = info.user ? info.user : "";
  e.password = info.password ? info.password : "";
  e.vhost = info.vhost ? info.vhost : "/";
  e.tls = info.ssl != 0;
  e.redacted = std::string(e.tls ? "amqps://" : "amqp://") + e.host + ":" + std::to_string(e.port) +
               "/" + (e.vhost == "/" ? std::string() : e.vhost);
  return e;
}

/// Connection settings shared by the publisher and the receiver.
struct connection_options {
  std::string url{};  ///< `amqp://user:pass@host:port[/vhost]`, or `amqps://` for TLS.
  /// TCP connect with TLS handshake, then the AMQP login, each.
  std::chrono::milliseconds connect_timeout{5000};
  /// Each RPC (declare, bind, qos, consume, confirm.select...): a broker that stops answering
  /// without closing the socket fails it `transient` (the connection is dropped) instead of
  /// blocking; 0: wait forever. Publishing and receiving have their own deadlines.
  std::chrono::milliseconds rpc_timeout{10000};
  /// AMQP heartbeat interval asked of the broker (the broker's own maximum wins if lower); 0:
  /// off. rabbitmq-c sends and checks heartbeats only inside its calls, so they suit a client
  /// that calls it at least every interval: unset, a receiver uses 30 s (the consumer polls
  /// every `poll_timeout`; two missed intervals = `transient`, reconnect) and a publisher 0
  /// (a relay may idle between batches; a dead connection shows as a publish without confirms,
  /// which drops it).
  std::optional<std::chrono::seconds> heartbeat{};
  /// The polite close (connection.close, which closes the channel with it, and the broker's
  /// close-ok) when a connection is closed or destroyed: at most this long, and never longer than
  /// `rpc_timeout` when that is set; the socket is closed after it whatever the broker did. 0: no
  /// handshake, the socket is just closed (the broker logs an abrupt close).
  std::chrono::milliseconds close_timeout{1000};
  tls_options tls{};  ///< Used by amqps:// URLs only (set with an amqp:// URL: `misconfigured`).
  int frame_max = 131072;  ///< The largest frame asked of the broker at login, in bytes.
};

/// One connection and its channel 1. Not thread-safe: one user thread. After any failure it is
/// closed (`open()` is false) and the next `ensure()` opens a new one.
///
/// Move-only: moving hands the open connection (and its count of connections) over; the
/// moved-from object is closed and may only be destroyed or assigned to. Moving into an open
/// connection closes it first (politely, as the destructor does).
class connection {
 public:
  /// The one channel the connection opens and uses.
  static constexpr amqp_channel_t channel = 1;

  /// @throws outbox::error `misconfigured` for a bad URL or one without a host, TLS options that
  ///         cannot be used (see `detail::tls_options_problem`), or a heartbeat outside
  ///         0..65535 s.
  explicit connection(connection_options options)
      : options_(std::move(options)), endpoint_(parse_url(options_.url)) {
    if (auto why = detail::tls_options_problem(options_.tls, endpoint_.tls, endpoint_.redacted);
        !why.empty())
      throw error(errc::misconfigured, "amqp", {}, std::move(why));
    if (options_.heartbeat &&
        (options_.heartbeat->count() < 0 || options_.heartbeat->count() > 65535))
      throw error(errc::misconfigured, "amqp", {},
                  "connection_options.heartbeat must be within 0..65535 s");
    if (endpoint_.host.empty())
      throw error(errc::misconfigured, "amqp", {}, "the amqp:// URL names no host");
  }
  /// Closes politely, within `connection_options::close_timeout` (see `close`).
  ~connection() { close(); }
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  /// Takes over the connection of `other`, which is left closed (see above).
  connection(connection&& other) noexcept
      : options_(std::move(other.options_)),
        endpoint_(std::move(other.endpoint_)),
        verdict_(std::move(other.verdict_)),
        state_(std::exchange(other.state_, nullptr)),
        generation_(other.generation_) {}
  /// Closes this connection politely, then takes over that of `other` (see above).
  connection& operator=(connection&& other) noexcept {
    if (this != &other) {
      close();
      options_ = std::move(other.options_);
      endpoint_ = std::move(other.endpoint_);
      verdict_ = std::move(other.verdict_);
      state_ = std::exchange(other.state_, nullptr);
      generation_ = other.generation_;
    }
    return *this;
  }

  /// True while a connection is open (false after any failure, until the next `ensure`).
  [[nodiscard]] bool open() const noexcept { return state_ != nullptr; }
  /// The rabbitmq-c connection state; null while closed.
  [[nodiscard]] amqp_connection_state_t state() const noexcept { return state_; }
  /// The URL without its credentials (`endpoint::redacted`), for error texts.
  [[nodiscard]] const std::string& where() const noexcept { return endpoint_.redacted; }
  /// Counts the connections opened so far (1 after the first; more after reconnects).
  [[nodiscard]] std::uint64_t generation() const noexcept { return generation_; }

  /// Opens the connection and channel 1 if not open. @return true when it opened a new one.
  /// @throws outbox::error `transient` (broker unreachable) or `misconfigured` (refused login).
  bool ensure() {
    if (state_) return false;
    state_ = amqp_new_connection();
    if (!state_) throw error(errc::transient, "amqp", {}, "out of memory");
    amqp_socket_t* sock = nullptr;
    if (endpoint_.tls) {
      if (!verdict_) verdict_ = std::make_unique<detail::tls_verdict>();
      auto [s, failure] = detail::tls_socket(state_, options_.tls, endpoint_.host, *verdict_);
      if (failure) fail(*failure);
      sock = s;
      verdict_->refusal = X509_V_OK;
    } else {
      sock = amqp_tcp_socket_new(state_);
    }
    if (!sock) fail(errc::transient, "", "cannot create a socket");
    timeval tv = detail::to_timeval(options_.connect_timeout);
    ERR_clear_error();
    const int rc = amqp_socket_open_noblock(sock, endpoint_.host.c_str(), endpoint_.port, &tv);
    if (rc != AMQP_STATUS_OK) {
      if (endpoint_.tls) {
        if (auto refused =
                detail::refused_certificate(*verdict_, endpoint_.host, amqp_error_string2(rc)))
          fail(*refused);
        if (rc == AMQP_STATUS_SSL_ERROR || rc == AMQP_STATUS_SSL_CONNECTION_FAILED)
          fail(detail::classify_tls_failure(options_.tls, amqp_error_string2(rc),
                                            "TLS handshake failed"));
      }
      fail(errc::transient, amqp_error_string2(rc), "cannot connect");
    }
    if (endpoint_.tls)
      if (auto refused = detail::await_client_cert_verdict(state_, options_.tls)) fail(*refused);
    amqp_set_handshake_timeout(state_, &tv);  // the login: connect_timeout again
    if (options_.rpc_timeout.count() > 0) {
      timeval rpc_tv = detail::to_timeval(options_.rpc_timeout);
      amqp_set_rpc_timeout(state_, &rpc_tv);
    }
    const int heartbeat =
        static_cast<int>(options_.heartbeat.value_or(std::chrono::seconds(0)).count());
    check(amqp_login(state_, endpoint_.vhost.c_str(), 1, options_.frame_max, heartbeat,
                     AMQP_SASL_METHOD_PLAIN, endpoint_.user.c_str(), endpoint_.password.c_str()),
          "login");
    amqp_channel_open(state_, channel);
    check(amqp_get_rpc_reply(state_), "channel.open");
    ++generation_;
    return true;
  }

  /// Throws for a failed RPC (`what` names it) after closing the connection.
  void check(const amqp_rpc_reply_t& r, const char* what) {
    switch (r.reply_type) {
      case AMQP_RESPONSE_NORMAL:
        return;
      case AMQP_RESPONSE_NONE:
        fail(errc::transient, "", std::string(what) + ": missing RPC reply");
      case AMQP_RESPONSE_LIBRARY_EXCEPTION:  // socket error, closed, timeout: transient
        // Over TLS 1.3 a broker that refuses our client certificate says so after the
        // handshake: the alert surfaces at the login.
        if (endpoint_.tls && (r.library_error == AMQP_STATUS_SSL_ERROR ||
                              r.library_error == AMQP_STATUS_CONNECTION_CLOSED ||
                              r.library_error == AMQP_STATUS_SOCKET_ERROR))
          fail(detail::classify_tls_failure(options_.tls, amqp_error_string2(r.library_error),
                                            what));
        fail(errc::transient, amqp_error_string2(r.library_error), what);
      case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (const auto closed = decode_close(r.reply)) fail(*closed, what);
        fail(errc::transient, "", std::string(what) + ": unexpected server exception");
    }
    fail(errc::transient, "", what);
  }

  /// Closes the connection and throws.
  [[noreturn]] void fail(errc kind, const std::string& native, const std::string& what) {
    drop();
    // Leave no OpenSSL errors behind for other users of this thread (libpq, for one).
    if (endpoint_.tls) ERR_clear_error();
    throw error(kind, "amqp", native, what + " (" + endpoint_.redacted + ")");
  }
  /// Closes the connection and throws for the broker's close (native code = its reply code);
  /// `what`, when given, names what was under way.
  [[noreturn]] void fail(const broker_close& closed, const char* what = nullptr) {
    fail(closed.kind(), std::to_string(closed.code),
         what ? std::string(what) + ": " + closed.describe() : closed.describe());
  }

  /// Closes politely, within `close_timeout`, ignoring failures. (A connection known to be broken
  /// was dropped when the failure was seen: it has nothing left to close.)
  void close() noexcept {
    if (!state_) return;
    std::chrono::milliseconds wait = options_.close_timeout;
    if (options_.rpc_timeout.count() > 0) wait = std::min(wait, options_.rpc_timeout);
    if (wait.count() > 0) {
      // A broker that stopped answering must not hold a destructor for the RPC timeout (or
      // forever, with none): the close gets its own short deadline, for the write and the reply.
      // connection.close closes channel 1 too: one round trip, not two.
      const timeval tv = detail::to_timeval(wait);
      if (amqp_set_rpc_timeout(state_, &tv) == AMQP_STATUS_OK)
        (void)amqp_connection_close(state_, AMQP_REPLY_SUCCESS);
    }
    drop();
  }
  /// Forgets the connection at once (after a failure: no handshake).
  void drop() noexcept {
    if (!state_) return;
    amqp_destroy_connection(state_);
    state_ = nullptr;
  }

 private:
  [[noreturn]] void fail(const detail::tls_failure& f) { fail(f.kind, f.native, f.what); }

  connection_options options_;
  endpoint endpoint_;
  /// What the TLS verify callback found; on the heap, since OpenSSL keeps its address.
  std::unique_ptr<detail::tls_verdict> verdict_;
  amqp_connection_state_t state_ = nullptr;
  std::uint64_t generation_ = 0;
};

}  // namespace outbox::amqp
