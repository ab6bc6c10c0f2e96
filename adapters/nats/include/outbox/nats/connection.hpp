#pragma once
/// @file
/// `outbox::nats::connection`: one libnats (cnats) connection opened from a nats:// or tls://
/// URL, with its credentials (user and password, token, creds file, nkey seed) and TLS, and the
/// translation of libnats statuses and JetStream error codes into `outbox::error` (adapter
/// "nats"). Shared by the publisher and the receiver; it knows nothing of messages
/// (protocol.hpp does).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nats/nats.h>

#include <outbox/error.hpp>
#include <outbox/validate.hpp>

namespace outbox::nats {

/// TLS settings; a tls:// URL (or any of these set) makes the connection use TLS.
struct tls_options {
  std::string ca_cert{};      ///< PEM file of the CA(s) the server is verified against.
  std::string client_cert{};  ///< PEM file of the client certificate (with `client_key`).
  std::string client_key{};   ///< PEM file of the client certificate's private key.
  /// The name the server certificate must carry; empty: the URL's host.
  std::string server_name{};
};

/// Connection settings shared by the publisher and the receiver. Secrets (the URL's password,
/// `token`) never appear in an error text.
struct connection_options {
  /// `nats://[user:password@]host:port`, or `tls://` for TLS; several servers of one cluster
  /// separated by commas.
  std::string url{};
  /// User and password authentication, instead of the URL's (a password need not be
  /// percent-encoded here).
  std::string user{};
  std::string password{};  ///< With `user`.
  std::string token{};     ///< Token authentication (the server's `authorization.token`).
  /// A `.creds` file (user JWT and NKey seed: NATS decentralized authentication).
  std::string creds_file{};
  std::string nkey_public{};     ///< NKey authentication: the user's public key (`U...`)...
  std::string nkey_seed_file{};  ///< ...and the file holding its seed.
  tls_options tls{};             ///< Used when the URL is tls:// or any field is set.
  std::chrono::milliseconds connect_timeout{5000};  ///< Each connect attempt.
  /// Each JetStream API request (stream and consumer set-up and look-ups).
  std::chrono::milliseconds api_timeout{5000};
  /// libnats reconnects on its own after a lost connection, forever, this long apart; meanwhile
  /// a publish fails `transient` at once and a receive waits (see the classes).
  std::chrono::milliseconds reconnect_wait{250};
  /// A write the server does not take within this long (frozen, or a half-open connection with
  /// full socket buffers) fails and drops the connection (libnats reconnects): a publish never
  /// blocks longer than this past its deadline. 0: no limit (blocking writes).
  std::chrono::milliseconds write_deadline{5000};
  std::string name = "outbox";  ///< The client name the server shows (connz).
};

/// The URL with its user, password and token left out: for error texts and logs.
[[nodiscard]] inline std::string redact_url(std::string_view url) {
  std::string out;
  std::size_t at = 0;
  while (at <= url.size()) {
    auto end = url.find(',', at);
    if (end == std::string_view::npos) end = url.size();
    std::string_view one = url.substr(at, end - at);
    const auto scheme = one.find("://");
    const auto rest = scheme == std::string_view::npos ? 0 : scheme + 3;
    const auto cred = one.find('@', rest);
    if (!out.empty()) out += ',';
    out.append(one.substr(0, rest));
    out.append(cred == std::string_view::npos ? one.substr(rest) : one.substr(cred + 1));
    at = end + 1;
  }
  return out;
}

/// Why `url` cannot be used (empty when it can): each comma-separated server must be
/// `nats://` or `tls://`, name a host and, if it has one, a numeric port.
[[nodiscard]] inline std::string url_problem(std::string_view url) {
  if (url.empty()) return "connection_options.url is empty";
  const std::string shown = redact_url(url);
  std::size_t at = 0;
  while (at <= url.size()) {
    auto end = url.find(',', at);
    if (end == std::string_view::npos) end = url.size();
    std::string_view one = url.substr(at, end - at);
    if (!one.starts_with("nats://") && !one.starts_with("tls://"))
      return "the URL " + shown + " is not nats://host:port or tls://host:port";
    one.remove_prefix(one.find("://") + 3);
    if (const auto cred = one.find('@'); cred != std::string_view::npos)
      one.remove_prefix(cred + 1);
    if (const auto slash = one.find('/'); slash != std::string_view::npos)
      one = one.substr(0, slash);
    const auto colon = one.rfind(':');
    const std::string_view host = colon == std::string_view::npos ? one : one.substr(0, colon);
    if (host.empty()) return "the URL " + shown + " names no host";
    if (colon != std::string_view::npos) {
      const std::string_view port = one.substr(colon + 1);
      if (port.empty() || port.size() > 5 ||
          port.find_first_not_of("0123456789") != std::string_view::npos)
        return "the URL " + shown + " has a bad port";
    }
    at = end + 1;
  }
  return {};
}

namespace detail {

/// Classifies a libnats status: no server, I/O, timeouts, a closed or reconnecting connection
/// are `transient`; refused credentials, permissions, TLS and bad arguments `misconfigured`.
[[nodiscard]] inline errc classify(natsStatus s) noexcept {
  switch (s) {
    case NATS_CONNECTION_AUTH_FAILED:
    case NATS_NOT_PERMITTED:
    case NATS_SSL_ERROR:
    case NATS_SECURE_CONNECTION_WANTED:    // tls:// to a server without TLS
    case NATS_SECURE_CONNECTION_REQUIRED:  // TLS turned off towards a server that requires it
    case NATS_INVALID_ARG:
    case NATS_INVALID_SUBJECT:
    case NATS_INVALID_SUBSCRIPTION:
    case NATS_NO_SERVER_SUPPORT:
    case NATS_NOT_FOUND:
    case NATS_MISMATCH:
    case NATS_ILLEGAL_STATE:
      return errc::misconfigured;
    default:
      return errc::transient;
  }
}

/// Removes each of `secrets` (non-empty ones) from `text`.
[[nodiscard]] inline std::string scrub(std::string text, const std::vector<std::string>& secrets) {
  for (const auto& s : secrets) {
    if (s.empty()) continue;
    for (auto at = text.find(s); at != std::string::npos; at = text.find(s, at)) {
      text.replace(at, s.size(), "***");
      at += 3;
    }
  }
  return text;
}

/// RAII owners of libnats handles.
struct options_deleter {
  void operator()(natsOptions* o) const noexcept { natsOptions_Destroy(o); }
};
struct connection_deleter {
  void operator()(natsConnection* c) const noexcept {
    natsConnection_Close(c);
    natsConnection_Destroy(c);
  }
};
struct js_deleter {
  void operator()(jsCtx* j) const noexcept { jsCtx_Destroy(j); }
};
/// A JetStream context (owned).
using js_ptr = std::unique_ptr<jsCtx, js_deleter>;

}  // namespace detail

/// One libnats connection. libnats reconnects by itself after a loss (forever, every
/// `reconnect_wait`, resubscribing); a connection that is closed for good (or never opened) is
/// opened again by the next `ensure`. Not thread-safe as an object (libnats itself is).
///
/// Move-only: moving hands the connection over; the moved-from object is closed.
class connection {
 public:
  /// @throws outbox::error `misconfigured` for a bad URL (the text never repeats a password).
  explicit connection(connection_options options)
      : options_(std::move(options)), where_(redact_url(options_.url)) {
    if (auto why = url_problem(options_.url); !why.empty())
      throw error(errc::misconfigured, "nats", {}, why);
    if (options_.nkey_public.empty() != options_.nkey_seed_file.empty())
      throw error(errc::misconfigured, "nats", {},
                  "connection_options.nkey_public and nkey_seed_file go together");
    // The URL's password, for scrubbing: whatever is between ':' and '@' after the scheme.
    for (std::size_t at = options_.url.find("://"); at != std::string::npos;
         at = options_.url.find("://", at + 3)) {
      const auto at_sign = options_.url.find('@', at + 3);
      const auto comma = options_.url.find(',', at + 3);
      if (at_sign == std::string::npos || (comma != std::string::npos && comma < at_sign)) continue;
      const auto colon = options_.url.find(':', at + 3);
      secrets_.push_back(options_.url.substr(at + 3, at_sign - at - 3));
      if (colon != std::string::npos && colon < at_sign)
        secrets_.push_back(options_.url.substr(colon + 1, at_sign - colon - 1));
    }
    secrets_.push_back(options_.token);
    secrets_.push_back(options_.password);
  }

  /// Where it connects, without credentials.
  [[nodiscard]] const std::string& where() const noexcept { return where_; }
  /// The libnats connection (null before the first `ensure`).
  [[nodiscard]] natsConnection* handle() const noexcept { return nc_.get(); }
  /// Connections opened so far.
  [[nodiscard]] std::uint64_t generation() const noexcept { return generation_; }
  /// The connection's options.
  [[nodiscard]] const connection_options& options() const noexcept { return options_; }
  /// True while connected (not closed, not reconnecting).
  [[nodiscard]] bool connected() const noexcept {
    return nc_ && natsConnection_Status(nc_.get()) == NATS_CONN_STATUS_CONNECTED;
  }

  /// Opens the connection if there is none (or it was closed for good).
  /// @return true when a new connection was opened (the caller sets its state up again).
  /// @throws outbox::error `transient` (no server answers) or `misconfigured` (credentials,
  ///         TLS files, permissions).
  bool ensure() {
    if (nc_ && natsConnection_Status(nc_.get()) != NATS_CONN_STATUS_CLOSED) return false;
    nc_.reset();
    natsOptions* raw = nullptr;
    check(natsOptions_Create(&raw), "natsOptions_Create");
    std::unique_ptr<natsOptions, detail::options_deleter> o(raw);
    check(natsOptions_SetURL(raw, options_.url.c_str()), "the URL");
    check(natsOptions_SetName(raw, options_.name.c_str()), "the client name");
    check(natsOptions_SetTimeout(raw, options_.connect_timeout.count()), "connect_timeout");
    check(natsOptions_SetAllowReconnect(raw, true), "reconnect");
    check(natsOptions_SetMaxReconnect(raw, -1), "reconnect");
    check(natsOptions_SetReconnectWait(raw, options_.reconnect_wait.count()), "reconnect_wait");
    if (options_.write_deadline.count() > 0)
      check(natsOptions_SetWriteDeadline(raw, options_.write_deadline.count()), "write_deadline");
    if (!options_.user.empty())
      check(natsOptions_SetUserInfo(raw, options_.user.c_str(), options_.password.c_str()), "user");
    if (!options_.token.empty()) check(natsOptions_SetToken(raw, options_.token.c_str()), "token");
    if (!options_.creds_file.empty())
      check(natsOptions_SetUserCredentialsFromFiles(raw, options_.creds_file.c_str(), nullptr),
            "creds_file");
    if (!options_.nkey_public.empty())
      check(natsOptions_SetNKeyFromSeed(raw, options_.nkey_public.c_str(),
                                        options_.nkey_seed_file.c_str()),
            "nkey_seed_file");
    const tls_options& t = options_.tls;
    if (options_.url.starts_with("tls://") || !t.ca_cert.empty() || !t.client_cert.empty()) {
      check(natsOptions_SetSecure(raw, true), "TLS");
      if (!t.ca_cert.empty())
        check(natsOptions_LoadCATrustedCertificates(raw, t.ca_cert.c_str()), "tls.ca_cert");
      if (!t.client_cert.empty())
        check(natsOptions_LoadCertificatesChain(raw, t.client_cert.c_str(), t.client_key.c_str()),
              "tls.client_cert");
      if (!t.server_name.empty())
        check(natsOptions_SetExpectedHostname(raw, t.server_name.c_str()), "tls.server_name");
    }
    // libnats 3.4 leaves the signature out of CONNECT when its first byte is 0 (1 nonce in 256,
    // with an NKey or a .creds file), and the server refuses that connect: a refusal with a
    // signing credential is tried again (a new nonce each time) before it counts as
    // misconfigured.
    const bool signs = !options_.creds_file.empty() || !options_.nkey_public.empty();
    natsConnection* nc = nullptr;
    natsStatus s = NATS_OK;
    for (int attempt = 1;; ++attempt) {
      s = natsConnection_Connect(&nc, raw);
      if (s == NATS_OK) break;
      natsConnection_Destroy(nc);
      nc = nullptr;
      if (s != NATS_CONNECTION_AUTH_FAILED || !signs || attempt == 4)
        fail(s, "cannot connect to " + where_);
    }
    nc_.reset(nc);
    ++generation_;
    return true;
  }

  /// A JetStream context on the connection, with `js` (its `Wait` set from `api_timeout`).
  /// @throws outbox::error as `check`.
  [[nodiscard]] detail::js_ptr jetstream(jsOptions js) {
    js.Wait = options_.api_timeout.count();
    jsCtx* raw = nullptr;
    check(natsConnection_JetStream(&raw, nc_.get(), &js), "natsConnection_JetStream");
    return detail::js_ptr(raw);
  }

  /// Throws for a status other than NATS_OK (`what` names the operation).
  void check(natsStatus s, const std::string& what, jsErrCode code = static_cast<jsErrCode>(0)) {
    if (s != NATS_OK) fail(s, what, code);
  }

  /// Throws the `outbox::error` of status `s` (with the JetStream code, when there is one): the
  /// class of `detail::classify`, the text with libnats' last error, secrets scrubbed.
  [[noreturn]] void fail(natsStatus s, const std::string& what,
                         jsErrCode code = static_cast<jsErrCode>(0)) {
    std::string text = what + ": " + natsStatus_GetText(s);
    natsStatus last = NATS_OK;
    if (const char* detail = nats_GetLastError(&last); detail && *detail && last == s)
      text += std::string(" (") + detail + ")";
    const errc kind = code == JSStreamNotFoundErr || code == JSConsumerNotFoundErr ||
                              code == JSNotEnabledErr || code == JSNotEnabledForAccountErr
                          ? errc::misconfigured
                          : detail::classify(s);
    std::string native = code != 0 ? std::to_string(code) : std::string(natsStatus_GetText(s));
    throw error(kind, "nats", std::move(native), sanitize_text(scrub(std::move(text))));
  }

  /// `text` without the connection's secrets.
  [[nodiscard]] std::string scrub(std::string text) const {
    return detail::scrub(std::move(text), secrets_);
  }

  /// True when there is a connection libnats has not closed for good (connected or reconnecting).
  [[nodiscard]] bool open() const noexcept {
    return nc_ && natsConnection_Status(nc_.get()) != NATS_CONN_STATUS_CLOSED;
  }

  /// Closes the connection and joins libnats' reader thread, keeping the handle (for `close`).
  /// Call it before destroying a subscription of a live connection: libnats 3.4's reader takes
  /// an inbound message's subscription without a reference (nats.c issue 637, fixed after 3.5),
  /// so a subscription destroyed beside it is used after its free.
  void disconnect() noexcept {
    if (nc_) natsConnection_Close(nc_.get());
  }

  /// Closes the connection (the next `ensure` opens a new one).
  void close() noexcept { nc_.reset(); }

 private:
  connection_options options_;
  std::string where_;
  std::vector<std::string> secrets_;
  std::unique_ptr<natsConnection, detail::connection_deleter> nc_;
  std::uint64_t generation_ = 0;
};

}  // namespace outbox::nats
