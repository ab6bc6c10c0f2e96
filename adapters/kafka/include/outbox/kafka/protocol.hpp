#pragma once
/// @file
/// How an `outbox::message` travels as a Kafka record, both ways: the layout of Debezium's outbox
/// event router (topic per aggregate type, key = aggregate_id, value = payload, the event's id,
/// type and aggregate type as headers), the topic naming, the checks a record must pass before it
/// is produced (`unsendable`), the record -> message mapping (`decode`) and the classification of
/// delivery-report errors. The publisher and the receiver are siblings over this header, as the
/// ZeroMQ and AMQP adapters' are over theirs; adapters/kafka/README.md shows the layout.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <ratio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <librdkafka/rdkafka.h>

#include <outbox/cloudevents.hpp>
#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/time.hpp>
#include <outbox/uuid.hpp>
#include <outbox/validate.hpp>

namespace outbox::kafka {

/// The record headers the transport itself writes, before the event's own headers. A user
/// header of one of these names is refused (`unsendable`): Kafka allows repeated names, and a
/// consumer reading the last `id` header would read the user's.
inline constexpr std::string_view id_header = "id";  ///< The event id, a UUID as text.
inline constexpr std::string_view event_type_header = "event_type";  ///< The event type.
/// The aggregate type (the aggregate id is the record key).
inline constexpr std::string_view aggregate_type_header = "aggregate_type";
/// The payload's media type (`application/json` unless the writer was given another), spelled
/// as the CloudEvents Kafka binding and Kafka tooling read it.
inline constexpr std::string_view content_type_header = "content-type";
/// The content type header of releases before CloudEvents: still read (when `content-type` is
/// absent), no longer written; to be dropped in the next release.
inline constexpr std::string_view legacy_content_type_header = "content_type";
/// The prefix of the CloudEvents Kafka binding's attribute headers (`ce_id`, `ce_type`, ...).
inline constexpr std::string_view cloudevents_prefix = "ce_";

/// True when `name` is one of the transport's own header names.
[[nodiscard]] constexpr bool is_reserved_header(std::string_view name) noexcept {
  return name == id_header || name == event_type_header || name == aggregate_type_header ||
         name == content_type_header || name == legacy_content_type_header;
}

/// The default topic pattern of `topic_router`. Debezium's outbox event router routes to
/// `outbox.event.<aggregate type>`.
inline constexpr std::string_view default_topic_pattern = "outbox.event.{aggregate_type}";

/// The longest topic name Kafka accepts.
inline constexpr std::size_t max_topic_length = 249;

/// Why `topic` cannot be a Kafka topic name, or an empty string when it can. A name is 1 to
/// 249 of `[A-Za-z0-9._-]`, and not `.` or `..` (the broker's own rule).
[[nodiscard]] inline std::string topic_problem(std::string_view topic) {
  if (topic.empty()) return "is empty";
  if (topic.size() > max_topic_length)
    return "is " + std::to_string(topic.size()) + " characters, Kafka's limit is " +
           std::to_string(max_topic_length);
  if (topic == "." || topic == "..") return "may not be \".\" or \"..\"";
  for (const char c : topic) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return "holds a character other than A-Z a-z 0-9 . _ -";
  }
  return {};
}

/// Maps a message to its topic: a pattern with `{aggregate_type}` and `{event_type}`
/// placeholders (parsed once), or a function of the whole message.
class topic_router {
 public:
  /// A function of the whole message that returns its topic (used instead of a pattern).
  using function = std::function<std::string(const message&)>;

  /// @throws outbox::error `misconfigured` for a pattern with an unknown `{...}` placeholder or
  ///         an unclosed `{`, or one without placeholders that is not a valid topic name.
  explicit topic_router(std::string_view pattern = default_topic_pattern, function f = {})
      : function_(std::move(f)) {
    if (function_) return;
    std::size_t at = 0;
    while (at < pattern.size()) {
      const auto open = pattern.find('{', at);
      if (open == std::string_view::npos) {
        parts_.push_back({std::string(pattern.substr(at)), part::literal});
        break;
      }
      if (open > at) parts_.push_back({std::string(pattern.substr(at, open - at)), part::literal});
      const auto close = pattern.find('}', open);
      if (close == std::string_view::npos)
        throw error(errc::misconfigured, "kafka", {},
                    "publisher_options::topic_pattern has a '{' without its '}'");
      const auto name = pattern.substr(open + 1, close - open - 1);
      if (name == "aggregate_type")
        parts_.push_back({{}, part::aggregate_type});
      else if (name == "event_type")
        parts_.push_back({{}, part::event_type});
      else
        throw error(errc::misconfigured, "kafka", {},
                    "publisher_options::topic_pattern: unknown placeholder {" + std::string(name) +
                        "} (known: {aggregate_type}, {event_type})");
      at = close + 1;
    }
    const bool fixed = parts_.size() <= 1 && (parts_.empty() || parts_[0].kind == part::literal);
    if (fixed) {
      const std::string topic = parts_.empty() ? std::string() : parts_[0].text;
      if (const auto why = topic_problem(topic); !why.empty())
        throw error(
            errc::misconfigured, "kafka", {},
            "publisher_options::topic_pattern \"" + sanitize_text(topic, 300) + "\" " + why);
    }
  }

  /// The topic of `m` (not checked: see `unsendable`).
  [[nodiscard]] std::string operator()(const message& m) const {
    if (function_) return function_(m);
    std::string t;
    for (const auto& p : parts_)
      t += p.kind == part::literal          ? std::string_view(p.text)
           : p.kind == part::aggregate_type ? std::string_view(m.aggregate_type)
                                            : std::string_view(m.event_type);
    return t;
  }

 private:
  struct part {
    enum kind_type : std::uint8_t { literal, aggregate_type, event_type };
    std::string text;
    kind_type kind;
  };
  std::vector<part> parts_;
  function function_;
};

/// The bytes librdkafka counts against `message.max.bytes` for a record of `m` (value, key and
/// headers with their varint lengths), bounded from above.
[[nodiscard]] inline std::size_t record_bytes(const message& m) noexcept {
  const auto header = [](std::size_t name, std::size_t value) { return name + value + 10; };
  std::size_t n = m.payload.size() + m.aggregate_id.size();
  n += header(id_header.size(), 36) + header(event_type_header.size(), m.event_type.size()) +
       header(aggregate_type_header.size(), m.aggregate_type.size()) +
       header(content_type_header.size(), m.content_type.size());
  for (const auto& [k, v] : m.headers) n += header(k.size(), v.size());
  return n;
}

/// Why `m` (routed to `topic`) cannot be produced, or an empty string when it can. Checked
/// before the record enters the producer, so a record that cannot be carried never takes a
/// place in the partition's idempotent sequence: it fails `permanent` and the relay
/// dead-letters it.
[[nodiscard]] inline std::string unsendable(const message& m, std::string_view topic,
                                            std::size_t max_record_bytes) {
  if (const auto why = topic_problem(topic); !why.empty())
    return "the topic \"" + sanitize_text(topic, 300) + "\" " + why +
           " (route such aggregate types with publisher_options::topic)";
  for (const auto& [k, v] : m.headers)
    if (is_reserved_header(k))
      return "a header is named \"" + k +
             "\", a name the Kafka transport writes itself (id, event_type, aggregate_type, "
             "content-type, content_type)";
  if (const auto why = content_type_problem(m.content_type); !why.empty())
    return "the content_type " + why;
  if (to_unix<std::milli>(m.created_at) < 0)
    return "created_at is before 1970: a Kafka timestamp counts milliseconds since 1970";
  const std::size_t size = record_bytes(m);
  if (size > max_record_bytes)
    return "the record is " + std::to_string(size) +
           " bytes (payload, key and headers): over the producer's message.max.bytes (" +
           std::to_string(max_record_bytes) + ")";
  return {};
}

namespace detail {

/// The fields of one record, for `rd_kafka_produceva`. Not `rd_kafka_producev`: its
/// `RD_KAFKA_V_` macros are GNU statement expressions, which clang refuses under -Wpedantic
/// (-Werror) in every file that includes this header.
class record_fields {
 public:
  record_fields& topic(const char* name) {
    auto& f = next(RD_KAFKA_VTYPE_TOPIC);
    f.u.cstr = name;
    return *this;
  }
  record_fields& key(std::string_view k) { return bytes(RD_KAFKA_VTYPE_KEY, k); }
  record_fields& value(std::string_view v) { return bytes(RD_KAFKA_VTYPE_VALUE, v); }
  record_fields& timestamp_ms(std::int64_t ms) {
    auto& f = next(RD_KAFKA_VTYPE_TIMESTAMP);
    f.u.i64 = ms;
    return *this;
  }
  /// On success the record owns `h`; on failure the caller still does.
  record_fields& headers(rd_kafka_headers_t* h) {
    auto& f = next(RD_KAFKA_VTYPE_HEADERS);
    f.u.headers = h;
    return *this;
  }
  record_fields& flags(int msgflags) {
    auto& f = next(RD_KAFKA_VTYPE_MSGFLAGS);
    f.u.i = msgflags;
    return *this;
  }
  record_fields& opaque(void* p) {
    auto& f = next(RD_KAFKA_VTYPE_OPAQUE);
    f.u.ptr = p;
    return *this;
  }

  /// Produces the record; the error code `rd_kafka_producev` would have returned.
  [[nodiscard]] rd_kafka_resp_err_t produce(rd_kafka_t* rk) const {
    rd_kafka_error_t* e = rd_kafka_produceva(rk, fields_, count_);
    if (e == nullptr) return RD_KAFKA_RESP_ERR_NO_ERROR;
    const rd_kafka_resp_err_t code = rd_kafka_error_code(e);
    rd_kafka_error_destroy(e);
    return code;
  }

 private:
  rd_kafka_vu_t& next(rd_kafka_vtype_t type) {
    auto& f = fields_[count_++];  // at most one of each of the 7 kinds
    f.vtype = type;
    return f;
  }
  record_fields& bytes(rd_kafka_vtype_t type, std::string_view b) {
    auto& f = next(type);
    // librdkafka copies (RD_KAFKA_MSG_F_COPY) or frees it; it never writes to it.
    f.u.mem.ptr = const_cast<char*>(b.data());
    f.u.mem.size = b.size();
    return *this;
  }

  rd_kafka_vu_t fields_[7]{};
  std::size_t count_ = 0;
};

}  // namespace detail

/// The class of a delivery-report error (or an error a produce call returned) for the one
/// message it concerns: what no retry can fix in the message is `permanent` (too large, a
/// record or topic the broker refuses), a configuration the relay must stop on is
/// `misconfigured` (credentials, authorization), everything else `transient` (timeouts,
/// possibly persisted messages, leader changes, a broker away), retried with backoff.
[[nodiscard]] inline errc classify_delivery(rd_kafka_resp_err_t err) noexcept {
  switch (err) {
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_MSG:
    case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    case RD_KAFKA_RESP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT:
    case RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP:
    case RD_KAFKA_RESP_ERR__BAD_MSG:
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
      return errc::permanent;
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
    case RD_KAFKA_RESP_ERR__AUTHENTICATION:
    case RD_KAFKA_RESP_ERR__SSL:
      return errc::misconfigured;
    default:
      return errc::transient;
  }
}

/// A record read back into `m` (the inverse of what the publisher writes); false when it is not
/// an outbox event: no `id` header holding a UUID (nil included), no `event_type` or
/// `aggregate_type` header, no key (the aggregate id), what a relay would not publish
/// (`unpublishable_reason`: empty or non-UTF-8 names, a content type that is not a media type, a
/// JSON payload holding NUL or invalid UTF-8), a timestamp `time_point` cannot represent. Of a
/// header the transport writes, the first counts (`content-type`, else the older `content_type`).
/// The value is the payload, byte for byte (a null value is an empty payload); a missing
/// `content_type` means `application/json`; the other headers are the event's own (a null value
/// reads as empty; of a repeated name the last wins).
[[nodiscard]] inline bool decode(const rd_kafka_message_t& rec, message& m) {
  rd_kafka_headers_t* hdrs = nullptr;
  // Not the const overload: librdkafka parses the headers lazily into the message.
  if (rd_kafka_message_headers(const_cast<rd_kafka_message_t*>(&rec), &hdrs) !=
          RD_KAFKA_RESP_ERR_NO_ERROR ||
      hdrs == nullptr)
    return false;
  if (rec.key == nullptr || rec.key_len == 0) return false;
  m = message{};
  m.aggregate_id.assign(static_cast<const char*>(rec.key), rec.key_len);
  bool has_id = false;
  bool has_event_type = false;
  bool has_aggregate_type = false;
  bool has_content_type = false;
  const char* name = nullptr;
  const void* value = nullptr;
  std::size_t size = 0;
  for (std::size_t i = 0;
       rd_kafka_header_get_all(hdrs, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR; ++i) {
    const std::string_view k(name);
    std::string v =
        value != nullptr ? std::string(static_cast<const char*>(value), size) : std::string();
    if (k == id_header && !has_id) {
      const auto id = uuid::parse(v);
      if (!id) return false;
      m.id = *id;
      has_id = true;
    } else if (k == event_type_header && !has_event_type) {
      m.event_type = std::move(v);
      has_event_type = true;
    } else if (k == aggregate_type_header && !has_aggregate_type) {
      m.aggregate_type = std::move(v);
      has_aggregate_type = true;
    } else if ((k == content_type_header || k == legacy_content_type_header) && !has_content_type) {
      m.content_type = std::move(v);
      has_content_type = true;
    } else if (!is_reserved_header(k)) {
      m.headers.insert_or_assign(std::string(k), std::move(v));
    }
  }
  if (!has_id || !has_event_type || !has_aggregate_type) return false;
  if (!has_content_type || m.content_type.empty()) m.content_type = std::string(json_content_type);
  if (rec.payload != nullptr) m.payload.assign(static_cast<const char*>(rec.payload), rec.len);
  // What a relay would not publish is not an event either: empty or non-UTF-8 names, a nil id,
  // a content type that is not a media type, a JSON payload with NUL bytes or invalid UTF-8.
  if (!unpublishable_reason(m).empty()) return false;
  rd_kafka_timestamp_type_t type = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
  const std::int64_t ms = rd_kafka_message_timestamp(&rec, &type);
  if (type != RD_KAFKA_TIMESTAMP_NOT_AVAILABLE) {
    const auto t = from_unix<std::milli>(ms);
    if (!t) return false;
    m.created_at = *t;
  }
  return true;
}

/// The record's headers for CloudEvents `mode` (not `off`) and its value: binary mode puts
/// each attribute in a `ce_` header (`datacontenttype` in `content-type`), the event's payload
/// is the value; structured mode writes `content-type: application/cloudevents+json` and the
/// JSON envelope as the value. Check `cloudevents::unmappable` first.
[[nodiscard]] inline std::vector<std::pair<std::string, std::string>> cloudevents_headers(
    const cloudevents& ce, const message& m, std::string& value) {
  std::vector<std::pair<std::string, std::string>> h;
  if (ce.mode() == cloudevents_mode::structured) {
    value = ce.structured(m);
    h.emplace_back(content_type_header, cloudevents_content_type);
    return h;
  }
  value = m.payload;
  for (auto& [k, v] : ce.attributes(m))
    h.emplace_back(k == "datacontenttype" ? std::string(content_type_header)
                                          : std::string(cloudevents_prefix) + std::string(k),
                   std::move(v));
  return h;
}

/// A record read back into `m` by a receiver that reads CloudEvents: a binary-mode event (a
/// `ce_specversion` header), a structured one (a CloudEvents `content-type`), or else as
/// `decode` reads it. Why it is not an event, or empty. The record key, when there is one,
/// is not read for a CloudEvent: `subject` is the aggregate id.
[[nodiscard]] inline std::string decode_cloudevent(const rd_kafka_message_t& rec, message& m) {
  rd_kafka_headers_t* hdrs = nullptr;
  if (rd_kafka_message_headers(const_cast<rd_kafka_message_t*>(&rec), &hdrs) !=
      RD_KAFKA_RESP_ERR_NO_ERROR)
    hdrs = nullptr;
  header_map attrs;
  std::string content_type;
  bool binary = false;
  const char* name = nullptr;
  const void* value = nullptr;
  std::size_t size = 0;
  for (std::size_t i = 0;
       hdrs != nullptr &&
       rd_kafka_header_get_all(hdrs, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
       ++i) {
    const std::string_view k(name);
    std::string v =
        value != nullptr ? std::string(static_cast<const char*>(value), size) : std::string();
    if (k.starts_with(cloudevents_prefix)) {
      binary = binary || k == "ce_specversion";
      attrs.emplace(std::string(k.substr(cloudevents_prefix.size())), std::move(v));
    } else if (k == content_type_header && content_type.empty()) {
      content_type = std::move(v);
    }
  }
  std::string payload =
      rec.payload != nullptr ? std::string(static_cast<const char*>(rec.payload), rec.len) : "";
  message out;
  rd_kafka_timestamp_type_t type = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
  if (const std::int64_t ms = rd_kafka_message_timestamp(&rec, &type);
      type != RD_KAFKA_TIMESTAMP_NOT_AVAILABLE)
    out.created_at = from_unix<std::milli>(ms).value_or(time_point{});
  std::string why;
  if (binary)
    why = decode_attributes(attrs, content_type, std::move(payload), out);
  else if (is_cloudevents_content_type(content_type))
    why = decode_structured(payload, out);
  else if (!decode(rec, out))
    why =
        "not an outbox event nor a CloudEvent (no id, event_type or aggregate_type header, or "
        "no key)";
  if (why.empty()) m = std::move(out);
  return why;
}

}  // namespace outbox::kafka
