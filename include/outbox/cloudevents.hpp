#pragma once
/// @file
/// CloudEvents 1.0 for every transport: the options (`cloudevents_options`, off by default), the
/// mapping of an `outbox::message` to CloudEvents attributes (`cloudevents::attributes`), the
/// JSON event format of structured mode (`cloudevents::structured`), and the way back from
/// either mode to the same `message` (`decode_attributes`, `decode_structured`). Each transport
/// puts the attributes under its binding's header names; docs/cloudevents.md shows them all.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/time.hpp>
#include <outbox/uuid.hpp>
#include <outbox/validate.hpp>

namespace outbox {

/// How a transport carries events: as before (`off`), as CloudEvents with the attributes in the
/// transport's headers (`binary`), or as a CloudEvents JSON envelope (`structured`).
enum class cloudevents_mode : std::uint8_t {
  off,        ///< The transport's own layout, as without CloudEvents.
  binary,     ///< Attributes in the transport's headers, the payload as the body.
  structured  ///< The event as a CloudEvents JSON envelope (`application/cloudevents+json`).
};

/// The CloudEvents option of a transport's publisher and receiver. A publisher writes `mode`; a
/// receiver with any mode but `off` reads both modes (and events without CloudEvents).
struct cloudevents_options {
  cloudevents_mode mode = cloudevents_mode::off;  ///< Off: nothing changes on the wire.
  /// The `source` attribute of every event published: a non-empty URI reference (RFC 3986),
  /// e.g. "/orders-service" or "urn:example:orders". Required by a publisher not `off`.
  std::string source{};
};

/// The media type of structured mode.
inline constexpr std::string_view cloudevents_content_type = "application/cloudevents+json";
/// The event header whose value becomes the `dataschema` attribute (a URI reference).
inline constexpr std::string_view dataschema_header = "dataschema";
/// The extension that carries `message::aggregate_type`.
inline constexpr std::string_view aggregate_type_extension = "aggregatetype";
/// The extension that carries `predecessor_header` (a name with '-', no extension can have).
inline constexpr std::string_view predecessor_extension = "outboxpredecessor";
/// The header that keeps a foreign event's `id` when it is not a UUID (see `decode_attributes`).
inline constexpr std::string_view foreign_id_header = "ceid";

namespace detail::ce {

inline bool is_alpha(char c) noexcept { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
inline bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }
inline bool is_hex(char c) noexcept {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/// The context attributes of CloudEvents 1.0: no header may take one of these names.
inline constexpr std::array<std::string_view, 10> context_attributes{
    "id",         "source",  "specversion", "type", "datacontenttype",
    "dataschema", "subject", "time",        "data", "data_base64"};

inline bool is_context_attribute(std::string_view n) noexcept {
  for (const auto a : context_attributes)
    if (a == n) return true;
  return false;
}

/// `bytes` in base64 (RFC 4648, padded), as `data_base64` holds them.
[[nodiscard]] inline std::string base64(std::string_view bytes) {
  static constexpr char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    std::uint32_t n = static_cast<std::uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) n |= static_cast<std::uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) n |= static_cast<std::uint8_t>(bytes[i + 2]);
    out += abc[n >> 18 & 63];
    out += abc[n >> 12 & 63];
    out += i + 1 < bytes.size() ? abc[n >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? abc[n & 63] : '=';
  }
  return out;
}

/// The bytes of base64 text (padding optional), or nullopt when it is not base64.
[[nodiscard]] inline std::optional<std::string> unbase64(std::string_view text) {
  const auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (const char c : text) {
    const int v = value(c);
    if (v < 0) return std::nullopt;
    acc = acc << 6 | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>(acc >> bits & 0xFF);
    }
  }
  return out;
}

/// `t` in RFC 3339, UTC, with as many fractional digits as it holds (none, up to nanoseconds).
[[nodiscard]] inline std::string rfc3339(time_point t) {
  using namespace std::chrono;
  const auto ns = duration_cast<nanoseconds>(t.time_since_epoch());
  const auto day = floor<days>(ns);
  const year_month_day ymd{sys_days{day}};
  const hh_mm_ss<nanoseconds> tod{ns - day};
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02u-%02uT%02d:%02d:%02d", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                static_cast<int>(tod.hours().count()), static_cast<int>(tod.minutes().count()),
                static_cast<int>(tod.seconds().count()));
  std::string s(buf);
  if (auto frac = tod.subseconds().count(); frac != 0) {
    std::snprintf(buf, sizeof buf, ".%09lld", static_cast<long long>(frac));
    std::string f(buf);
    while (f.back() == '0') f.pop_back();
    s += f;
  }
  return s + 'Z';
}

/// An RFC 3339 date-time (any offset, up to 9 fractional digits kept) as a time point.
[[nodiscard]] inline std::optional<time_point> parse_rfc3339(std::string_view s) {
  using namespace std::chrono;
  const auto num = [&](std::size_t at, std::size_t n) -> int {
    int v = 0;
    for (std::size_t i = at; i < at + n; ++i) {
      if (i >= s.size() || !is_digit(s[i])) return -1;
      v = v * 10 + (s[i] - '0');
    }
    return v;
  };
  if (s.size() < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') ||
      s[13] != ':' || s[16] != ':')
    return std::nullopt;
  const int Y = num(0, 4), M = num(5, 2), D = num(8, 2), h = num(11, 2), m = num(14, 2),
            sec = num(17, 2);
  if (Y < 0 || M < 0 || D < 0 || h < 0 || h > 23 || m < 0 || m > 59 || sec < 0 || sec > 60)
    return std::nullopt;
  const year_month_day ymd{year{Y}, month{static_cast<unsigned>(M)}, day{static_cast<unsigned>(D)}};
  if (!ymd.ok()) return std::nullopt;
  std::size_t at = 19;
  std::int64_t frac = 0;
  if (at < s.size() && s[at] == '.') {
    int digits = 0;
    for (++at; at < s.size() && is_digit(s[at]); ++at, ++digits)
      if (digits < 9) frac = frac * 10 + (s[at] - '0');
    if (digits == 0) return std::nullopt;
    for (; digits < 9; ++digits) frac *= 10;
  }
  int offset = 0;
  if (at + 1 == s.size() && (s[at] == 'Z' || s[at] == 'z')) {
  } else if (at + 6 == s.size() && (s[at] == '+' || s[at] == '-') && s[at + 3] == ':') {
    const int oh = num(at + 1, 2), om = num(at + 4, 2);
    if (oh < 0 || oh > 23 || om < 0 || om > 59) return std::nullopt;
    offset = (s[at] == '-' ? -1 : 1) * (oh * 60 + om);
  } else {
    return std::nullopt;
  }
  const auto t = (sys_days{ymd} + hours{h} + minutes{m - offset} + seconds{sec}).time_since_epoch();
  // Only what a time_point holds (years 1678 to 2261 with nanoseconds): no silent overflow.
  constexpr auto lo = duration_cast<seconds>(time_point::duration::min()) + seconds{1};
  constexpr auto hi = duration_cast<seconds>(time_point::duration::max()) - seconds{1};
  if (t < lo || t > hi) return std::nullopt;
  return time_point{duration_cast<time_point::duration>(t) +
                    duration_cast<time_point::duration>(nanoseconds{frac})};
}

/// A UUIDv8 (RFC 9562) from two FNV-1a 64-bit hashes of `source` NUL `id`: the same foreign
/// event (same source and id) maps to the same id, so the inbox deduplicates its redeliveries.
[[nodiscard]] inline uuid derived_id(std::string_view source, std::string_view id) {
  const auto fnv = [&](std::uint64_t h) {
    const auto mix = [&](std::string_view s) {
      for (const char c : s) h = (h ^ static_cast<std::uint8_t>(c)) * 0x100000001b3ULL;
    };
    mix(source);
    mix(std::string_view("\0", 1));
    mix(id);
    return h;
  };
  const std::uint64_t a = fnv(0xcbf29ce484222325ULL), b = fnv(0x84222325cbf29ce4ULL);
  uuid::bytes_type bytes{};
  for (int i = 0; i < 8; ++i) {
    bytes[i] = static_cast<std::uint8_t>(a >> (56 - 8 * i));
    bytes[8 + i] = static_cast<std::uint8_t>(b >> (56 - 8 * i));
  }
  bytes[6] = static_cast<std::uint8_t>((bytes[6] & 0x0F) | 0x80);  // version 8
  bytes[8] = static_cast<std::uint8_t>((bytes[8] & 0x3F) | 0x80);  // RFC variant
  return uuid(bytes);
}

/// The byte range of the value of the top-level member `name` in `text`, JSON that nlohmann
/// already accepted (so no error is handled here): the raw bytes of `data`, kept exactly.
[[nodiscard]] inline std::string_view member_text(std::string_view text, std::string_view name) {
  std::size_t i = 0;
  const auto ws = [&] {
    while (i < text.size() &&
           (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
      ++i;
  };
  const auto skip_string = [&] {  // at the opening quote; ends after the closing one
    for (++i; i < text.size() && text[i] != '"'; ++i)
      if (text[i] == '\\') ++i;
    ++i;
  };
  const auto skip_value = [&] {
    if (text[i] == '"') return skip_string();
    int depth = 0;
    for (; i < text.size(); ++i) {
      const char c = text[i];
      if (c == '"') {
        skip_string();
        --i;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (depth == 0) return;
        if (--depth == 0) {
          ++i;
          return;
        }
      } else if (depth == 0 && (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r')) {
        return;
      }
    }
  };
  ws();
  ++i;  // '{'
  for (;;) {
    ws();
    if (i >= text.size() || text[i] != '"') return {};
    const std::size_t key_at = i;
    skip_string();
    const auto key = nlohmann::json::parse(text.substr(key_at, i - key_at)).get<std::string>();
    ws();
    ++i;  // ':'
    ws();
    const std::size_t at = i;
    skip_value();
    if (key == name) return text.substr(at, i - at);
    ws();
    if (i >= text.size() || text[i] != ',') return {};
    ++i;
  }
}

}  // namespace detail::ce

/// Why `s` is not a URI reference (RFC 3986: a URI or a relative reference), or empty when it
/// is: only unreserved, reserved and percent-encoded characters; a scheme, when a ':' comes
/// before any '/', '?' or '#', of a letter then letters, digits, '+', '-', '.'; '[' and ']'
/// only in an authority (an IP literal).
[[nodiscard]] inline std::string uri_reference_problem(std::string_view s) {
  using namespace detail::ce;
  if (s.empty()) return "is empty";
  const auto first = s.find_first_of(":/?#");
  if (first != std::string_view::npos && s[first] == ':') {
    if (first == 0 || !is_alpha(s[0])) return "has a ':' before any '/' but no scheme before it";
    for (std::size_t i = 1; i < first; ++i)
      if (!is_alpha(s[i]) && !is_digit(s[i]) && s[i] != '+' && s[i] != '-' && s[i] != '.')
        return "has a scheme with a character other than a-z 0-9 + - .";
  }
  const auto auth = s.find("//");
  const auto auth_end = auth == std::string_view::npos ? auth : s.find_first_of("/?#", auth + 2);
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size() || !is_hex(s[i + 1]) || !is_hex(s[i + 2]))
        return "has a '%' not followed by two hex digits";
      i += 2;
    } else if (c == '[' || c == ']') {
      if (auth == std::string_view::npos || i < auth || i >= auth_end)
        return "has a '[' or ']' outside an authority";
    } else if (!is_alpha(c) && !is_digit(c) &&
               std::string_view("-._~:/?#@!$&'()*+,;=").find(c) == std::string_view::npos) {
      return "has a character a URI cannot hold (space, quote, non-ASCII...: percent-encode it)";
    }
  }
  return {};
}

/// True when the URI reference `s` (`uri_reference_problem` empty) has a scheme: an absolute URI,
/// as the `dataschema` attribute must be.
[[nodiscard]] inline bool has_scheme(std::string_view s) noexcept {
  const auto first = s.find_first_of(":/?#");
  return first != std::string_view::npos && first > 0 && s[first] == ':';
}

/// True when `name` can be a CloudEvents extension attribute: a-z and 0-9 only (the spec
/// recommends at most 20 characters; longer ones are carried).
[[nodiscard]] constexpr bool is_extension_name(std::string_view name) noexcept {
  if (name.empty()) return false;
  for (const char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  return true;
}

/// A publisher's CloudEvents mapping, its options checked once.
class cloudevents {
 public:
  /// @throws outbox::error `misconfigured` for a mode not `off` with a `source` that is not a
  ///         URI reference (empty included); `adapter` names the transport in the error.
  explicit cloudevents(cloudevents_options options, const char* adapter = "core")
      : options_(std::move(options)) {
    if (options_.mode == cloudevents_mode::off) return;
    if (const auto why = uri_reference_problem(options_.source); !why.empty())
      throw error(errc::misconfigured, adapter, {},
                  "cloudevents_options::source \"" + sanitize_text(options_.source, 200) + "\" " +
                      why + ": it must be a URI reference such as /orders-service");
  }

  /// The mode the publisher writes.
  [[nodiscard]] cloudevents_mode mode() const noexcept { return options_.mode; }
  /// True when the publisher writes CloudEvents.
  [[nodiscard]] bool on() const noexcept { return options_.mode != cloudevents_mode::off; }
  /// The configured `source`.
  [[nodiscard]] const std::string& source() const noexcept { return options_.source; }

  /// Why `m` cannot be a CloudEvent, or empty when it can: a header name that is not an
  /// extension name (a-z 0-9; `predecessor_header` excepted), one that is a context attribute
  /// or `aggregatetype` (`dataschema` excepted: a URI reference that becomes that attribute).
  /// The transport fails such a message `permanent` (dead-lettered with this reason) before
  /// anything of it is sent: never a broken event on the wire.
  [[nodiscard]] std::string unmappable(const message& m) const {
    for (const auto& [k, v] : m.headers) {
      if (k == predecessor_header) continue;
      if (k == dataschema_header) {
        auto why = uri_reference_problem(v);
        if (why.empty() && !has_scheme(v)) why = "has no scheme: it must be an absolute URI";
        if (!why.empty())
          return "the header dataschema (the CloudEvents dataschema attribute) " + why;
        continue;
      }
      if (!is_extension_name(k))
        return "the header \"" + sanitize_text(k, 64) +
               "\" cannot be a CloudEvents extension attribute (names are a-z 0-9 only)";
      if (detail::ce::is_context_attribute(k) || k == aggregate_type_extension ||
          k == predecessor_extension)
        return "the header \"" + k + "\" collides with a CloudEvents attribute of that name";
    }
    if (!is_valid_utf8(m.event_type) || !is_valid_utf8(m.aggregate_id) ||
        !is_valid_utf8(m.aggregate_type))
      return "a name of the event is not valid UTF-8";
    return {};
  }

  /// The attributes of `m` (check `unmappable` first), as (name, value): specversion, id,
  /// source, type, subject, time, datacontenttype, [dataschema], aggregatetype, then the
  /// headers as extensions. A binding maps `datacontenttype` to its own content type field.
  [[nodiscard]] std::vector<std::pair<std::string_view, std::string>> attributes(
      const message& m) const {
    std::vector<std::pair<std::string_view, std::string>> a;
    a.reserve(8 + m.headers.size());
    a.emplace_back("specversion", "1.0");
    a.emplace_back("id", m.id.to_string());
    a.emplace_back("source", options_.source);
    a.emplace_back("type", m.event_type);
    a.emplace_back("subject", m.aggregate_id);
    a.emplace_back("time", detail::ce::rfc3339(m.created_at));
    a.emplace_back("datacontenttype", m.content_type);
    a.emplace_back(aggregate_type_extension, m.aggregate_type);
    for (const auto& [k, v] : m.headers)
      a.emplace_back(k == predecessor_header ? predecessor_extension : std::string_view(k), v);
    return a;
  }

  /// `m` in the CloudEvents JSON format (check `unmappable` first): the attributes, then a
  /// JSON payload (of a JSON content type, valid, no white space around) as `data`, byte for
  /// byte, any other as
  /// `data_base64`. Sent with the content type `cloudevents_content_type`.
  [[nodiscard]] std::string structured(const message& m) const {
    nlohmann::json env = nlohmann::json::object();
    for (auto& [k, v] : attributes(m)) env[std::string(k)] = std::move(v);
    std::string out = env.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    out.pop_back();  // the closing '}'
    const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
    // Embedded only when the bytes can come back exactly (no white space around the value).
    // (A byte order mark, which nlohmann skips, would make the envelope invalid JSON.)
    if (is_json_content_type(m.content_type) && !m.payload.empty() && !space(m.payload.front()) &&
        !space(m.payload.back()) && !m.payload.starts_with("\xEF\xBB\xBF") &&
        nlohmann::json::accept(m.payload))
      out.append(",\"data\":").append(m.payload);
    else
      out.append(",\"data_base64\":\"").append(detail::ce::base64(m.payload)).append("\"");
    out += '}';
    return out;
  }

  /// `m` in the layout of a transport whose wire carries a `message` of its own (in-memory,
  /// ZeroMQ, NATS): the envelope fields (id, names, attempts, created_at, sequence) as they
  /// are; binary mode: the attributes as headers `prefix` + name, `datacontenttype` as the
  /// content type, the payload; structured mode: no headers, the JSON envelope as payload,
  /// `application/cloudevents+json`. Check `unmappable` first; `decode_layout` reads it back.
  [[nodiscard]] message to_layout(const message& m, std::string_view prefix) const {
    message w;
    w.id = m.id;
    w.aggregate_type = m.aggregate_type;
    w.aggregate_id = m.aggregate_id;
    w.event_type = m.event_type;
    w.attempts = m.attempts;
    w.created_at = m.created_at;
    w.sequence = m.sequence;
    if (mode() == cloudevents_mode::structured) {
      w.payload = structured(m);
      w.content_type = std::string(cloudevents_content_type);
      return w;
    }
    w.payload = m.payload;
    for (auto& [k, v] : attributes(m)) {
      if (k == "datacontenttype")
        w.content_type = std::move(v);
      else
        w.headers.emplace(std::string(prefix) + std::string(k), std::move(v));
    }
    return w;
  }

 private:
  cloudevents_options options_;
};

/// True when `type` is a CloudEvents structured-mode media type (`application/cloudevents`,
/// with a `+json` suffix or parameters), in any case.
[[nodiscard]] inline bool is_cloudevents_content_type(std::string_view type) noexcept {
  constexpr std::string_view prefix = "application/cloudevents";
  if (type.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    char c = type[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != prefix[i]) return false;
  }
  return type.size() == prefix.size() || type[prefix.size()] == '+' || type[prefix.size()] == ';';
}

/// A binary-mode event read back into `m`: `attrs` maps attribute names (the binding's prefix
/// removed, lowercase) to values, `content_type` is the binding's content type (empty: none),
/// `payload` the body. Returns why it is not an event (a required attribute missing, a
/// specversion not 1.0, a time not RFC 3339), or empty. id: the UUID it holds, else a UUIDv8
/// derived from source and id (`detail::ce::derived_id`; the original kept as `foreign_id_header`);
/// aggregate_type: `aggregatetype`, else the source; aggregate_id: `subject`, else the id;
/// created_at: `time` (else left as it is); other attributes become headers.
[[nodiscard]] inline std::string decode_attributes(const header_map& attrs,
                                                   std::string_view content_type,
                                                   std::string payload, message& m) {
  const auto get = [&](std::string_view n) -> const std::string* {
    const auto it = attrs.find(n);
    return it == attrs.end() ? nullptr : &it->second;
  };
  for (const auto& [k, v] : attrs)  // a NUL would let two (source, id) pairs derive one id
    if (v.find('\0') != std::string::npos)
      return "the CloudEvents attribute " + sanitize_text(k, 40) + " contains a NUL byte";
  for (const auto n : {"specversion", "id", "source", "type"})
    if (const auto* v = get(n); v == nullptr || v->empty())
      return std::string("not a CloudEvent: the required attribute ") + n + " is missing";
  if (*get("specversion") != "1.0")
    return "CloudEvents specversion \"" + sanitize_text(*get("specversion"), 40) + "\" is not 1.0";
  const std::string& id = *get("id");
  const std::string& source = *get("source");
  message out;
  const auto u = uuid::parse(id);
  const bool derived = !u || u->is_nil();
  out.id = derived ? detail::ce::derived_id(source, id) : *u;
  out.event_type = *get("type");
  const auto* agg = get(aggregate_type_extension);
  out.aggregate_type = agg != nullptr && !agg->empty() ? *agg : source;
  const auto* subject = get("subject");
  out.aggregate_id = subject != nullptr && !subject->empty() ? *subject : id;
  if (const auto* t = get("time")) {
    const auto at = detail::ce::parse_rfc3339(*t);
    if (!at)
      return "the CloudEvents time \"" + sanitize_text(*t, 60) +
             "\" is not RFC 3339, or not between the years 1678 and 2261";
    out.created_at = *at;
  } else {
    out.created_at = m.created_at;
  }
  out.content_type =
      content_type.empty() ? std::string(json_content_type) : std::string(content_type);
  for (const auto& [k, v] : attrs) {
    if (k == "specversion" || k == "id" || k == "source" || k == "type" || k == "subject" ||
        k == "time" || k == "datacontenttype" || k == aggregate_type_extension)
      continue;
    out.headers.insert_or_assign(k == predecessor_extension ? std::string(predecessor_header) : k,
                                 v);
  }
  // The original id, set after the extensions: an extension of that name cannot replace it.
  if (derived) out.headers.insert_or_assign(std::string(foreign_id_header), id);
  out.payload = std::move(payload);
  if (auto why = unpublishable_reason(out); !why.empty())
    return "a CloudEvent the relay would not publish: " + why;
  m = std::move(out);
  return {};
}

/// A structured-mode event (the CloudEvents JSON format) read back into `m`; why it is not
/// one, or empty. `data` of a JSON `datacontenttype` (or none) is the payload byte for byte;
/// a string `data` of another type is that string; `data_base64` is decoded. Attributes as in
/// `decode_attributes`; extension values that are not strings are kept as JSON text.
[[nodiscard]] inline std::string decode_structured(std::string_view body, message& m) {
  if (body.starts_with("\xEF\xBB\xBF")) body.remove_prefix(3);  // nlohmann skips it: so do we
  // Checked without recursion first: `dump` below recurses (a deep enough envelope would
  // overflow the stack), and a NUL in a string could make two events derive one id.
  detail::json_checker checker{validation_limits{}.max_json_depth + 1};
  if (body.find('\0') != std::string_view::npos ||
      !nlohmann::json::sax_parse(body.begin(), body.end(), &checker)) {
    if (checker.found == detail::json_checker::verdict::too_deep)
      return "a CloudEvents structured event nested deeper than " +
             std::to_string(validation_limits{}.max_json_depth) + " levels in its data";
    if (checker.found == detail::json_checker::verdict::nul)
      return "a CloudEvents structured event with a NUL character in a string";
    return "a CloudEvents structured event that is not valid JSON";
  }
  nlohmann::json env = nlohmann::json::parse(body, nullptr, false);
  if (env.is_discarded() || !env.is_object())
    return "a CloudEvents structured event that is not a JSON object";
  header_map attrs;
  for (const auto& [k, v] : env.items()) {
    if (k == "data" || k == "data_base64") continue;
    attrs.insert_or_assign(k, v.is_string() ? v.get<std::string>() : v.dump());
  }
  const auto ct = attrs.find("datacontenttype");
  const std::string content_type = ct == attrs.end() ? std::string() : ct->second;
  std::string payload;
  if (const auto b = env.find("data_base64"); b != env.end()) {
    const auto bytes = b->is_string() ? detail::ce::unbase64(b->get<std::string>()) : std::nullopt;
    if (!bytes) return "a CloudEvents data_base64 that is not base64";
    payload = *bytes;
  } else if (const auto d = env.find("data"); d != env.end()) {
    if (content_type.empty() || is_json_content_type(content_type))
      payload = std::string(detail::ce::member_text(body, "data"));
    else
      payload = d->is_string() ? d->get<std::string>() : d->dump();
  }
  return decode_attributes(attrs, content_type, std::move(payload), m);
}

/// A message in the layout `cloudevents::to_layout` writes read back into `out`: binary mode
/// (a `prefix` + `specversion` header; the other headers are the transport's, not read),
/// structured mode (a CloudEvents content type), or else `w` as it is. `attempts`, `sequence`
/// and (without a `time`) `created_at` are taken from `w`. Why it is not an event, or empty.
[[nodiscard]] inline std::string decode_layout(const message& w, std::string_view prefix,
                                               message& out) {
  message m;
  m.created_at = w.created_at;
  std::string why;
  header_map attrs;
  for (const auto& [k, v] : w.headers)
    if (k.starts_with(prefix)) attrs.emplace(k.substr(prefix.size()), v);
  if (attrs.contains("specversion")) {
    why = decode_attributes(attrs, w.content_type, w.payload, m);
  } else if (is_cloudevents_content_type(w.content_type)) {
    why = decode_structured(w.payload, m);
  } else {
    out = w;
    return {};
  }
  if (!why.empty()) return why;
  m.attempts = w.attempts;
  m.sequence = w.sequence;
  out = std::move(m);
  return {};
}

}  // namespace outbox
