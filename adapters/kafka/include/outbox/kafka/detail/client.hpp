#pragma once
/// @file
/// The librdkafka handles as move-only RAII owners, and the one place a client configuration is
/// built from user properties: each property set by name, a failure reported without its value
/// (a property may be a password), and the translation of librdkafka's error codes into
/// `outbox::error` classes. Shared by the publisher, the receiver and the mock cluster.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <librdkafka/rdkafka.h>

#include <outbox/error.hpp>

namespace outbox::kafka {

/// librdkafka configuration properties by name (`"security.protocol"`, `"sasl.password"`, ...),
/// passed through as given: see librdkafka's CONFIGURATION.md.
using properties = std::map<std::string, std::string, std::less<>>;

/// The error name of `err` (`"MSG_SIZE_TOO_LARGE"`, `"_MSG_TIMED_OUT"`), the native code of the
/// errors this adapter raises.
[[nodiscard]] inline std::string error_name(rd_kafka_resp_err_t err) {
  return rd_kafka_err2name(err);
}

/// How a librdkafka or broker error is handled when it concerns the client or the cluster as a
/// whole (not one message: see protocol.hpp's `classify_delivery`): credentials, TLS and
/// authorization failures are `misconfigured` (retrying cannot help); everything else is
/// `transient` (librdkafka reconnects by itself).
[[nodiscard]] inline errc classify_client(rd_kafka_resp_err_t err) noexcept {
  switch (err) {
    case RD_KAFKA_RESP_ERR__AUTHENTICATION:
    case RD_KAFKA_RESP_ERR__SSL:
    case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
    case RD_KAFKA_RESP_ERR_ILLEGAL_SASL_STATE:
    case RD_KAFKA_RESP_ERR_UNSUPPORTED_SASL_MECHANISM:
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_INVALID_GROUP_ID:
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PROTOCOL:
    case RD_KAFKA_RESP_ERR__NOT_IMPLEMENTED:
      return errc::misconfigured;
    default:
      return errc::transient;
  }
}

namespace detail {

struct conf_deleter {
  void operator()(rd_kafka_conf_t* c) const noexcept { rd_kafka_conf_destroy(c); }
};
/// A configuration not yet given to `rd_kafka_new`.
using conf_ptr = std::unique_ptr<rd_kafka_conf_t, conf_deleter>;

struct message_deleter {
  void operator()(rd_kafka_message_t* m) const noexcept { rd_kafka_message_destroy(m); }
};
/// A message returned by `rd_kafka_consumer_poll`.
using message_ptr = std::unique_ptr<rd_kafka_message_t, message_deleter>;

struct partitions_deleter {
  void operator()(rd_kafka_topic_partition_list_t* l) const noexcept {
    rd_kafka_topic_partition_list_destroy(l);
  }
};
/// A topic-partition list of our own.
using partitions_ptr = std::unique_ptr<rd_kafka_topic_partition_list_t, partitions_deleter>;

struct error_deleter {
  void operator()(rd_kafka_error_t* e) const noexcept { rd_kafka_error_destroy(e); }
};
/// An error object returned by the newer librdkafka calls (incremental assign, ...).
using error_ptr = std::unique_ptr<rd_kafka_error_t, error_deleter>;

/// `text` with what it shows of `value` replaced by `***`: the whole value, each of its list
/// items (a list property's message names the one it refuses), and its longest prefix of 8 or
/// more characters (librdkafka cuts long values off at the end of its 512-byte message).
[[nodiscard]] inline std::string redact(std::string text, std::string_view value) {
  const auto replace_all = [&](std::string_view piece) {
    if (piece.size() < 3) return;
    for (auto at = text.find(piece); at != std::string::npos; at = text.find(piece, at + 3))
      text.replace(at, piece.size(), "***");
  };
  replace_all(value);
  std::size_t from = 0;
  while (from < value.size()) {
    const auto to = std::min(value.find_first_of(",; \t", from), value.size());
    if (to - from < value.size()) replace_all(value.substr(from, to - from));
    from = to + 1;
  }
  for (std::size_t n = std::min(value.size(), text.size()); n >= 8; --n)
    if (text.find(value.substr(0, n)) != std::string::npos) {
      replace_all(value.substr(0, n));
      break;
    }
  return text;
}

/// Whether the value of property `name` is a secret: passwords, keys, tokens, JAAS and OAuth
/// settings, the SASL user name.
[[nodiscard]] inline bool is_secret_property(std::string_view name) noexcept {
  for (const std::string_view part :
       {"password", "secret", "token", "jaas", "credential", "sasl.username", "oauthbearer.config",
        "key.pem", "ssl_key", "private"})
    if (name.find(part) != std::string_view::npos) return true;
  return false;
}

/// What no error text of a client may show: the values of its secret properties, and any user
/// information (`user:password@`) in its bootstrap servers.
[[nodiscard]] inline std::vector<std::string> secrets_of(const properties& props,
                                                         std::string_view bootstrap = {}) {
  std::vector<std::string> out;
  for (const auto& [k, v] : props)
    if (is_secret_property(k) && !v.empty()) out.push_back(v);
  std::string servers(bootstrap);
  if (auto it = props.find("bootstrap.servers"); it != props.end()) servers += "," + it->second;
  std::size_t from = 0;
  while (from < servers.size()) {
    const auto to = std::min(servers.find(',', from), servers.size());
    const auto server = std::string_view(servers).substr(from, to - from);
    if (const auto at = server.rfind('@'); at != std::string_view::npos)
      out.emplace_back(server.substr(0, at));
    from = to + 1;
  }
  return out;
}

/// `text` with every secret of `secrets` redacted (see `redact`).
[[nodiscard]] inline std::string scrub(std::string text, const std::vector<std::string>& secrets) {
  for (const auto& s : secrets) text = redact(std::move(text), s);
  return text;
}

/// Sets `name` = `value` on `conf`.
/// @throws outbox::error `misconfigured` naming the property, with librdkafka's reason less the
///         value and `secrets`.
inline void set(rd_kafka_conf_t* conf, const std::string& name, const std::string& value,
                const std::vector<std::string>& secrets = {}) {
  char err[512] = "";
  if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK)
    throw error(errc::misconfigured, "kafka", {},
                "configuration property \"" + name + "\": " + scrub(redact(err, value), secrets));
}

/// A new configuration holding `props` (then `forced`, which the adapter needs and which the
/// caller checked do not contradict `props`).
/// @throws outbox::error `misconfigured` for an unknown property or an invalid value.
[[nodiscard]] inline conf_ptr make_conf(const properties& props, const properties& forced = {}) {
  const auto secrets = secrets_of(props);
  conf_ptr conf(rd_kafka_conf_new());
  for (const auto& [k, v] : props) set(conf.get(), k, v, secrets);
  for (const auto& [k, v] : forced) set(conf.get(), k, v, secrets);
  return conf;
}

/// The value `conf` holds for `name` (a default when it was not set), or empty.
[[nodiscard]] inline std::string get(const rd_kafka_conf_t* conf, const char* name) {
  std::size_t size = 0;
  if (rd_kafka_conf_get(conf, name, nullptr, &size) != RD_KAFKA_CONF_OK || size == 0) return {};
  std::string v(size, '\0');
  if (rd_kafka_conf_get(conf, name, v.data(), &size) != RD_KAFKA_CONF_OK) return {};
  v.resize(size > 0 ? size - 1 : 0);  // the size counts the terminating NUL
  return v;
}

/// The client handle: `rd_kafka_destroy` when it goes (the caller closes a consumer first).
struct handle_deleter {
  void operator()(rd_kafka_t* rk) const noexcept { rd_kafka_destroy(rk); }
};
using handle_ptr = std::unique_ptr<rd_kafka_t, handle_deleter>;

/// A new client of `type` on `conf` (which it takes, also when it fails).
/// @throws outbox::error `misconfigured` (librdkafka refuses the configuration as a whole,
///         e.g. idempotence with acks other than all), its reason less every value of `given`
///         (the properties the caller set: librdkafka's reason may quote any of them).
[[nodiscard]] inline handle_ptr make_handle(rd_kafka_type_t type, conf_ptr conf,
                                            const properties& given = {}) {
  char err[512] = "";
  rd_kafka_t* rk = rd_kafka_new(type, conf.get(), err, sizeof err);
  if (rk == nullptr) {
    std::string reason = err;
    for (const auto& [k, v] : given)
      if (v.size() >= 4) reason = redact(std::move(reason), v);
    throw error(errc::misconfigured, "kafka", {},
                std::string("cannot create the ") +
                    (type == RD_KAFKA_PRODUCER ? "producer" : "consumer") + ": " +
                    scrub(std::move(reason), secrets_of(given)));
  }
  (void)conf.release();  // rd_kafka_new took it
  return handle_ptr(rk);
}

/// A millisecond count for librdkafka's `int` timeouts: 0 for the past, capped at an hour.
[[nodiscard]] inline int timeout_ms(std::chrono::steady_clock::duration d) noexcept {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  return ms <= 0 ? 0 : ms > 3'600'000 ? 3'600'000 : static_cast<int>(ms);
}

}  // namespace detail
}  // namespace outbox::kafka
