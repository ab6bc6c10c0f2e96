#pragma once
/// @file
/// `outbox::amqp::connection`: one rabbitmq-c connection with one channel, opened from an
/// amqp:// or amqps:// URL, and the translation of rabbitmq-c and AMQP failures into
/// `outbox::error` (adapter "amqp"). Shared by the publisher and the receiver.

#include <sys/time.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>

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

/// Connection settings shared by the publisher and the receiver.
struct connection_options {
  std::string url{};                            ///< amqp://user:pass@host:port[/vhost], amqps://
  std::chrono::milliseconds connect_timeout{5000};  ///< TCP connect and AMQP handshake.
  std::string ca_cert{};                        ///< amqps: CA file (empty: no peer verification).
  int frame_max = 131072;
};

/// One connection and its channel 1. Not thread-safe: one user thread. After any failure it is
/// closed (`open()` is false) and the next `ensure()` opens a new one.
class connection {
 public:
  static constexpr amqp_channel_t channel = 1;

  explicit connection(connection_options options)
      : options_(std::move(options)), endpoint_(parse_url(options_.url)) {}
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
    amqp_socket_t* sock = nullptr;
    if (endpoint_.tls) {
      sock = amqp_ssl_socket_new(state_);
      if (sock) {
        amqp_ssl_socket_set_verify_peer(sock, options_.ca_cert.empty() ? 0 : 1);
        amqp_ssl_socket_set_verify_hostname(sock, options_.ca_cert.empty() ? 0 : 1);
        if (!options_.ca_cert.empty() &&
            amqp_ssl_socket_set_cacert(sock, options_.ca_cert.c_str()) != AMQP_STATUS_OK)
          fail(errc::misconfigured, "", "cannot load the CA certificate");
      }
    } else {
      sock = amqp_tcp_socket_new(state_);
    }
    if (!sock) fail(errc::transient, "", "cannot create a socket");
    timeval tv = to_timeval(options_.connect_timeout);
    const int rc = amqp_socket_open_noblock(sock, endpoint_.host.c_str(), endpoint_.port, &tv);
    if (rc != AMQP_STATUS_OK) fail(errc::transient, amqp_error_string2(rc), "cannot connect");
    check(amqp_login(state_, endpoint_.vhost.c_str(), 1, options_.frame_max, 0,
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
        fail(errc::transient, amqp_error_string2(r.library_error), what);
      case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
          const auto* m = static_cast<const amqp_connection_close_t*>(r.reply.decoded);
          fail(classify_reply(m->reply_code), std::to_string(m->reply_code),
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
    throw error(kind, "amqp", native, what + " (" + endpoint_.redacted + ")");
  }

  /// Closes politely (channel, connection), ignoring failures.
  void close() noexcept {
    if (!state_) return;
    amqp_channel_close(state_, channel, AMQP_REPLY_SUCCESS);
    amqp_connection_close(state_, AMQP_REPLY_SUCCESS);
    drop();
  }
  /// Forgets the connection at once (after a failure: no handshake).
  void drop() noexcept {
    if (!state_) return;
    amqp_destroy_connection(state_);
    state_ = nullptr;
  }

  static timeval to_timeval(std::chrono::microseconds d) noexcept {
    if (d.count() < 0) d = std::chrono::microseconds(0);
    return timeval{static_cast<time_t>(d.count() / 1'000'000),
                   static_cast<suseconds_t>(d.count() % 1'000'000)};
  }

 private:
  connection_options options_;
  endpoint endpoint_;
  amqp_connection_state_t state_ = nullptr;
  std::uint64_t generation_ = 0;
};

}  // namespace outbox::amqp
