#pragma once
/// @file
/// How an `outbox::message` travels over AMQP 0-9-1, both ways, and what the broker says when it
/// closes: the header names, the limits of the wire (short strings, one content-header frame),
/// the mapping message -> basic.publish properties and body (`encoded_message`, `unsendable`),
/// the mapping delivery -> message (`decode`), and the decoding of channel.close and
/// connection.close. The publisher and the receiver are siblings over this header (as the
/// ZeroMQ adapter's are over its protocol.hpp); see adapters/amqp/README.md for the mapping.

#include <sys/time.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <ratio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <amqp.h>
#include <amqp_framing.h>

#include <outbox/cloudevents.hpp>
#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/time.hpp>
#include <outbox/uuid.hpp>
#include <outbox/validate.hpp>

namespace outbox::amqp {

/// A view of `s` as AMQP bytes (no copy; valid while `s` lives).
inline amqp_bytes_t bytes(std::string_view s) noexcept {
  return amqp_bytes_t{s.size(), const_cast<char*>(s.data())};
}
/// AMQP bytes as a string (copied, every byte: NUL included).
inline std::string to_string(amqp_bytes_t b) {
  return b.len == 0 ? std::string() : std::string(static_cast<const char*>(b.bytes), b.len);
}

/// Header names the transport itself uses in the AMQP headers table.
inline constexpr std::string_view aggregate_type_header = "aggregate_type";
/// The header that carries `message::aggregate_id` (an event header of that name is refused,
/// as one named `aggregate_type_header` is).
inline constexpr std::string_view aggregate_id_header = "aggregate_id";

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

/// A channel.close or connection.close from the broker, decoded.
struct broker_close {
  bool channel = false;    ///< channel.close (else connection.close).
  std::uint16_t code = 0;  ///< The AMQP reply code (404 NOT_FOUND, 406 PRECONDITION_FAILED, ...).
  std::string text{};      ///< The reply text of the broker.

  /// "channel closed by the broker: 404 NOT_FOUND - ..." (for error texts).
  [[nodiscard]] std::string describe() const {
    return std::string(channel ? "channel" : "connection") +
           " closed by the broker: " + std::to_string(code) + " " + text;
  }
  /// The error class of `code` (see `classify_reply`).
  [[nodiscard]] errc kind() const noexcept { return classify_reply(code); }
};

/// The close that `method` is, or `nullopt` for any other method. The one place a close is read,
/// whether it came as an RPC's server exception, among confirms or among deliveries.
[[nodiscard]] inline std::optional<broker_close> decode_close(const amqp_method_t& method) {
  if (method.id == AMQP_CHANNEL_CLOSE_METHOD) {
    const auto* c = static_cast<const amqp_channel_close_t*>(method.decoded);
    return broker_close{true, c->reply_code, to_string(c->reply_text)};
  }
  if (method.id == AMQP_CONNECTION_CLOSE_METHOD) {
    const auto* c = static_cast<const amqp_connection_close_t*>(method.decoded);
    return broker_close{false, c->reply_code, to_string(c->reply_text)};
  }
  return std::nullopt;
}

/// Headers RabbitMQ adds to a dead-lettered message (not the event's own): skipped by `decode`.
[[nodiscard]] inline bool is_broker_header(std::string_view k) noexcept {
  return k == "x-death" || k.starts_with("x-first-death-") || k.starts_with("x-last-death-");
}

/// The basic.publish properties of one message, with the storage they point into. Built by
/// `encode`; valid while the message it was built from lives (strings are not copied) and until
/// the next `encode` into the same object (reuse it across a batch: no allocation per message).
struct encoded_message {
  std::string id{};         ///< message_id: the UUID as text.
  std::string_view body{};  ///< What basic.publish sends as the body.
  /// CloudEvents binary mode: the `cloudEvents:*` header names and values.
  std::vector<std::pair<std::string, std::string>> ce_headers;
  std::string ce_body{};  ///< CloudEvents structured mode: the JSON envelope (the body).
  std::vector<amqp_table_entry_t> entries;  ///< The headers table.
  amqp_basic_properties_t properties{};     ///< What basic.publish sends; points into the above.
};

namespace detail {
inline amqp_table_entry_t utf8_entry(std::string_view k, std::string_view v) noexcept {
  amqp_table_entry_t e{};
  e.key = bytes(k);
  e.value.kind = AMQP_FIELD_KIND_UTF8;
  e.value.value.bytes = bytes(v);
  return e;
}

/// A duration as a `timeval` for rabbitmq-c's timeouts (negative = 0).
inline timeval to_timeval(std::chrono::microseconds d) noexcept {
  if (d.count() < 0) d = std::chrono::microseconds(0);
  return timeval{static_cast<time_t>(d.count() / 1'000'000),
                 static_cast<suseconds_t>(d.count() % 1'000'000)};
}
}  // namespace detail

/// Fills `out` for `m`: content_type = `m.content_type`, delivery_mode 2 (persistent),
/// message_id = id, type = event_type, timestamp = created_at (Unix seconds), headers =
/// aggregate_type, aggregate_id and the message's own headers (UTF-8 strings). The body is
/// `bytes(m.payload)`, as it is. Check `unsendable` first.
inline void encode(const message& m, encoded_message& out) {
  out.id = m.id.to_string();
  out.entries.clear();
  out.entries.push_back(detail::utf8_entry(aggregate_type_header, m.aggregate_type));
  out.entries.push_back(detail::utf8_entry(aggregate_id_header, m.aggregate_id));
  for (const auto& [k, v] : m.headers) out.entries.push_back(detail::utf8_entry(k, v));
  amqp_basic_properties_t& props = out.properties;
  props = amqp_basic_properties_t{};
  props._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
                 AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TYPE_FLAG | AMQP_BASIC_HEADERS_FLAG |
                 AMQP_BASIC_TIMESTAMP_FLAG;
  props.content_type = bytes(m.content_type);
  props.delivery_mode = 2;  // persistent
  props.message_id = bytes(out.id);
  props.type = bytes(m.event_type);
  // Not before 1970: `unsendable` checked it (AMQP's timestamp is unsigned).
  props.timestamp = static_cast<std::uint64_t>(to_unix<std::ratio<1>>(m.created_at));
  props.headers.num_entries = static_cast<int>(out.entries.size());
  props.headers.entries = out.entries.data();
  out.body = m.payload;
}

/// The bytes of the properties `encode` writes for `m` (flags, then content_type, headers,
/// delivery_mode, message_id (a UUID: 36 bytes), timestamp, type, in wire order): with 20 bytes
/// of frame around them (7 of frame header, 12 of class, weight and body size, 1 frame end) they
/// must fit in one content-header frame of the connection's frame_max.
[[nodiscard]] inline std::size_t properties_bytes(const message& m) noexcept {
  // Each header is a table entry: name (short string), kind, long string (4-byte length).
  const auto entry_bytes = [](std::string_view k, std::string_view v) {
    return 1 + k.size() + 1 + 4 + v.size();
  };
  std::size_t table = 4 + entry_bytes(aggregate_type_header, m.aggregate_type) +
                      entry_bytes(aggregate_id_header, m.aggregate_id);
  for (const auto& [k, v] : m.headers) table += entry_bytes(k, v);
  return 2 + (1 + m.content_type.size()) + table + 1 + (1 + 36) + 8 + (1 + m.event_type.size());
}

/// What a publisher's options add to the checks of `unsendable`.
struct wire_limits {
  std::size_t frame_max = 131072;                     ///< The connection's (negotiated).
  std::size_t max_message_bytes = 128 * 1024 * 1024;  ///< publisher_options::max_message_bytes.
  bool custom_routing_key = false;  ///< The key came from publisher_options::routing_key.
};

/// Why `m` (with routing key `key`) cannot be carried, or empty when it can. Checked before any
/// byte of it is written, since rabbitmq-c refuses a short string over 255 bytes (in a property
/// only after the basic.publish method went out: the connection is then unusable), truncates the
/// length byte of a longer header name (a malformed frame: the broker closes the connection with
/// 541), and fails a content header larger than a frame.
[[nodiscard]] inline std::string unsendable(const message& m, std::string_view key,
                                            const wire_limits& limits) {
  const auto too_long = [](const std::string& what, std::size_t size) {
    return what + " is " + std::to_string(size) + " bytes: over AMQP's limit of " +
           std::to_string(max_short_string) + " for a short string";
  };
  if (key.size() > max_short_string)
    return too_long(limits.custom_routing_key ? "the routing key (publisher_options::routing_key)"
                                              : "the routing key <aggregate_type>.<event_type>",
                    key.size());
  if (m.event_type.size() > max_short_string)
    return too_long("event_type (the `type` property)", m.event_type.size());
  if (const auto why = outbox::content_type_problem(m.content_type); !why.empty())
    return "the content_type (the `content_type` property) " + why;
  if (m.headers.contains(aggregate_type_header) || m.headers.contains(aggregate_id_header))
    return "a user header is named aggregate_type or aggregate_id";
  if (m.headers.contains("CC") || m.headers.contains("BCC"))
    return "a header is named CC or BCC: RabbitMQ reads those as lists of extra routing keys and "
           "closes the channel for a string (406)";
  for (const auto& [k, v] : m.headers) {
    if (k.size() > max_short_string) {
      std::size_t cut = std::min<std::size_t>(k.size(), 32);
      while (cut > 0 && (static_cast<unsigned char>(k[cut]) & 0xC0) == 0x80) --cut;  // UTF-8
      return too_long("the header name \"" + k.substr(0, cut) + "...\"", k.size());
    }
  }
  if (to_unix<std::ratio<1>>(m.created_at) < 0)
    return "created_at is before 1970: the AMQP timestamp property (unsigned seconds since "
           "1970) cannot carry it";
  if (m.payload.size() > limits.max_message_bytes)
    return "the payload is " + std::to_string(m.payload.size()) +
           " bytes: over publisher_options::max_message_bytes (" +
           std::to_string(limits.max_message_bytes) + ")";
  const std::size_t properties = properties_bytes(m);
  if (properties + 20 > limits.frame_max)
    return "the properties with the headers take " + std::to_string(properties) +
           " bytes: over what one content header frame holds (" +
           std::to_string(limits.frame_max - 20) + " of the connection's frame_max " +
           std::to_string(limits.frame_max) +
           "; header names and values, aggregate_type, aggregate_id and event_type count)";
  return {};
}

/// Reads a delivered AMQP message back into `m` (the inverse of `encode`); false when it is not
/// an outbox event: no valid message_id, no `type`, missing or empty aggregate headers, a header
/// that is not a string, a timestamp that `time_point` cannot represent (any publisher can put
/// any uint64 there), a content type that is not a media type. The body is the payload, byte for
/// byte, never checked (it is the application's, whatever its type); an absent or empty
/// content_type property means `application/json`, as for an event written without one.
/// Broker headers (`is_broker_header`) are skipped.
[[nodiscard]] inline bool decode(const amqp_message_t& in, message& m) {
  const amqp_basic_properties_t& p = in.properties;
  if (!(p._flags & AMQP_BASIC_MESSAGE_ID_FLAG) || !(p._flags & AMQP_BASIC_TYPE_FLAG) ||
      !(p._flags & AMQP_BASIC_HEADERS_FLAG))
    return false;
  const auto id = uuid::parse(to_string(p.message_id));
  if (!id) return false;
  m.id = *id;
  m.event_type = to_string(p.type);
  if (m.event_type.empty()) return false;
  bool has_type = false;
  bool has_id = false;
  for (int i = 0; i < p.headers.num_entries; ++i) {
    const amqp_table_entry_t& e = p.headers.entries[i];
    std::string k = to_string(e.key);
    if (is_broker_header(k)) continue;  // x-death... added when the broker dead-lettered it
    if (e.value.kind != AMQP_FIELD_KIND_UTF8 && e.value.kind != AMQP_FIELD_KIND_BYTES) return false;
    std::string v = to_string(e.value.value.bytes);
    if (k == aggregate_type_header) {
      m.aggregate_type = std::move(v);
      has_type = true;
    } else if (k == aggregate_id_header) {
      m.aggregate_id = std::move(v);
      has_id = true;
    } else {
      m.headers.insert_or_assign(std::move(k), std::move(v));
    }
  }
  if (!has_type || !has_id || m.aggregate_type.empty() || m.aggregate_id.empty()) return false;
  m.payload = to_string(in.body);
  m.content_type = (p._flags & AMQP_BASIC_CONTENT_TYPE_FLAG) && p.content_type.len > 0
                       ? to_string(p.content_type)
                       : std::string(json_content_type);
  if (!outbox::content_type_problem(m.content_type).empty()) return false;
  if (p._flags & AMQP_BASIC_TIMESTAMP_FLAG) {
    if (p.timestamp > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return false;
    const auto t = from_unix<std::ratio<1>>(static_cast<std::int64_t>(p.timestamp));
    if (!t) return false;
    m.created_at = *t;
  }
  return true;
}

/// The prefix of CloudEvents attributes in the headers table: the CNCF AMQP binding's
/// application-property prefix (AMQP 0-9-1 has no official binding; `cloudEvents_`, the
/// binding's other spelling, is read too).
inline constexpr std::string_view cloudevents_prefix = "cloudEvents:";

/// Fills `out` for `m` as a CloudEvent (check `unsendable` and `cloudevents::unmappable`
/// first): as `encode`, but binary mode puts the attributes in `cloudEvents:*` headers (and
/// `datacontenttype` in the content_type property) and structured mode sends no headers, the
/// JSON envelope as the body and content_type `application/cloudevents+json`.
inline void encode(const cloudevents& ce, const message& m, encoded_message& out) {
  encode(m, out);
  out.entries.clear();
  out.ce_headers.clear();
  if (ce.mode() == cloudevents_mode::structured) {
    out.ce_body = ce.structured(m);
    out.body = out.ce_body;
    out.properties.content_type = bytes(cloudevents_content_type);
  } else {
    for (auto& [k, v] : ce.attributes(m))
      if (k != "datacontenttype")
        out.ce_headers.emplace_back(std::string(cloudevents_prefix) + std::string(k), std::move(v));
    for (const auto& [k, v] : out.ce_headers) out.entries.push_back(detail::utf8_entry(k, v));
  }
  out.properties.headers.num_entries = static_cast<int>(out.entries.size());
  out.properties.headers.entries = out.entries.data();
}

/// What `unsendable` adds for a CloudEvent of `m`: a header name made too long by its prefix,
/// properties or a body that does not fit. Empty when it can be carried, and then `out` holds
/// the CloudEvent, ready to send (`encode(ce, m, out)`).
[[nodiscard]] inline std::string cloudevents_unsendable(const cloudevents& ce, const message& m,
                                                        const wire_limits& limits,
                                                        encoded_message& out) {
  if (auto why = ce.unmappable(m); !why.empty()) return "CloudEvents: " + why;
  encode(ce, m, out);
  std::size_t table = 4;
  for (const auto& [k, v] : out.ce_headers) {
    if (k.size() > max_short_string)
      return "the CloudEvents header " + k.substr(0, 40) + "... is over AMQP's 255 bytes";
    table += 1 + k.size() + 1 + 4 + v.size();
  }
  const std::size_t properties = 2 + 1 + m.content_type.size() + table + 1 + 37 + 8 + 1 +
                                 m.event_type.size() + cloudevents_content_type.size();
  if (properties + 20 > limits.frame_max)
    return "the CloudEvents properties take " + std::to_string(properties) +
           " bytes: over what one content header frame holds";
  if (out.body.size() > limits.max_message_bytes)
    return "the CloudEvents body is " + std::to_string(out.body.size()) +
           " bytes: over publisher_options::max_message_bytes";
  return {};
}

/// A delivery read back into `m` by a receiver that reads CloudEvents: binary mode (a
/// `cloudEvents:specversion` or `cloudEvents_specversion` header), structured mode (a
/// CloudEvents content_type), or else as `decode` reads it. Why it is not an event, or empty.
[[nodiscard]] inline std::string decode_cloudevent(const amqp_message_t& in, message& m) {
  const amqp_basic_properties_t& p = in.properties;
  const std::string content_type =
      (p._flags & AMQP_BASIC_CONTENT_TYPE_FLAG) ? to_string(p.content_type) : std::string();
  header_map attrs;
  bool binary = false;
  for (int i = 0; (p._flags & AMQP_BASIC_HEADERS_FLAG) && i < p.headers.num_entries; ++i) {
    const amqp_table_entry_t& e = p.headers.entries[i];
    const std::string k = to_string(e.key);
    if (!k.starts_with(cloudevents_prefix) && !k.starts_with("cloudEvents_")) continue;
    if (e.value.kind != AMQP_FIELD_KIND_UTF8 && e.value.kind != AMQP_FIELD_KIND_BYTES)
      return "the CloudEvents header " + sanitize_text(k, 80) + " is not a string";
    const std::string name = k.substr(cloudevents_prefix.size());
    binary = binary || name == "specversion";
    attrs.insert_or_assign(name, to_string(e.value.value.bytes));
  }
  message out;
  if (p._flags & AMQP_BASIC_TIMESTAMP_FLAG)
    out.created_at =
        from_unix<std::ratio<1>>(static_cast<std::int64_t>(p.timestamp & 0x7FFFFFFFFFFFFFFFULL))
            .value_or(time_point{});
  std::string why;
  if (binary)
    why = decode_attributes(attrs, content_type, to_string(in.body), out);
  else if (is_cloudevents_content_type(content_type))
    why = decode_structured(to_string(in.body), out);
  else if (!decode(in, out))
    why = "not an outbox event nor a CloudEvent (no valid message_id, type, aggregate headers)";
  if (why.empty()) m = std::move(out);
  return why;
}

}  // namespace outbox::amqp
