#pragma once
/// @file
/// The librdkafka handles as move-only RAII owners, and the one place a client configuration is
/// built from user properties: each property set by name, a failure reported without its value
/// (a property may be a password), and the translation of librdkafka's error codes into
/// `outbox::error` classes. Shared by the publisher, the receiver and the mock cluster.

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

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

/// `text` with every occurrence of `secret` replaced by `***`: librdkafka's messages about an
/// invalid property repeat its value, which may be a password.
[[nodiscard]] inline std::string redact(std::string text, std::string_view secret) {
  if (secret.empty()) return text;
  for (auto at = text.find(secret); at != std::string::npos; at = text.find(secret, at + 3))
    text.replace(at, secret.size(), "***");
  return text;
}

/// Sets `name` = `value` on `conf`.
/// @throws outbox::error `misconfigured` naming the property (never its value).
inline void set(rd_kafka_conf_t* conf, const std::string& name, const std::string& value) {
  char err[512] = "";
  if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK)
    throw error(errc::misconfigured, "kafka", {},
                "configuration property \"" + name + "\": " + redact(err, value));
}

/// A new configuration holding `props` (then `forced`, which the adapter needs and which the
/// caller checked do not contradict `props`).
/// @throws outbox::error `misconfigured` for an unknown property or an invalid value.
[[nodiscard]] inline conf_ptr make_conf(const properties& props, const properties& forced = {}) {
  conf_ptr conf(rd_kafka_conf_new());
  for (const auto& [k, v] : props) set(conf.get(), k, v);
  for (const auto& [k, v] : forced) set(conf.get(), k, v);
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
///         e.g. idempotence with acks other than all).
[[nodiscard]] inline handle_ptr make_handle(rd_kafka_type_t type, conf_ptr conf) {
  char err[512] = "";
  rd_kafka_t* rk = rd_kafka_new(type, conf.get(), err, sizeof err);
  if (rk == nullptr)
    throw error(errc::misconfigured, "kafka", {},
                std::string("cannot create the ") +
                    (type == RD_KAFKA_PRODUCER ? "producer" : "consumer") + ": " + err);
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
