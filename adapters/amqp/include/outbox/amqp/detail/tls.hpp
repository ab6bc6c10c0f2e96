#pragma once
/// @file
/// TLS for amqps:// connections: `tls_options` (public, reached through connection.hpp), the
/// checks of those options, the set-up of rabbitmq-c's OpenSSL socket (trust store, host name,
/// client certificate, a verify callback that keeps OpenSSL's reason), and the classification
/// of TLS failures. The connection calls these; nothing here holds a connection.

#include <poll.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_ssl_socket.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <outbox/error.hpp>

namespace outbox::amqp {

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

namespace detail {

/// A TLS failure, classified: what the connection throws (after dropping itself).
struct tls_failure {
  errc kind = errc::transient;
  std::string native{};
  std::string what{};
};

/// Why `t` cannot be used (empty when it can): options set for an amqp:// URL (a configuration
/// that asks for TLS never silently gets plain TCP), a client certificate without its key (or the
/// reverse), `verify_hostname = false` without a `ca_cert`.
[[nodiscard]] inline std::string tls_options_problem(const tls_options& t, bool amqps,
                                                     const std::string& where) {
  if (!amqps && !t.is_default())
    return "TLS options are set but the URL is not amqps:// (" + where + ")";
  if (t.client_cert.empty() != t.client_key.empty())
    return "tls_options.client_cert and client_key go together: one is empty";
  if (t.verify_peer && !t.verify_hostname && t.ca_cert.empty())
    return "tls_options.verify_hostname = false needs a ca_cert: with the system's CAs any "
           "public certificate would be accepted";
  return {};
}

/// Verification state shared with OpenSSL's verify callback. It lives on the heap, owned by the
/// connection, so that its address (the SSL_CTX's app data) stays valid when the connection is
/// moved.
struct tls_verdict {
  long refusal = X509_V_OK;  ///< Why the callback refused the broker (X509_V_ERR_*), first one.
};

/// A TLS socket of `state` set up from `t` for a broker at `host`; `verdict` receives the reason
/// of a refused certificate. @return the socket, or a failure (`misconfigured`: a CA or client
/// file that cannot be loaded) when set-up failed. A null socket with no failure: out of memory.
inline std::pair<amqp_socket_t*, std::optional<tls_failure>> tls_socket(
    amqp_connection_state_t state, const tls_options& t, const std::string& host,
    tls_verdict& verdict) {
  amqp_socket_t* sock = amqp_ssl_socket_new(state);
  if (!sock) return {nullptr, std::nullopt};
  const auto refused = [&](std::string what) {
    return std::pair{sock, std::optional<tls_failure>{{errc::misconfigured, {}, std::move(what)}}};
  };
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
        return refused("TLS: cannot load the system's trusted CAs");
    } else if (amqp_ssl_socket_set_cacert(sock, t.ca_cert.c_str()) != AMQP_STATUS_OK) {
      return refused("TLS: cannot load the CA file " + t.ca_cert);
    }
    if (t.verify_hostname) {
      X509_VERIFY_PARAM* param = SSL_CTX_get0_param(ctx);
      X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      // An IP literal is matched against the certificate's IP addresses, a name against its
      // DNS names.
      if (X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) != 1) {
        ERR_clear_error();
        if (X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0) != 1)
          return refused("TLS: cannot check the host name " + host);
      }
    }
    // Keep OpenSSL's reason for the error text (the first error met).
    SSL_CTX_set_app_data(ctx, &verdict);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, [](int ok, X509_STORE_CTX* store) {
      if (!ok) {
        auto* ssl = static_cast<SSL*>(
            X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
        auto* v =
            ssl ? static_cast<tls_verdict*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl))) : nullptr;
        if (v && v->refusal == X509_V_OK) v->refusal = X509_STORE_CTX_get_error(store);
      }
      return ok;
    });
  }
  if (!t.client_cert.empty() &&
      amqp_ssl_socket_set_key(sock, t.client_cert.c_str(), t.client_key.c_str()) != AMQP_STATUS_OK)
    return refused("TLS: cannot load the client certificate " + t.client_cert + " with the key " +
                   t.client_key + " (missing, not PEM, not matching, or passphrase-protected)");
  return {sock, std::nullopt};
}

/// The broker's certificate as the verify callback judged it, when it refused it (a connect that
/// failed): `misconfigured`, with OpenSSL's reason.
[[nodiscard]] inline std::optional<tls_failure> refused_certificate(const tls_verdict& v,
                                                                    const std::string& host,
                                                                    const std::string& native) {
  if (v.refusal == X509_V_ERR_HOSTNAME_MISMATCH || v.refusal == X509_V_ERR_IP_ADDRESS_MISMATCH)
    return tls_failure{errc::misconfigured, native,
                       "TLS: the broker's certificate is not issued for " + host};
  if (v.refusal != X509_V_OK)
    return tls_failure{errc::misconfigured, native,
                       std::string("TLS: the broker's certificate is not trusted: ") +
                           X509_verify_cert_error_string(v.refusal)};
  return std::nullopt;
}

/// A TLS failure with OpenSSL's reason when it has one (the queue is cleared). An alert from the
/// broker about our certificate, or a certificate we refused, is `misconfigured` (retrying cannot
/// help); anything else (a reset mid-handshake) is `transient`.
[[nodiscard]] inline tls_failure classify_tls_failure(const tls_options& t,
                                                      const std::string& native,
                                                      const std::string& what) {
  const unsigned long e = ERR_peek_last_error();
  if (e == 0)
    return {
        errc::transient, native,
        what + (t.client_cert.empty()
                    ? " (if the broker requires a client certificate, set tls_options.client_cert)"
                    : " (if the broker checks client certificates, it may have refused this one)")};
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
  return {kind, native, what + ": " + reason};
}

/// With a client certificate: waits up to `wait` after the handshake for the broker to speak
/// first (its refusal of the certificate, see `tls_options::client_cert_verdict_wait`), and reads
/// it before anything is written. @return a failure when the broker closed the connection.
[[nodiscard]] inline std::optional<tls_failure> await_client_cert_verdict(
    amqp_connection_state_t state, const tls_options& t) {
  if (t.client_cert.empty() || t.client_cert_verdict_wait.count() <= 0) return std::nullopt;
  pollfd p{amqp_get_sockfd(state), POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(t.client_cert_verdict_wait.count())) <= 0) return std::nullopt;
  // The broker spoke first: read it before writing (it may have reset the connection right after
  // its alert, and a write would fail without the alert being read).
  amqp_frame_t frame{};
  timeval zero{0, 0};
  const int rc = amqp_simple_wait_frame_noblock(state, &frame, &zero);
  if (rc == AMQP_STATUS_OK || rc == AMQP_STATUS_TIMEOUT) return std::nullopt;
  return classify_tls_failure(t, amqp_error_string2(rc),
                              "TLS: the broker closed the connection after the handshake");
}

}  // namespace detail
}  // namespace outbox::amqp
