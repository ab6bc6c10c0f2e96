#pragma once
/// @file
/// The wire protocol of the ZeroMQ transport (version 1), its validation, counters, CURVE keys and
/// the translation of libzmq errors. See adapters/zeromq/README.md for the protocol description.
///
/// Additions within version 1 (each one ignored, as an unknown command or as before, by a peer
/// that predates it, so either side may be upgraded first):
/// - `LIMIT` (consumer -> relay): the receiver's `max_frame_bytes`, sent before each HELLO; the
///   publisher fails an event that consumer cannot take as `permanent` before sending it (an
///   earlier publisher counts LIMIT as `bad_field` and drops it).
/// - A receiver NACKs an EVENT it refuses for its content (a frame over its limit, bad UTF-8, a
///   bad field such as a `created_at` out of range) when its id frame is readable, so the
///   publisher fails that event at once (`permanent`) instead of at its deadline. An EVENT with
///   the wrong frame count or version is still dropped without a NACK (its layout is unknown).
/// - The content type (relay -> consumer): an EVENT whose content type is `application/json`
///   (the default, and all that earlier peers knew) is the 11 frames it always was; any other
///   content type travels in a 12th frame. An earlier receiver counts a 12-frame EVENT as
///   `bad_frame_count` and drops it, so such an event is retried until dead-lettered: upgrade the
///   consumers before writing events of other content types (JSON events interoperate both ways).
///   Payloads are bytes: only under a JSON content type must they be UTF-8.

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ratio>
#include <string>
#include <string_view>
#include <vector>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <outbox/cloudevents.hpp>
#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/time.hpp>
#include <outbox/uuid.hpp>
#include <outbox/validate.hpp>

namespace outbox::zeromq {

/// Frame 0 of every protocol message. A peer speaking another version is refused, not guessed at.
inline constexpr std::string_view protocol_version = "outbox.zmq/1";

/// Frame 1: the command.
namespace command {
inline constexpr std::string_view event = "EVENT";  ///< relay -> consumer, 11 or 12 frames
inline constexpr std::string_view hello = "HELLO";  ///< consumer -> relay, 4 frames
inline constexpr std::string_view ack = "ACK";      ///< consumer -> relay, 3 frames
inline constexpr std::string_view nack = "NACK";    ///< consumer -> relay, 4 frames
inline constexpr std::string_view ping = "PING";    ///< relay -> consumer, 2 frames (liveness)
/// consumer -> relay, 3 frames: the receiver's `max_frame_bytes`, sent right before each HELLO.
inline constexpr std::string_view limit = "LIMIT";
}  // namespace command

/// With CloudEvents (`publisher_options::cloudevents`), an EVENT keeps its frames (the id frame
/// is what ACK and NACK name); binary mode puts the attributes in the headers frame as
/// `ce-<attribute>` and `datacontenttype` in the content type frame, structured mode the JSON
/// envelope in the payload frame under `application/cloudevents+json` (`cloudevents::to_layout`).
inline constexpr std::string_view cloudevents_prefix = "ce-";

/// Frame counts per command (excluding the routing id a ROUTER prepends).
inline constexpr std::size_t event_frames = 11;  ///< An EVENT of content type application/json.
/// An EVENT of any other content type: frame 11 is the content type.
inline constexpr std::size_t typed_event_frames = 12;
inline constexpr std::size_t hello_frames = 4;  ///< A HELLO (`command::hello`).
inline constexpr std::size_t ack_frames = 3;    ///< An ACK (`command::ack`).
inline constexpr std::size_t nack_frames = 4;   ///< A NACK (`command::nack`).
inline constexpr std::size_t ping_frames = 2;   ///< A PING (`command::ping`).
inline constexpr std::size_t limit_frames = 3;  ///< A LIMIT (`command::limit`).

/// The longest consumer name a HELLO may carry (bytes; an empty name is refused too).
inline constexpr std::size_t max_name_bytes = 255;

/// Counters of one side of the protocol. Every rejected message is counted under exactly one
/// reason and then dropped (a receiver NACKs a refused EVENT whose id it can read): it never
/// crashes the peer and never confirms anything.
struct wire_stats {
  std::uint64_t sent = 0;             ///< Protocol messages sent (events, or acks/nacks/hellos).
  std::uint64_t received = 0;         ///< Well-formed protocol messages received.
  std::uint64_t bad_frame_count = 0;  ///< Wrong number of frames for the command.
  std::uint64_t bad_version = 0;      ///< Frame 0 is not `protocol_version`.
  std::uint64_t oversized = 0;        ///< A frame over `max_frame_bytes`.
  /// A name or header that is not valid UTF-8, or a payload of a JSON content type that is not.
  std::uint64_t bad_utf8 = 0;
  std::uint64_t bad_field = 0;     ///< Unknown command, bad id, number, name, JSON or content type.
  std::uint64_t unknown_acks = 0;  ///< Ack/nack for an id not in flight to that peer.
  std::uint64_t unroutable = 0;    ///< Publisher: a peer that vanished (ROUTER_MANDATORY).
  std::uint64_t denied = 0;        ///< Publisher: a CURVE client key not on the allow list.

  /// Everything refused from the wire.
  [[nodiscard]] std::uint64_t rejected() const noexcept {
    return bad_frame_count + bad_version + oversized + bad_utf8 + bad_field + unknown_acks;
  }
};

/// A CURVE key pair in Z85 text (40 characters each).
struct curve_keypair {
  std::string public_key{};  ///< The public key: the one given to peers.
  std::string secret_key{};  ///< The secret key: the one kept by its owner alone.
};

/// True when libzmq was built with CURVE (Debian's is, with libsodium).
[[nodiscard]] inline bool has_curve() noexcept { return zmq_has("curve") != 0; }

/// The native code of an errno: its number and libzmq's text, e.g. "98 Address already in use".
[[nodiscard]] inline std::string native_code(int errnum) {
  return std::to_string(errnum) + " " + zmq_strerror(errnum);
}

/// Translates a libzmq failure into `outbox::error` (adapter "zeromq", native code = the errno
/// number and its text). A bad endpoint or option is `misconfigured`; everything else `transient`.
[[nodiscard]] inline error make_error(const zmq::error_t& e, std::string_view doing) {
  const int n = e.num();
  errc kind = errc::transient;
  switch (n) {
    case EINVAL:
    case EPROTONOSUPPORT:
    case ENOCOMPATPROTO:
    case ENODEV:
    case ENOENT:
    case EACCES:
    case EFAULT:
      kind = errc::misconfigured;
      break;
    default:
      break;
  }
  return error(kind, "zeromq", native_code(n), std::string(doing));
}

/// Generates a CURVE key pair (zmq_curve_keypair).
/// @throws outbox::error `misconfigured` when libzmq has no CURVE.
[[nodiscard]] inline curve_keypair make_curve_keypair() {
  char pub[41] = {};
  char sec[41] = {};
  if (zmq_curve_keypair(pub, sec) != 0)
    throw make_error(zmq::error_t(), "zmq_curve_keypair (is libzmq built with CURVE?)");
  return {pub, sec};
}

namespace detail {

using frames = std::vector<zmq::message_t>;

inline std::string_view view(const zmq::message_t& m) noexcept {
  return {static_cast<const char*>(m.data()), m.size()};
}

/// True when `t` survives the wire: `created_at` travels as Unix ms, and the receiver refuses a
/// count that `time_point` cannot hold (`from_unix`), which includes the last ms of its range.
inline bool wire_carries(time_point t) noexcept {
  return from_unix<std::milli>(to_unix<std::milli>(t)).has_value();
}

inline std::optional<std::int64_t> parse_int(std::string_view s) noexcept {
  std::int64_t v = 0;
  if (s.empty() || s.size() > 20) return std::nullopt;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

inline std::optional<uuid> parse_id(std::string_view s) noexcept {
  if (s.size() != 16) return std::nullopt;
  uuid::bytes_type b{};
  for (std::size_t i = 0; i < 16; ++i) b[i] = static_cast<std::uint8_t>(s[i]);
  uuid u{b};
  if (u.is_nil()) return std::nullopt;
  return u;
}

inline zmq::message_t id_frame(const uuid& id) { return zmq::message_t(id.bytes().data(), 16); }

inline zmq::message_t text_frame(std::string_view s) { return zmq::message_t(s.data(), s.size()); }

/// The frames of one EVENT (without a routing id): 11 under `application/json`, 12 (the content
/// type last) under any other content type.
inline frames encode_event(const message& m) {
  frames f;
  f.reserve(typed_event_frames);
  f.push_back(text_frame(protocol_version));
  f.push_back(text_frame(command::event));
  f.push_back(id_frame(m.id));
  f.push_back(text_frame(m.aggregate_type));
  f.push_back(text_frame(m.aggregate_id));
  f.push_back(text_frame(m.event_type));
  f.push_back(text_frame(headers_to_json(m.headers)));
  f.push_back(text_frame(m.payload));
  f.push_back(text_frame(std::to_string(m.attempts)));
  f.push_back(text_frame(std::to_string(to_unix<std::milli>(m.created_at))));
  f.push_back(text_frame(std::to_string(m.sequence)));
  if (m.content_type != json_content_type) f.push_back(text_frame(m.content_type));
  return f;
}

/// The largest frame of `f` (an encoded message, to compare with a peer's limit before sending).
inline std::size_t largest_frame(const frames& f) noexcept {
  std::size_t n = 0;
  for (const auto& part : f) n = std::max(n, part.size());
  return n;
}

/// The outcome of checking frames 0 and 1 and the frame sizes of a received message.
enum class verdict { ok, bad_frame_count, bad_version, oversized, bad_utf8, bad_field };

inline void count(wire_stats& s, verdict v) noexcept {
  switch (v) {
    case verdict::ok:
      ++s.received;
      break;
    case verdict::bad_frame_count:
      ++s.bad_frame_count;
      break;
    case verdict::bad_version:
      ++s.bad_version;
      break;
    case verdict::oversized:
      ++s.oversized;
      break;
    case verdict::bad_utf8:
      ++s.bad_utf8;
      break;
    case verdict::bad_field:
      ++s.bad_field;
      break;
  }
}

/// Checks the envelope: version, frame sizes, and the frame count the command requires.
/// `first` skips a routing id. On success `cmd` is the command.
inline verdict check_envelope(const frames& f, std::size_t first, std::size_t max_frame_bytes,
                              std::string_view& cmd) {
  if (f.size() < first + 2) return verdict::bad_frame_count;
  for (std::size_t i = first; i < f.size(); ++i)
    if (f[i].size() > max_frame_bytes) return verdict::oversized;
  if (view(f[first]) != protocol_version) return verdict::bad_version;
  cmd = view(f[first + 1]);
  const std::size_t n = f.size() - first;
  if (cmd == command::event)
    return n == event_frames || n == typed_event_frames ? verdict::ok : verdict::bad_frame_count;
  std::size_t want = 0;
  if (cmd == command::hello)
    want = hello_frames;
  else if (cmd == command::ack)
    want = ack_frames;
  else if (cmd == command::nack)
    want = nack_frames;
  else if (cmd == command::ping)
    want = ping_frames;
  else if (cmd == command::limit)
    want = limit_frames;
  else
    return verdict::bad_field;
  return n == want ? verdict::ok : verdict::bad_frame_count;
}

/// A name (aggregate_type, aggregate_id, event_type, consumer name): 1..255 bytes of UTF-8. Empty
/// or too long is a bad field, whatever the bytes; only a name of a valid length is `bad_utf8`.
inline verdict check_name(std::string_view s) {
  if (s.empty() || s.size() > max_name_bytes) return verdict::bad_field;
  return is_valid_utf8(s) ? verdict::ok : verdict::bad_utf8;
}

/// Decodes a checked EVENT (frames after any routing id; `event_frames` or `typed_event_frames`
/// of them). On a refusal `why` names the offending frame (for the NACK's reason). The payload is
/// taken as bytes; it must be UTF-8 only under a JSON content type.
inline verdict decode_event(const frames& f, message& out, std::string_view& why) {
  static constexpr std::string_view names[] = {"aggregate_type", "aggregate_id", "event_type"};
  const auto id = parse_id(view(f[2]));
  why = "id";
  if (!id) return verdict::bad_field;
  for (std::size_t i = 3; i <= 5; ++i) {
    why = names[i - 3];
    if (auto v = check_name(view(f[i])); v != verdict::ok) return v;
  }
  const auto headers = view(f[6]);
  const auto payload = view(f[7]);
  const std::string_view content_type =
      f.size() == typed_event_frames ? view(f[11]) : json_content_type;
  why = "content_type";
  if (!outbox::content_type_problem(content_type).empty()) return verdict::bad_field;
  why = "headers";
  if (!is_valid_utf8(headers)) return verdict::bad_utf8;
  why = "payload";
  if (is_json_content_type(content_type) && !is_valid_utf8(payload)) return verdict::bad_utf8;
  const auto attempts = parse_int(view(f[8]));
  why = "attempts";
  if (!attempts || *attempts < 0 || *attempts > 1'000'000) return verdict::bad_field;
  // Unix ms from the wire: range-checked, since a count beyond what time_point (64-bit ns)
  // holds would be signed overflow in the conversion.
  const auto created = parse_int(view(f[9]));
  const auto created_at = created ? from_unix<std::milli>(*created) : std::nullopt;
  why = "created_at";
  if (!created_at) return verdict::bad_field;
  const auto seq = parse_int(view(f[10]));
  why = "sequence";
  if (!seq) return verdict::bad_field;
  why = "headers";
  try {
    out.headers = headers_from_json(headers);
  } catch (const std::exception&) {
    return verdict::bad_field;
  }
  for (const auto& [k, v] : out.headers)
    if (k.empty()) return verdict::bad_field;
  why = {};
  out.id = *id;
  out.aggregate_type = view(f[3]);
  out.aggregate_id = view(f[4]);
  out.event_type = view(f[5]);
  out.payload = payload;
  out.content_type = content_type;
  out.attempts = static_cast<int>(*attempts);
  out.created_at = *created_at;
  out.sequence = *seq;
  return verdict::ok;
}

/// The id of an EVENT refused for its content, when the receiver can NACK it: the envelope is an
/// EVENT of this version with a right frame count and a readable id (frames without a routing
/// id). A message with another layout has no id one could trust: `nullopt`.
inline std::optional<uuid> refusable_event_id(const frames& f) noexcept {
  if ((f.size() != event_frames && f.size() != typed_event_frames) ||
      view(f[0]) != protocol_version || view(f[1]) != command::event)
    return std::nullopt;
  return parse_id(view(f[2]));
}

/// Sends `f` (optionally after a routing id) as one multipart message. Returns false when the
/// send timed out (EAGAIN: the peer's pipe is full). Throws zmq::error_t otherwise, e.g.
/// EHOSTUNREACH from a ROUTER with ROUTER_MANDATORY when the peer is gone.
inline bool send_frames(zmq::socket_t& s, frames& f, const std::string* routing_id = nullptr) {
  if (routing_id) {
    zmq::message_t rid(routing_id->data(), routing_id->size());
    if (!s.send(rid, zmq::send_flags::sndmore)) return false;
  }
  for (std::size_t i = 0; i < f.size(); ++i) {
    const auto flags = i + 1 < f.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    // Once the first part is queued the rest cannot block (a multipart message is atomic).
    if (!s.send(f[i], flags)) return false;
  }
  return true;
}

}  // namespace detail
}  // namespace outbox::zeromq
