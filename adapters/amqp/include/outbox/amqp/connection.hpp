#pragma once
/// @file
/// `outbox::amqp::connection`: one rabbitmq-c connection with one channel, opened from an
/// amqp:// or amqps:// URL (TLS through rabbitmq-c's OpenSSL socket), and the translation of
/// rabbitmq-c, TLS and AMQP failures into `outbox::error` (adapter "amqp"). Shared by the
/// publisher and the receiver.

#include <poll.h>
#include <sys/time.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <outbox/error.hpp>

namespace outbox::amqp {

/// A view of `s` as AMQP bytes (no copy; valid while `s` lives).
inline amqp_bytes_t bytes(std::string_view s) noexcept {
  return amqp_bytes_t{s.size(), const_cast<char*>(s.data())};
}
/// AMQP bytes as a string (copied).
inline std::string to_string(amqp_bytes_t b) {
  return b.len == 0 ? std::string() : std::string(static_cast<const char*>(b.bytes), b.len);
}

/// The longest AMQP short string: routing keys, exchange and queue names, the `type`,
/// `message_id` and `content_type` properties, field-table keys (header names). Its length is one
/// byte on the wire; rabbitmq-c refuses longer values in methods and properties, and truncates
/// the length of a longer table key (a malformed frame, the broker closes the connection).
inline constexpr std::size_t max_short_string = 255;

/// Refuses an option that goes on the wire as a short string when it is longer than one can be.
/// @throws outbox::error `misconfigured`, naming `option`.
inline void require_short_string(std::string_view value, const char* option) {
  if (value.size() > max_short_string)
    throw error(errc::misconfigured, "amqp", {},
                std::string(option) + " is " + std::to_string(value.size()) +
                    " bytes: AMQP carries at most " + std::to_string(max_short_string));
}

/// How an AMQP reply code is handled: access refused, not found, precondition failed, command
/// invalid, not allowed... (a configuration mistake) are `misconfigured`; connection forced,
/// resource locked, internal error and everything else `transient`.
inline errc classify_reply(std::uint16_t code) noexcept {
  switch (code) {
    case 403:  // ACCESS_REFUSED
    case 404:  // NOT_FOUND
    case 406:  // PRECONDITION_FAILED
    case 503:  // COMMAND_INVALID
    case 530:  // NOT_ALLOWED
      return errc::misconfigured;
    default:
      return errc::transient;
  }
}

/// The parts of an amqp:// URL, and the URL without its credentials (for error texts).
struct endpoint {
  std::string host{};
  int port = 5672;
  std::string user{};
  std::string password{};
  std::string vhost{};
  bool tls = false;
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

/// TLS settings of an amqps:// connection. The defaults verify the broker: its certificate must
/// chain to a trusted CA and be issued for the URL's host name.
struct tls_options {
  /// PEM file of the CAs to trust; empty: the system's trust store (OpenSSL's default paths).
  std::string ca_cert{};
  /// PEM certificate (or chain) shown to a broker that asks for one (RabbitMQ with
  /// `ssl_options.verify = verify_peer`); set together with `client_key`.
  std::string client_cert{};
  /// PEM private key of `client_cert`, unencrypted (this adapter takes no passphrase: an
  /// encrypted key is refused rather than prompted for).
  std::string client_key{};
  /// false: any certificate is accepted, which gives encryption without authentication (no
  /// protection against a man in the middle). For tests; never in production.
  bool verify_peer = true;
  /// false: a certificate from a trusted CA is accepted whatever host name it was issued for.
  /// Needs `ca_cert` (a private CA): with the system's CAs any public certificate would pass.
  /// Only checked when `verify_peer`.
  bool verify_hostname = true;
  /// With a client certificate: how long to wait after the handshake for the broker's verdict
  /// on it before the first AMQP bytes go out. Over TLS 1.3 the broker judges the certificate
  /// after the handshake is complete on our side; if our bytes reach it first, its refusal can
  /// arrive as a bare TCP reset (its alert lost as it closes with our bytes unread), which looks
  /// like a network failure (`transient`) instead of `misconfigured`. Nothing arrives when the
  /// broker accepts: each connect then waits this long. 0: do not wait.
  std::chrono::milliseconds client_cert_verdict_wait{200};

  [[nodiscard]] bool is_default() const noexcept {
    return ca_cert.empty() && client_cert.empty() && client_key.empty() && verify_peer &&
           verify_hostname;
  }
};

/// Connection settings shared by the publisher and the receiver.
struct connection_options {
  std::string url{};  ///< amqp://user:pass@host:port[/vhost], or amqps:// for TLS.
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
  int frame_max = 131072;
};

/// One connection and its channel 1. Not thread-safe: one user thread. After any failure it is
/// closed (`open()` is false) and the next `ensure()` opens a new one.
class connection {
 public:
  static constexpr amqp_channel_t channel = 1;

  /// @throws outbox::error `misconfigured` for a bad URL or one without a host, TLS options with
  ///         an amqp:// URL (a configuration that asks for TLS never silently gets plain TCP), a
  ///         client certificate without its key (or the reverse), `verify_hostname = false`
  ///         without a `ca_cert`, or a heartbeat outside 0..65535 s.
  explicit connection(connection_options options)
      : options_(std::move(options)), endpoint_(parse_url(options_.url)) {
    const tls_options& t = options_.tls;
    if (!endpoint_.tls && !t.is_default())
      throw error(errc::misconfigured, "amqp", {},
                  "TLS options are set but the URL is not amqps:// (" + endpoint_.redacted + ")");
    if (t.client_cert.empty() != t.client_key.empty())
      throw error(errc::misconfigured, "amqp", {},
                  "tls_options.client_cert and client_key go together: one is empty");
    if (t.verify_peer && !t.verify_hostname && t.ca_cert.empty())
      throw error(errc::misconfigured, "amqp", {},
                  "tls_options.verify_hostname = false needs a ca_cert: with the system's CAs "
                  "any public certificate would be accepted");
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

  [[nodiscard]] bool open() const noexcept { return state_ != nullptr; }
  [[nodiscard]] amqp_connection_state_t state() const noexcept { return state_; }
  [[nodiscard]] const std::string& where() const noexcept { return endpoint_.redacted; }
  /// Counts the connections opened so far (1 after the first; more after reconnects).
  [[nodiscard]] std::uint64_t generation() const noexcept { return generation_; }

  /// Opens the connection and channel 1 if not open. @return true when it opened a new one.
  /// @throws outbox::error `transient` (broker unreachable) or `misconfigured` (refused login).
  bool ensure() {
    if (state_) return false;
    state_ = amqp_new_connection();
    if (!state_) throw error(errc::transient, "amqp", {}, "out of memory");
    amqp_socket_t* sock = endpoint_.tls ? tls_socket() : amqp_tcp_socket_new(state_);
    if (!sock) fail(errc::transient, "", "cannot create a socket");
    timeval tv = to_timeval(options_.connect_timeout);
    tls_refusal_ = X509_V_OK;
    ERR_clear_error();
    const int rc = amqp_socket_open_noblock(sock, endpoint_.host.c_str(), endpoint_.port, &tv);
    if (rc != AMQP_STATUS_OK) {
      if (tls_refusal_ == X509_V_ERR_HOSTNAME_MISMATCH ||
          tls_refusal_ == X509_V_ERR_IP_ADDRESS_MISMATCH)
        fail(errc::misconfigured, amqp_error_string2(rc),
             "TLS: the broker's certificate is not issued for " + endpoint_.host);
      if (tls_refusal_ != X509_V_OK)  // our verify callback refused the broker's certificate
        fail(errc::misconfigured, amqp_error_string2(rc),
             std::string("TLS: the broker's certificate is not trusted: ") +
                 X509_verify_cert_error_string(tls_refusal_));
      if (rc == AMQP_STATUS_SSL_ERROR || rc == AMQP_STATUS_SSL_CONNECTION_FAILED)
        fail_tls(amqp_error_string2(rc), "TLS handshake failed");
      fail(errc::transient, amqp_error_string2(rc), "cannot connect");
    }
    if (endpoint_.tls && !options_.tls.client_cert.empty() &&
        options_.tls.client_cert_verdict_wait.count() > 0) {
      pollfd p{amqp_get_sockfd(state_), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(options_.tls.client_cert_verdict_wait.count())) > 0) {
        // The broker spoke first: read it before writing (it may have reset the connection
        // right after its alert, and a write would fail without the alert being read).
        amqp_frame_t frame{};
        timeval zero{0, 0};
        const int rc = amqp_simple_wait_frame_noblock(state_, &frame, &zero);
        if (rc != AMQP_STATUS_OK && rc != AMQP_STATUS_TIMEOUT)
          fail_tls(amqp_error_string2(rc),
                   "TLS: the broker closed the connection after the handshake");
      }
    }
    amqp_set_handshake_timeout(state_, &tv);  // the login: connect_timeout again
    if (options_.rpc_timeout.count() > 0) {
      timeval rpc_tv = to_timeval(options_.rpc_timeout);
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
          fail_tls(amqp_error_string2(r.library_error), what);
        fail(errc::transient, amqp_error_string2(r.library_error), what);
      case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
          const auto* m = static_cast<const amqp_connection_close_t*>(r.reply.decoded);
          fail(
              classify_reply(m->reply_code), std::to_string(m->reply_code),
              std::string(what) + ": connection closed by the broker: " + to_string(m->reply_text));
        }
        if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
          const auto* m = static_cast<const amqp_channel_close_t*>(r.reply.decoded);
          fail(classify_reply(m->reply_code), std::to_string(m->reply_code),
               std::string(what) + ": channel closed by the broker: " + to_string(m->reply_text));
        }
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
      const timeval tv = to_timeval(wait);
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

  /// Throws for a TLS failure, with OpenSSL's reason when it has one. An alert from the broker
  /// about our certificate, or a certificate we refused, is `misconfigured` (retrying cannot
  /// help); anything else (a reset mid-handshake) is `transient`.
  [[noreturn]] void fail_tls(const std::string& native, const std::string& what) {
    const unsigned long e = ERR_peek_last_error();
    if (e == 0)
      fail(errc::transient, native,
           what +
               (options_.tls.client_cert.empty()
                    ? " (if the broker requires a client certificate, set tls_options.client_cert)"
                    : " (if the broker checks client certificates, it may have refused this one)"));
    char reason[256];
    ERR_error_string_n(e, reason, sizeof reason);
    errc kind = errc::transient;
    if (ERR_GET_LIB(e) == ERR_LIB_SSL) {
      switch (ERR_GET_REASON(e)) {
        case SSL_R_CERTIFICATE_VERIFY_FAILED:
        case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
        case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
        case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
        case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
        case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
        case SSL_R_TLSV1_ALERT_ACCESS_DENIED:
        case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
        case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
        case SSL_R_TLSV1_ALERT_PROTOCOL_VERSION:
        case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
        case SSL_R_UNSUPPORTED_PROTOCOL:
        case SSL_R_WRONG_VERSION_NUMBER:  // a plain AMQP port behind an amqps:// URL
          kind = errc::misconfigured;
          break;
        default:
          break;
      }
    }
    ERR_clear_error();
    fail(kind, native, what + ": " + reason);
  }

  static timeval to_timeval(std::chrono::microseconds d) noexcept {
    if (d.count() < 0) d = std::chrono::microseconds(0);
    return timeval{static_cast<time_t>(d.count() / 1'000'000),
                   static_cast<suseconds_t>(d.count() % 1'000'000)};
  }

 private:
  /// A TLS socket set up from `options_.tls` (see tls_options).
  amqp_socket_t* tls_socket() {
    amqp_socket_t* sock = amqp_ssl_socket_new(state_);
    if (!sock) return nullptr;
    const tls_options& t = options_.tls;
    auto* ctx = static_cast<SSL_CTX*>(amqp_ssl_socket_get_context(sock));
    // An encrypted key must fail, not prompt for a passphrase on the process's terminal.
    SSL_CTX_set_default_passwd_cb(ctx, [](char*, int, int, void*) { return 0; });
    // rabbitmq-c's own checks run after the handshake (and match DNS names only): OpenSSL
    // checks the chain and the name inside the handshake instead, so nothing (not even a
    // client certificate) goes to a broker that fails them.
    amqp_ssl_socket_set_verify_peer(sock, 0);
    amqp_ssl_socket_set_verify_hostname(sock, 0);
    if (t.verify_peer) {
      if (t.ca_cert.empty()) {
        if (SSL_CTX_set_default_verify_paths(ctx) != 1)
          fail(errc::misconfigured, "", "TLS: cannot load the system's trusted CAs");
      } else if (amqp_ssl_socket_set_cacert(sock, t.ca_cert.c_str()) != AMQP_STATUS_OK) {
        fail(errc::misconfigured, "", "TLS: cannot load the CA file " + t.ca_cert);
      }
      if (t.verify_hostname) {
        X509_VERIFY_PARAM* param = SSL_CTX_get0_param(ctx);
        X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        // An IP literal is matched against the certificate's IP addresses, a name against its
        // DNS names.
        if (X509_VERIFY_PARAM_set1_ip_asc(param, endpoint_.host.c_str()) != 1) {
          ERR_clear_error();
          if (X509_VERIFY_PARAM_set1_host(param, endpoint_.host.c_str(), 0) != 1)
            fail(errc::misconfigured, "", "TLS: cannot check the host name " + endpoint_.host);
        }
      }
      // Keep OpenSSL's reason for the error text (the first error met).
      SSL_CTX_set_app_data(ctx, &tls_refusal_);
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, [](int ok, X509_STORE_CTX* store) {
        if (!ok) {
          auto* ssl = static_cast<SSL*>(
              X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
          auto* refusal =
              ssl ? static_cast<long*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl))) : nullptr;
          if (refusal && *refusal == X509_V_OK) *refusal = X509_STORE_CTX_get_error(store);
        }
        return ok;
      });
    }
    if (!t.client_cert.empty() && amqp_ssl_socket_set_key(sock, t.client_cert.c_str(),
                                                          t.client_key.c_str()) != AMQP_STATUS_OK) {
      fail(errc::misconfigured, "",
           "TLS: cannot load the client certificate " + t.client_cert + " with the key " +
               t.client_key + " (missing, not PEM, not matching, or passphrase-protected)");
    }
    return sock;
  }

  connection_options options_;
  endpoint endpoint_;
  long tls_refusal_ = X509_V_OK;  ///< Why the verify callback refused the broker (X509_V_ERR_*).
  amqp_connection_state_t state_ = nullptr;
  std::uint64_t generation_ = 0;
};

}  // namespace outbox::amqp
