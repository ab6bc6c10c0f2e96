#pragma once
/// @file
/// The bytes of log tailing, without a connection: the event as the table-free writer puts it in
/// the WAL (`pg_logical_emit_message` content), the replication protocol's CopyData frames, and
/// the `pgoutput` messages a logical replication stream carries (PostgreSQL documentation,
/// "Streaming Replication Protocol" and "Logical Replication Message Formats").

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <outbox/message.hpp>
#include <outbox/time.hpp>
#include <outbox/uuid.hpp>
#include <outbox/validate.hpp>

namespace outbox::postgresql::detail::wal {

/// A WAL position (`XLogRecPtr`).
using lsn = std::uint64_t;

/// "16/B374D848", as PostgreSQL writes an LSN.
[[nodiscard]] inline std::string format_lsn(lsn v) {
  char buf[32];
  const int n = std::snprintf(buf, sizeof buf, "%X/%X", static_cast<unsigned>(v >> 32),
                              static_cast<unsigned>(v & 0xffffffffU));
  return {buf, static_cast<std::size_t>(n)};
}

/// Reads big-endian integers and strings from a frame; a read past the end marks it bad (and
/// returns zeros), so a truncated frame is one check at the end, not one per field.
class reader {
 public:
  explicit reader(std::string_view data) noexcept : data_(data) {}

  std::uint64_t u(int bytes) noexcept {
    if (data_.size() - pos_ < static_cast<std::size_t>(bytes) || pos_ > data_.size()) {
      bad_ = true;
      pos_ = data_.size();
      return 0;
    }
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(data_[pos_++]);
    return v;
  }
  std::uint8_t u8() noexcept { return static_cast<std::uint8_t>(u(1)); }
  std::uint32_t u32() noexcept { return static_cast<std::uint32_t>(u(4)); }
  std::uint64_t u64() noexcept { return u(8); }
  /// A NUL-terminated string.
  std::string_view cstring() noexcept {
    const auto end = data_.find('\0', pos_);
    if (end == std::string_view::npos) {
      bad_ = true;
      pos_ = data_.size();
      return {};
    }
    const auto s = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  std::string_view bytes(std::size_t n) noexcept {
    if (data_.size() - pos_ < n) {
      bad_ = true;
      pos_ = data_.size();
      return {};
    }
    const auto s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::string_view rest() noexcept { return bytes(data_.size() - pos_); }
  [[nodiscard]] bool bad() const noexcept { return bad_; }
  [[nodiscard]] bool at_end() const noexcept { return pos_ == data_.size(); }

 private:
  std::string_view data_;
  std::size_t pos_ = 0;
  bool bad_ = false;
};

inline void put(std::string& out, std::uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// ---- the event in the WAL ------------------------------------------------------------------

/// The prefix of the logical decoding messages that hold events (`pg_logical_emit_message`).
/// Other prefixes in the stream (other programs' messages) are skipped.
inline constexpr std::string_view message_prefix = "outbox";

/// The content's format version (its first byte). A stream holding a version this library does
/// not know dead-letters that event with the reason. Format 1 is an event due at once; format
/// 2 (a scheduled event) adds its `available_at` after `created_at`. An event due at once is
/// still written in format 1, so a relay of the library before format 2 reads it.
inline constexpr std::uint8_t event_format = 1;
/// The format of a scheduled event (`outgoing::available_at` set).
inline constexpr std::uint8_t scheduled_event_format = 2;

/// Microseconds since the Unix epoch of `t`.
[[nodiscard]] inline std::uint64_t unix_us(time_point t) noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count());
}

/// The event as the table-free writer emits it: version byte, the 16 bytes of the id, created_at
/// (Unix microseconds, Int64), in format 2 available_at (Unix microseconds rounded up, Int64),
/// then aggregate_type, aggregate_id, event_type, content_type, headers (JSON object text) and
/// payload, each an Int32 length and its bytes. Big-endian, as the replication protocol.
[[nodiscard]] inline std::string encode_event(const outgoing& row) {
  const event& e = *row.source;
  std::string out;
  out.reserve(1 + 16 + 8 + 8 + 6 * 4 + e.aggregate_type.size() + e.aggregate_id.size() +
              e.event_type.size() + e.content_type.size() + row.headers_json.size() +
              e.payload.size());
  out.push_back(static_cast<char>(row.scheduled() ? scheduled_event_format : event_format));
  for (const auto b : row.id.bytes()) out.push_back(static_cast<char>(b));
  put(out, unix_us(row.created_at), 8);
  if (row.scheduled())
    put(out,
        static_cast<std::uint64_t>(
            std::chrono::ceil<std::chrono::microseconds>(row.available_at.time_since_epoch())
                .count()),
        8);
  for (const std::string_view s :
       {std::string_view(e.aggregate_type), std::string_view(e.aggregate_id),
        std::string_view(e.event_type), std::string_view(e.content_type),
        std::string_view(row.headers_json), std::string_view(e.payload)}) {
    put(out, s.size(), 4);
    out.append(s);
  }
  return out;
}

/// Reads an event back, and its `available_at` (the epoch: due at once). Never throws on
/// content: returns the reason it cannot be published (empty when it can), with as much of `m`
/// filled as could be read.
[[nodiscard]] inline std::string decode_event(std::string_view content, message& m,
                                              time_point& available_at) {
  reader r(content);
  const auto version = r.u8();
  available_at = time_point{};
  if (r.bad()) return "empty outbox message in the WAL";
  if (version != event_format && version != scheduled_event_format)
    return "outbox message in the WAL of format " + std::to_string(version) +
           " (this library reads formats " + std::to_string(event_format) + " and " +
           std::to_string(scheduled_event_format) + ")";
  const auto id = r.bytes(16);
  if (!r.bad()) {
    std::array<std::uint8_t, 16> b{};
    for (std::size_t i = 0; i < 16; ++i) b[i] = static_cast<std::uint8_t>(id[i]);
    m.id = uuid(b);
  }
  const auto us = static_cast<std::int64_t>(r.u64());
  m.created_at = time_point(std::chrono::microseconds(us));
  if (version == scheduled_event_format)
    available_at = from_unix_clamped<std::micro>(static_cast<std::int64_t>(r.u64()));
  std::string headers;
  for (std::string* field :
       {&m.aggregate_type, &m.aggregate_id, &m.event_type, &m.content_type, &headers, &m.payload}) {
    const auto n = r.u32();
    *field = r.bytes(n);
  }
  if (r.bad() || !r.at_end()) return "truncated or malformed outbox message in the WAL";
  return read_stored_headers(m, headers);
}

/// `decode_event` without the event's `available_at`.
[[nodiscard]] inline std::string decode_event(std::string_view content, message& m) {
  time_point ignored{};
  return decode_event(content, m, ignored);
}

// ---- replication protocol frames -----------------------------------------------------------

/// Microseconds between the Unix epoch and PostgreSQL's (2000-01-01).
inline constexpr std::int64_t pg_epoch_offset_us = 946'684'800'000'000;

/// A standby status update ('r'): written = flushed = applied = `flushed`.
[[nodiscard]] inline std::string status_update(lsn flushed, std::int64_t now_unix_us,
                                               bool reply_requested = false) {
  std::string out;
  out.push_back('r');
  put(out, flushed, 8);
  put(out, flushed, 8);
  put(out, flushed, 8);
  put(out, static_cast<std::uint64_t>(now_unix_us - pg_epoch_offset_us), 8);
  out.push_back(reply_requested ? 1 : 0);
  return out;
}

/// One column of a row in a `pgoutput` message: its kind ('n' null, 'u' unchanged TOASTed
/// value, 't' text, 'b' binary) and its bytes.
struct column_value {
  char kind = 'n';
  std::string_view bytes{};
};

/// One decoded `pgoutput` message of interest.
struct change {
  enum class kind : std::uint8_t {
    begin,     ///< A transaction starts (`final_lsn`, `xid`).
    commit,    ///< It committed (`commit_lsn`, `end_lsn`, `commit_time`).
    message,   ///< A logical decoding message (`prefix`, `content`, `transactional`).
    relation,  ///< A table's description (`relid`, `nspname`, `relname`, `names`).
    insert,    ///< A row inserted (`relid`, `values`).
    other,     ///< Type, origin, updates, deletes, truncates: skipped.
  };
  kind what = kind::other;
  lsn final_lsn = 0;
  lsn commit_lsn = 0;
  lsn end_lsn = 0;
  std::int64_t commit_time_us = 0;  ///< Unix microseconds.
  std::uint32_t xid = 0;
  bool transactional = false;
  std::string_view prefix{};
  std::string_view content{};
  std::uint32_t relid = 0;
  std::string_view nspname{};
  std::string_view relname{};
  std::vector<std::string_view> names{};  ///< A relation's columns, in order.
  std::vector<column_value> values{};     ///< An inserted row's columns, in order.
};

/// Decodes a `pgoutput` message (protocol version 1). `nullopt` for a malformed one.
[[nodiscard]] inline std::optional<change> decode_pgoutput(std::string_view data) {
  reader r(data);
  change c;
  switch (r.u8()) {
    case 'B':
      c.what = change::kind::begin;
      c.final_lsn = r.u64();
      c.commit_time_us = static_cast<std::int64_t>(r.u64()) + pg_epoch_offset_us;
      c.xid = r.u32();
      break;
    case 'C':
      c.what = change::kind::commit;
      r.u8();  // flags
      c.commit_lsn = r.u64();
      c.end_lsn = r.u64();
      c.commit_time_us = static_cast<std::int64_t>(r.u64()) + pg_epoch_offset_us;
      break;
    case 'M': {
      c.what = change::kind::message;
      c.transactional = (r.u8() & 1) != 0;
      c.final_lsn = r.u64();
      c.prefix = r.cstring();
      const auto n = r.u32();
      c.content = r.bytes(n);
      break;
    }
    case 'R': {
      c.what = change::kind::relation;
      c.relid = r.u32();
      c.nspname = r.cstring();
      c.relname = r.cstring();
      r.u8();  // replica identity
      const auto n = static_cast<std::uint16_t>(r.u(2));
      for (std::uint16_t i = 0; i < n && !r.bad(); ++i) {
        r.u8();  // flags
        c.names.push_back(r.cstring());
        r.u32();  // type
        r.u32();  // modifier
      }
      break;
    }
    case 'I': {
      c.what = change::kind::insert;
      c.relid = r.u32();
      if (r.u8() != 'N') return std::nullopt;
      const auto n = static_cast<std::uint16_t>(r.u(2));
      for (std::uint16_t i = 0; i < n && !r.bad(); ++i) {
        column_value v;
        v.kind = static_cast<char>(r.u8());
        if (v.kind == 't' || v.kind == 'b') v.bytes = r.bytes(r.u32());
        c.values.push_back(v);
      }
      break;
    }
    default:
      return c;  // other
  }
  if (r.bad()) return std::nullopt;
  return c;
}

// ---- the outbox table's rows in the stream (table mode) ------------------------------------

/// Where the outbox table's columns are in its relation message (-1: missing).
struct outbox_columns {
  int event_id = -1, aggregate_type = -1, aggregate_id = -1, event_type = -1, payload = -1,
      headers = -1, created_at = -1, content_type = -1, state = -1;
  int available_at = -1;  ///< Optional: -1 reads every row as due at once.

  /// The positions in `names` (a relation message's columns); `nullopt` when a column the
  /// relay needs is missing (a table of that name that is not the outbox, or not migrated).
  [[nodiscard]] static std::optional<outbox_columns> of(
      const std::vector<std::string_view>& names) {
    outbox_columns c;
    const std::pair<std::string_view, int*> wanted[] = {{"event_id", &c.event_id},
                                                        {"aggregate_type", &c.aggregate_type},
                                                        {"aggregate_id", &c.aggregate_id},
                                                        {"event_type", &c.event_type},
                                                        {"payload_bytes", &c.payload},
                                                        {"headers", &c.headers},
                                                        {"created_at", &c.created_at},
                                                        {"content_type", &c.content_type},
                                                        {"state", &c.state}};
    for (const auto& [name, at] : wanted) {
      for (std::size_t i = 0; i < names.size(); ++i)
        if (names[i] == name) *at = static_cast<int>(i);
      if (*at < 0) return std::nullopt;
    }
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == "available_at") c.available_at = static_cast<int>(i);
    return c;
  }
};

/// The state column of an inserted outbox row (binary smallint); -1 when it cannot be read.
[[nodiscard]] inline int row_state(const outbox_columns& c, const std::vector<column_value>& v) {
  if (static_cast<std::size_t>(c.state) >= v.size()) return -1;
  const auto& s = v[static_cast<std::size_t>(c.state)];
  if (s.kind != 'b' || s.bytes.size() != 2) return -1;
  reader r(s.bytes);
  return static_cast<std::int16_t>(r.u(2));
}

/// A binary timestamptz column as a time (microseconds since 2000; 'infinity' is INT64_MAX).
[[nodiscard]] inline time_point timestamptz(std::string_view bytes) noexcept {
  reader tr(bytes);
  const auto since_2000 = static_cast<std::int64_t>(tr.u64());
  return from_unix_clamped<std::micro>(since_2000 > std::numeric_limits<std::int64_t>::max() -
                                                        pg_epoch_offset_us
                                           ? std::numeric_limits<std::int64_t>::max()
                                           : since_2000 + pg_epoch_offset_us);
}

/// The message of an inserted outbox row, from its binary columns (`binary 'true'`), and its
/// `available_at` (the epoch when due at once: '-infinity', or a time before 1970). Never
/// throws on content: returns why it cannot be published (empty when it can).
[[nodiscard]] inline std::string decode_row(const outbox_columns& c,
                                            const std::vector<column_value>& v, message& m,
                                            time_point& available_at) {
  const auto col = [&](int i) -> const column_value* {
    if (i < 0 || static_cast<std::size_t>(i) >= v.size()) return nullptr;
    const auto* p = &v[static_cast<std::size_t>(i)];
    return p->kind == 'b' ? p : nullptr;  // null, unchanged or text: not what we wrote
  };
  const auto* id = col(c.event_id);
  if (id == nullptr || id->bytes.size() != 16) return "streamed outbox row without an event id";
  uuid::bytes_type b{};
  for (std::size_t i = 0; i < 16; ++i) b[i] = static_cast<std::uint8_t>(id->bytes[i]);
  m.id = uuid(b);
  const std::pair<int, std::string*> texts[] = {{c.aggregate_type, &m.aggregate_type},
                                                {c.aggregate_id, &m.aggregate_id},
                                                {c.event_type, &m.event_type},
                                                {c.payload, &m.payload},
                                                {c.content_type, &m.content_type}};
  for (const auto& [i, out] : texts) {
    const auto* p = col(i);
    if (p == nullptr) return "streamed outbox row with a missing column";
    *out = p->bytes;
  }
  const auto* at = col(c.created_at);
  if (at == nullptr || at->bytes.size() != 8) return "streamed outbox row without created_at";
  m.created_at = timestamptz(at->bytes);
  available_at = time_point{};
  if (const auto* due = col(c.available_at); due != nullptr && due->bytes.size() == 8)
    available_at = std::max(timestamptz(due->bytes), time_point{});
  const auto* h = col(c.headers);
  if (h == nullptr || h->bytes.empty() || h->bytes.front() != 1)
    return "streamed outbox row without headers in jsonb format 1";
  return read_stored_headers(m, h->bytes.substr(1));
}

/// `decode_row` without the row's `available_at`.
[[nodiscard]] inline std::string decode_row(const outbox_columns& c,
                                            const std::vector<column_value>& v, message& m) {
  time_point ignored{};
  return decode_row(c, v, m, ignored);
}

}  // namespace outbox::postgresql::detail::wal
