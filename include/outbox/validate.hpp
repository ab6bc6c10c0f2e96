#pragma once
/// @file
/// Input validation: everything the writer refuses before any SQL runs.

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include <outbox/error.hpp>
#include <outbox/message.hpp>

namespace outbox {

/// Limits applied to every enqueued event. Defaults fit the column types of every dialect.
struct validation_limits {
  std::size_t max_name_bytes = 255;         ///< aggregate_type, aggregate_id, event_type.
  std::size_t max_payload_bytes = 1 << 20;  ///< 1 MiB of payload (JSON text or bytes).
  std::size_t max_header_bytes = std::size_t{64} * 1024;  ///< All header names and values together.
  /// Deepest nesting of arrays and objects a payload may have. 100 is what MySQL's JSON type
  /// accepts; the limit also keeps a consumer's recursive JSON code safe from hostile depth.
  std::size_t max_json_depth = 100;
};

/// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
[[nodiscard]] constexpr bool is_valid_utf8(std::string_view s) noexcept {
  std::size_t i = 0;
  const std::size_t n = s.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      // ASCII runs (most of any payload) 8 bytes a step: the OR of the block has no high bit.
      while (i + 8 <= n) {
        unsigned acc = 0;
        for (std::size_t k = 0; k < 8; ++k) acc |= static_cast<unsigned char>(s[i + k]);
        if ((acc & 0x80U) != 0) break;
        i += 8;
      }
      continue;
    }
    std::size_t len;
    unsigned lo = 0x80;
    unsigned hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return false;
    }
    if (i + len > n) return false;
    const auto c1 = static_cast<unsigned char>(s[i + 1]);
    if (c1 < lo || c1 > hi) return false;
    for (std::size_t k = 2; k < len; ++k) {
      const auto ck = static_cast<unsigned char>(s[i + k]);
      if (ck < 0x80 || ck > 0xBF) return false;
    }
    i += len;
  }
  return true;
}

namespace detail {
/// A SAX handler that validates JSON without building it: counts nesting (refusing past
/// `max_depth`) and looks for NUL characters in strings and keys ("\u0000" is valid JSON, but
/// no SQL text or jsonb column can store it). nlohmann's SAX parser keeps its own state on the
/// heap, so nothing here recurses, however deep the input.
struct json_checker {
  using json = nlohmann::json;
  enum class verdict { ok, syntax, too_deep, nul };

  std::size_t max_depth;
  std::size_t depth = 0;
  verdict found = verdict::ok;

  bool refuse(verdict v) {
    found = v;
    return false;
  }
  bool text(const std::string& s) {
    return s.find('\0') == std::string::npos || refuse(verdict::nul);
  }
  bool open() { return ++depth <= max_depth || refuse(verdict::too_deep); }
  bool close() {
    --depth;
    return true;
  }

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(json::number_integer_t) { return true; }
  bool number_unsigned(json::number_unsigned_t) { return true; }
  bool number_float(json::number_float_t, const json::string_t&) { return true; }
  bool string(json::string_t& s) { return text(s); }
  bool binary(json::binary_t&) { return true; }
  bool start_object(std::size_t) { return open(); }
  bool key(json::string_t& s) { return text(s); }
  bool end_object() { return close(); }
  bool start_array(std::size_t) { return open(); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return refuse(verdict::syntax);
  }
};

/// Checks a JSON payload over its whole length.
/// @throws outbox::error `invalid_input` naming `field`.
inline void check_json(std::string_view field, std::string_view text, std::size_t max_depth) {
  // nlohmann's lexer takes a NUL byte for the end of the input, so "{}\0garbage" would pass:
  // a raw NUL is never valid JSON anyway (outside strings it is no token; inside, a control
  // character), so refuse it before parsing. The bytes validated are the bytes stored.
  if (text.find('\0') != std::string_view::npos)
    throw_invalid(std::string(field), "contains a NUL byte, which JSON does not allow");
  // nlohmann skips a leading byte order mark; PostgreSQL's json input refuses it (22P02, an
  // error from SQL that aborts the caller's transaction) and RFC 8259 forbids sending one.
  if (text.starts_with("\xEF\xBB\xBF"))
    throw_invalid(std::string(field), "starts with a byte order mark, which JSON text must not");
  json_checker checker{max_depth};
  const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &checker);
  if (ok) return;
  switch (checker.found) {
    case json_checker::verdict::too_deep:
      throw_invalid(std::string(field), "nests deeper than " + std::to_string(max_depth) +
                                            " levels (validation_limits.max_json_depth)");
    case json_checker::verdict::nul:
      throw_invalid(std::string(field),
                    "contains a NUL character (\\u0000), which no store can keep");
    default:
      // nlohmann's parser also rejects invalid UTF-8 inside JSON strings.
      throw_invalid(std::string(field), "is not valid JSON");
  }
}

inline void check_name(std::string_view field, std::string_view value, std::size_t max) {
  if (value.empty()) throw_invalid(std::string(field), "must not be empty");
  if (value.find('\0') != std::string_view::npos)
    throw_invalid(std::string(field), "contains a NUL byte");
  if (value.size() > max)
    throw_invalid(std::string(field),
                  "is " + std::to_string(value.size()) + " bytes, limit " + std::to_string(max));
  if (!is_valid_utf8(value)) throw_invalid(std::string(field), "is not valid UTF-8");
}
}  // namespace detail

/// Why `type` cannot be a content type, or an empty string when it can: a media type of
/// printable ASCII ("application/avro", "application/json; charset=utf-8"), at most 255 bytes
/// (what an AMQP short string holds), with a '/'.
[[nodiscard]] inline std::string content_type_problem(std::string_view type) {
  if (type.empty()) return "must not be empty";
  if (type.size() > 255)
    return "is " + std::to_string(type.size()) + " bytes, limit 255 (an AMQP short string)";
  for (const char ch : type)  // a tab may separate parameters (RFC 9110 OWS)
    if ((ch < 0x20 && ch != '\t') || ch > 0x7E) return "must be printable ASCII (a media type)";
  const auto slash = type.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == type.size())
    return "is not a media type (type/subtype)";
  return {};
}
/// True when `type` is a JSON media type: `application/json` or a `+json` suffix
/// (`application/cloudevents+json`), in any case, parameters ignored. A payload of a JSON type is
/// validated as JSON text by the writer; any other payload is opaque bytes.
[[nodiscard]] inline bool is_json_content_type(std::string_view type) noexcept {
  const auto semi = type.find(';');
  if (semi != std::string_view::npos) type = type.substr(0, semi);
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
  const auto ends_with_nocase = [&](std::string_view suffix) {
    if (type.size() < suffix.size()) return false;
    const auto tail = type.substr(type.size() - suffix.size());
    for (std::size_t i = 0; i < suffix.size(); ++i) {
      char c = tail[i];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (c != suffix[i]) return false;
    }
    return true;
  };
  return (type.size() == json_content_type.size() && ends_with_nocase(json_content_type)) ||
         ends_with_nocase("+json");
}

namespace detail {
/// What is wrong with the trace context of `e` (as a field or as headers, not both): the field
/// to name and why, or an empty `why` when it is one W3C propagators read, or absent.
struct trace_issue {
  const char* field = "trace";  ///< The field `invalid_input` names.
  std::string why{};            ///< Empty: nothing is wrong.
};

/// The first `trace_issue` of `e`; a `why` left empty when there is none.
inline trace_issue find_trace_issue(const event& e) {
  const auto hp = e.headers.find(traceparent_header);
  const auto hs = e.headers.find(tracestate_header);
  const bool in_headers = hp != e.headers.end() || hs != e.headers.end();
  if (!e.trace.empty() && in_headers)
    return {"trace", "is set both as event::trace and as traceparent/tracestate headers: set one"};
  if (!in_headers) {
    const auto why = trace_problem(e.trace);
    if (why.empty()) return {};
    const char* field = e.trace.traceparent.empty()                        ? "trace"
                        : traceparent_problem(e.trace.traceparent).empty() ? "trace.tracestate"
                                                                           : "trace.traceparent";
    return {field, std::string(why)};
  }
  if ((hp != e.headers.end() && hp->second.empty()) ||
      (hs != e.headers.end() && hs->second.empty()))
    return {"headers", "an empty traceparent or tracestate header: leave it out"};
  const trace_context t{hp == e.headers.end() ? std::string() : hp->second,
                        hs == e.headers.end() ? std::string() : hs->second};
  if (const auto why = trace_problem(t); !why.empty())
    return {"headers", "the trace context (traceparent, tracestate) " + std::string(why)};
  return {};
}

/// @throws outbox::error `invalid_input` naming the field when `find_trace_issue` finds one.
inline void check_trace(const event& e) {
  if (const auto issue = find_trace_issue(e); !issue.why.empty())
    throw_invalid(issue.field, issue.why);
}
}  // namespace detail

/// Checks one event against `limits`.
/// @throws outbox::error (`invalid_input`, `field()` names the field) on the first violation.
inline void validate(const event& e, const validation_limits& limits = {}) {
  detail::check_name("aggregate_type", e.aggregate_type, limits.max_name_bytes);
  detail::check_name("aggregate_id", e.aggregate_id, limits.max_name_bytes);
  detail::check_name("event_type", e.event_type, limits.max_name_bytes);
  if (e.payload.size() > limits.max_payload_bytes)
    throw_invalid("payload", "is " + std::to_string(e.payload.size()) + " bytes, limit " +
                                 std::to_string(limits.max_payload_bytes));
  if (const auto why = content_type_problem(e.content_type); !why.empty())
    throw_invalid("content_type", why);
  if (is_json_content_type(e.content_type))
    detail::check_json("payload", e.payload, limits.max_json_depth);
  std::size_t header_bytes = 0;
  for (const auto& [name, value] : e.headers) {
    if (name.empty()) throw_invalid("headers", "a header name is empty");
    if (!is_valid_utf8(name)) throw_invalid("headers", "a header name is not valid UTF-8");
    if (name == predecessor_header)
      throw_invalid("headers", "header '" + name + "' is reserved (the relay sets it)");
    if (name.find('\0') != std::string::npos || value.find('\0') != std::string::npos)
      throw_invalid("headers", "header '" + name + "' contains a NUL byte");
    if (!is_valid_utf8(value))
      throw_invalid("headers", "the value of header '" + name + "' is not valid UTF-8");
    header_bytes += name.size() + value.size();
  }
  detail::check_trace(e);
  header_bytes +=
      e.trace.traceparent.empty() ? 0 : traceparent_header.size() + e.trace.traceparent.size();
  header_bytes +=
      e.trace.tracestate.empty() ? 0 : tracestate_header.size() + e.trace.tracestate.size();
  if (header_bytes > limits.max_header_bytes)
    throw_invalid("headers", "total " + std::to_string(header_bytes) + " bytes, limit " +
                                 std::to_string(limits.max_header_bytes));
}

/// Makes text safe to store and show: invalid UTF-8 sequences become U+FFFD, NUL bytes are
/// dropped, and the result is cut (on a character boundary) to at most `max_bytes`. Used for
/// error texts, which come from peers and C libraries and must never make a settle fail.
[[nodiscard]] inline std::string sanitize_text(std::string_view s, std::size_t max_bytes = 2048) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes));
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (i + len > s.size() || (len > 1 && !is_valid_utf8(s.substr(i, len))) ||
        (len == 1 && c >= 0x80)) {
      if (out.size() + 3 > max_bytes) break;
      out += "\xef\xbf\xbd";  // U+FFFD
      ++i;
      continue;
    }
    if (out.size() + len > max_bytes) break;
    if (c != 0) out.append(s.substr(i, len));
    i += len;
  }
  return out;
}

/// Renders headers as a JSON object ("{}" when empty). Never throws on content: bytes that are
/// not valid UTF-8 (a header from a peer, on the dead-letter path) become U+FFFD, so keeping a
/// delivery can never fail on what it keeps. The writer validates its headers first, so what it
/// stores is exact.
[[nodiscard]] inline std::string headers_to_json(const header_map& headers) {
  if (headers.empty()) return "{}";
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, value] : headers) j[name] = value;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// `headers` as a JSON object, with the parts of `trace` that are set as the headers
/// `traceparent_header` and `tracestate_header` (the writer's stored form of a trace context).
[[nodiscard]] inline std::string headers_to_json(const header_map& headers,
                                                 const trace_context& trace) {
  if (trace.empty()) return headers_to_json(headers);
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, value] : headers) j[name] = value;
  if (!trace.traceparent.empty()) j[std::string(traceparent_header)] = trace.traceparent;
  if (!trace.tracestate.empty()) j[std::string(tracestate_header)] = trace.tracestate;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// Parses a JSON object of string values back into headers.
/// @throws outbox::error (`permanent`) if the stored text is not such an object.
[[nodiscard]] inline header_map headers_from_json(std::string_view text) {
  header_map out;
  if (text.empty() || text == "{}") return out;
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object())
    throw error(errc::permanent, "core", {}, "stored headers are not a JSON object of strings");
  for (const auto& [k, v] : j.items()) {
    if (!v.is_string())
      throw error(
          errc::permanent, "core", {},
          "stored header '" + sanitize_text(k, 255) + "' is not a string but " + v.type_name());
    // What the writer refuses is refused here too: these come from rows another program wrote.
    if (k.empty()) throw error(errc::permanent, "core", {}, "a stored header name is empty");
    const auto& value = v.get_ref<const std::string&>();
    if (k.find('\0') != std::string::npos || value.find('\0') != std::string::npos)
      throw error(errc::permanent, "core", {},
                  "stored header '" + sanitize_text(k, 255) + "' contains a NUL character");
    out.emplace(k, value);
  }
  return out;
}

/// Why a message read back from a store cannot be published, or an empty string when it can.
/// (`read_stored_headers` is what a store calls; this is its second half.)
/// The writer never stores such a row; another program writing into the outbox may: empty
/// names, names that are not UTF-8. Stores dead-letter such a row with this reason instead of
/// returning it (see `claimed_batch::unreadable`).
[[nodiscard]] inline std::string unpublishable_reason(const message& m) {
  const std::pair<const char*, const std::string*> names[] = {{"aggregate_type", &m.aggregate_type},
                                                              {"aggregate_id", &m.aggregate_id},
                                                              {"event_type", &m.event_type}};
  for (const auto& [field, value] : names) {
    if (value->empty()) return std::string("stored ") + field + " is empty";
    if (value->find('\0') != std::string::npos)
      return std::string("stored ") + field + " contains a NUL byte";
    if (!is_valid_utf8(*value)) return std::string("stored ") + field + " is not valid UTF-8";
  }
  if (m.id.is_nil()) return "stored event_id is not a UUID";
  // The default content type, on almost every row, needs no checking (the claim's hot path).
  const bool json_default = m.content_type == json_content_type;
  if (!json_default) {
    if (const auto why = content_type_problem(m.content_type); !why.empty())
      return "stored content_type " + why;
  }
  // A JSON payload is not parsed again on the claim's hot path (the writer checked it); bytes
  // no JSON text can hold are refused. Any other payload is opaque bytes.
  if (json_default || is_json_content_type(m.content_type)) {
    if (m.payload.find('\0') != std::string::npos) return "stored payload contains a NUL byte";
    if (!is_valid_utf8(m.payload)) return "stored payload is not valid UTF-8";
  }
  return {};
}

/// The last step of reading a row back from a store, for every store alike: parses the stored
/// headers into `m.headers` (the other fields already read) and says why the row cannot be
/// published, or returns an empty string. Never throws on content: a store dead-letters such a
/// row with this reason (see `claimed_batch::unreadable`).
[[nodiscard]] inline std::string read_stored_headers(message& m, std::string_view headers_json) {
  try {
    m.headers = headers_from_json(headers_json);
  } catch (const error& e) {
    return e.what();
  }
  return unpublishable_reason(m);
}

}  // namespace outbox
