#pragma once
/// @file
/// How an `outbox::message` travels over NATS JetStream, both ways: the subject of an event
/// (`subject_router`), the header names, the mapping message -> `natsMsg` with headers
/// (`encode`, `unsendable`) and back (`decode`). The publisher and the receiver are siblings
/// over this header; see adapters/nats/README.md for the mapping.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nats/nats.h>

#include <outbox/cloudevents.hpp>
#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/time.hpp>
#include <outbox/uuid.hpp>
#include <outbox/validate.hpp>

namespace outbox::nats {

/// The header JetStream deduplicates on within the stream's duplicate window: the event id.
inline constexpr std::string_view msg_id_header = "Nats-Msg-Id";
/// The event id when `Nats-Msg-Id` is not it (a copy published again on purpose, past the
/// duplicate window); `encode` does not write it: `Nats-Msg-Id` is the event id.
inline constexpr std::string_view event_id_header = "Outbox-Event-Id";
/// The header that carries `message::event_type`.
inline constexpr std::string_view event_type_header = "Outbox-Event-Type";
/// The header that carries `message::aggregate_type`.
inline constexpr std::string_view aggregate_type_header = "Outbox-Aggregate-Type";
/// The header that carries `message::aggregate_id`.
inline constexpr std::string_view aggregate_id_header = "Outbox-Aggregate-Id";
/// The header that carries `message::content_type`.
inline constexpr std::string_view content_type_header = "Content-Type";
/// The header that carries `message::created_at`, in Unix milliseconds.
inline constexpr std::string_view created_at_header = "Outbox-Created-At";
/// The prefix of CloudEvents attribute headers (the NATS binding's binary mode: `ce-id`, ...;
/// `datacontenttype` is `Content-Type`). With `publisher_options::cloudevents` the transport's
/// own headers (`Nats-Msg-Id`, `Outbox-*`) stay beside them: JetStream deduplicates on the id.
inline constexpr std::string_view cloudevents_prefix = "ce-";
/// The default subject pattern: one subject per event type under `outbox.event.`.
inline constexpr std::string_view default_subject_pattern = "outbox.event.{event_type}";

/// True for the names the transport itself writes, and for names NATS reserves (`Nats-...`):
/// an event header of such a name is refused, and such headers are not the event's on receipt.
[[nodiscard]] inline bool is_transport_header(std::string_view k) noexcept {
  return k.starts_with("Nats-") || k == event_id_header || k == event_type_header ||
         k == aggregate_type_header || k == aggregate_id_header || k == content_type_header ||
         k == created_at_header;
}

/// Why `subject` cannot be a subject to publish to, or empty when it can: tokens separated by
/// dots, none empty, no wildcard token (a star or a greater-than sign), no whitespace or
/// control character.
[[nodiscard]] inline std::string subject_problem(std::string_view subject) {
  if (subject.empty()) return "is empty";
  std::size_t start = 0;
  for (std::size_t i = 0; i <= subject.size(); ++i) {
    if (i == subject.size() || subject[i] == '.') {
      const auto token = subject.substr(start, i - start);
      if (token.empty()) return "has an empty token (a leading, trailing or double '.')";
      if (token == "*" || token == ">") return "has a wildcard token";
      start = i + 1;
      continue;
    }
    const auto c = static_cast<unsigned char>(subject[i]);
    if (c <= ' ' || c == 0x7f) return "holds whitespace or a control character";
  }
  return {};
}

/// Maps a message to its subject: a pattern with `{aggregate_type}`, `{aggregate_id}` and
/// `{event_type}` placeholders (parsed once), or a function of the whole message.
class subject_router {
 public:
  /// A function of the whole message that returns its subject (used instead of a pattern).
  using function = std::function<std::string(const message&)>;

  /// @throws outbox::error `misconfigured` for an unknown placeholder, an unclosed `{`, or a
  ///         pattern that cannot make a valid subject (its text with placeholders filled in).
  explicit subject_router(std::string_view pattern = default_subject_pattern, function f = {})
      : function_(std::move(f)) {
    if (function_) return;
    const auto refuse = [&](const std::string& why) {
      throw error(
          errc::misconfigured, "nats", {},
          "publisher_options::subject_pattern \"" + sanitize_text(pattern, 300) + "\" " + why);
    };
    std::string sample;
    for (std::size_t at = 0; at < pattern.size();) {
      const auto open = pattern.find('{', at);
      fields_.emplace_back(pattern.substr(at, open == pattern.npos ? open : open - at), nullptr);
      sample += fields_.back().first;
      if (open == pattern.npos) break;
      const auto close = pattern.find('}', open);
      if (close == pattern.npos) refuse("has a '{' without its '}'");
      const auto name = pattern.substr(open + 1, close - open - 1);
      if (name == "event_type")
        fields_.back().second = &message::event_type;
      else if (name == "aggregate_type")
        fields_.back().second = &message::aggregate_type;
      else if (name == "aggregate_id")
        fields_.back().second = &message::aggregate_id;
      else
        refuse("has an unknown placeholder {" + std::string(name) +
               "} (known: {event_type}, {aggregate_type}, {aggregate_id})");
      sample += "x";
      at = close + 1;
    }
    if (auto why = subject_problem(sample); !why.empty()) refuse(why);
  }

  /// The subject of `m` (not checked: see `unsendable`).
  [[nodiscard]] std::string operator()(const message& m) const {
    if (function_) return function_(m);
    std::string s;
    for (const auto& [text, field] : fields_) {
      s += text;
      if (field) s += m.*field;
    }
    return s;
  }

 private:
  function function_;
  std::vector<std::pair<std::string, std::string message::*>> fields_;  // text, then a field
};

namespace detail {
struct msg_deleter {
  void operator()(natsMsg* m) const noexcept { natsMsg_Destroy(m); }
};
}  // namespace detail
/// A `natsMsg` (owned).
using msg_ptr = std::unique_ptr<natsMsg, detail::msg_deleter>;

/// Why a header name or value cannot go in a NATS header block, or empty: a name is printable
/// ASCII without ':'; a value holds no CR or LF.
[[nodiscard]] inline std::string header_problem(std::string_view k, std::string_view v) {
  if (k.empty()) return "a header name is empty";
  for (const char c : k)
    if (c <= ' ' || c == ':' || static_cast<unsigned char>(c) >= 0x7f)
      return "the header name \"" + sanitize_text(k, 64) +
             "\" holds a character NATS headers cannot carry (space, ':', control, non-ASCII)";
  if (v.find_first_of("\r\n") != std::string_view::npos)
    return "the value of header \"" + sanitize_text(k, 64) + "\" holds a line break";
  return {};
}

/// Why `m` cannot be published to `subject` within `max_payload` (the server's, bytes of
/// headers and payload), or empty when it can. Checked before anything of it is sent.
[[nodiscard]] inline std::string unsendable(const message& m, std::string_view subject,
                                            std::int64_t max_payload) {
  if (auto why = subject_problem(subject); !why.empty())
    return "the subject \"" + sanitize_text(subject, 300) + "\" " + why;
  if (const auto why = outbox::content_type_problem(m.content_type); !why.empty())
    return "the content_type " + why;
  std::size_t header_bytes = 12 + 64 + 40;  // NATS/1.0 line, created-at, Nats-Msg-Id
  for (const auto& [k, v] : m.headers) {
    if (is_transport_header(k))
      return "the header name \"" + sanitize_text(k, 64) + "\" is the transport's (Nats-*, " +
             "Outbox-Event-*, Outbox-Aggregate-*, Outbox-Created-At, Content-Type)";
    if (auto why = header_problem(k, v); !why.empty()) return why;
    header_bytes += k.size() + v.size() + 4;
  }
  for (const auto* v : {&m.event_type, &m.aggregate_type, &m.aggregate_id, &m.content_type}) {
    if (auto why = header_problem("x", *v); !why.empty())
      return "event_type, aggregate_type, aggregate_id or content_type holds a line break";
    header_bytes += v->size() + 30;
  }
  if (max_payload > 0 && header_bytes + m.payload.size() > static_cast<std::uint64_t>(max_payload))
    return "the message is " + std::to_string(header_bytes + m.payload.size()) +
           " bytes with its headers: over the server's max_payload (" +
           std::to_string(max_payload) + ")";
  return {};
}

/// A `natsMsg` for `m` on `subject`: the payload's exact bytes, and the headers
/// `Nats-Msg-Id` (the id), `Outbox-Event-Type`, `Outbox-Aggregate-Type`, `Outbox-Aggregate-Id`,
/// `Content-Type`, `Outbox-Created-At` (Unix ms) and the event's own (predecessor stamp and
/// trace context among them). Check `unsendable` first.
/// @throws outbox::error `permanent` when libnats refuses it after all.
[[nodiscard]] inline msg_ptr encode(const message& m, const std::string& subject,
                                    const std::string& id) {
  natsMsg* raw = nullptr;
  natsStatus s = natsMsg_Create(&raw, subject.c_str(), nullptr, m.payload.data(),
                                static_cast<int>(m.payload.size()));
  msg_ptr out(raw);
  // The names are literals: their data() is NUL-terminated.
  const auto set = [&](std::string_view k, const char* v) {
    if (s == NATS_OK) s = natsMsgHeader_Set(raw, k.data(), v);
  };
  set(msg_id_header, id.c_str());
  set(event_type_header, m.event_type.c_str());
  set(aggregate_type_header, m.aggregate_type.c_str());
  set(aggregate_id_header, m.aggregate_id.c_str());
  set(content_type_header, m.content_type.c_str());
  set(created_at_header, std::to_string(to_unix<std::milli>(m.created_at)).c_str());
  for (const auto& [k, v] : m.headers)
    if (s == NATS_OK) s = natsMsgHeader_Set(raw, k.c_str(), v.c_str());
  if (s != NATS_OK)
    throw error(errc::permanent, "nats", natsStatus_GetText(s),
                "libnats cannot make this message: " + std::string(natsStatus_GetText(s)));
  return out;
}

/// `encode(m, subject, id)` with the id made here.
[[nodiscard]] inline msg_ptr encode(const message& m, const std::string& subject) {
  return encode(m, subject, m.id.to_string());
}

/// One header of `msg` (empty when absent).
[[nodiscard]] inline std::string header(natsMsg* msg, std::string_view k) {
  const char* v = nullptr;
  if (natsMsgHeader_Get(msg, std::string(k).c_str(), &v) != NATS_OK || v == nullptr) return {};
  return v;
}

namespace detail {
/// Reads the headers that are not the transport's and the payload of `msg` into `m`.
inline void read_headers_and_payload(natsMsg* msg, message& m) {
  const char** keys = nullptr;
  int count = 0;
  if (natsMsgHeader_Keys(msg, &keys, &count) == NATS_OK) {
    std::unique_ptr<const char*, void (*)(const char**)> owned(
        keys, [](const char** k) { std::free(static_cast<void*>(k)); });
    for (int i = 0; i < count; ++i) {
      const std::string_view k = keys[i];
      if (!is_transport_header(k)) m.headers.insert_or_assign(std::string(k), header(msg, k));
    }
  }
  const char* data = natsMsg_GetData(msg);
  m.payload.assign(data ? data : "", static_cast<std::size_t>(natsMsg_GetDataLength(msg)));
}
}  // namespace detail

/// Reads a delivered `natsMsg` back into `m` (the inverse of `encode`); false when it is not an
/// outbox event: no valid id (`Outbox-Event-Id`, else `Nats-Msg-Id`), a missing or empty event type
/// or aggregate header, a content type that is not a media type, a bad `Outbox-Created-At`. The
/// payload is never checked; an absent content type means `application/json`.
[[nodiscard]] inline bool decode(natsMsg* msg, message& m) {
  std::string text = header(msg, event_id_header);
  const auto id = uuid::parse(text.empty() ? header(msg, msg_id_header) : text);
  if (!id) return false;
  m.id = *id;
  m.event_type = header(msg, event_type_header);
  m.aggregate_type = header(msg, aggregate_type_header);
  m.aggregate_id = header(msg, aggregate_id_header);
  if (m.event_type.empty() || m.aggregate_type.empty() || m.aggregate_id.empty()) return false;
  m.content_type = header(msg, content_type_header);
  if (m.content_type.empty()) m.content_type = std::string(json_content_type);
  if (!outbox::content_type_problem(m.content_type).empty()) return false;
  if (const auto at = header(msg, created_at_header); !at.empty()) {
    std::int64_t ms = 0;
    try {
      std::size_t used = 0;
      ms = std::stoll(at, &used);
      if (used != at.size()) return false;
    } catch (const std::exception&) {
      return false;
    }
    const auto t = from_unix<std::milli>(ms);
    if (!t) return false;
    m.created_at = *t;
  }
  detail::read_headers_and_payload(msg, m);
  return true;
}

/// A delivered `natsMsg` read back into `m` by a receiver that reads CloudEvents: an outbox
/// message (`decode`) in either CloudEvents layout (`decode_layout`) or none, or a foreign
/// CloudEvent with only its own headers (`ce-*`, `Content-Type`) or a CloudEvents content
/// type. Why it is not an event, or empty.
[[nodiscard]] inline std::string decode_cloudevent(natsMsg* msg, message& m) {
  message w;
  if (!decode(msg, w)) {
    w = message{};
    w.content_type = header(msg, content_type_header);
    detail::read_headers_and_payload(msg, w);
    if (!w.headers.contains("ce-specversion") && !is_cloudevents_content_type(w.content_type))
      return "not an outbox event nor a CloudEvent (no Outbox-* headers, no ce-specversion)";
  }
  return decode_layout(w, cloudevents_prefix, m);
}

}  // namespace outbox::nats
