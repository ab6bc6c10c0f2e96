#pragma once
// What the `outbox` tool's commands share: exit codes, usage errors, server URLs (parsed,
// percent-decoded, printed with the password replaced) and timestamps.

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <outbox/outbox.hpp>

namespace outbox_tool {

inline constexpr int exit_ok = 0;
inline constexpr int exit_error = 1;
inline constexpr int exit_usage = 2;
/// A check that found what it looks for (`slot status --max-kept`: the slot's WAL at risk).
inline constexpr int exit_alarm = 3;

/// The class of an error, as the tool prints it: errc's name ("transient", "misconfigured").
inline const char* class_name(outbox::errc kind) noexcept {
  switch (kind) {
    case outbox::errc::transient:
      return "transient";
    case outbox::errc::permanent:
      return "permanent";
    case outbox::errc::in_doubt:
      return "in_doubt";
    case outbox::errc::duplicate:
      return "duplicate";
    case outbox::errc::misconfigured:
      return "misconfigured";
    case outbox::errc::invalid_input:
      return "invalid_input";
  }
  return "unknown";
}

/// "transient, postgresql 08001": the class, the adapter and its native code (if any).
inline std::string error_origin(const outbox::error& e) {
  return std::string(class_name(e.kind())) + ", " + e.adapter() +
         (e.native_code().empty() ? "" : " " + e.native_code());
}

/// A usage error found after parsing (a bad URL, a bad duration): exit 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- URLs ---------------------------------------------------------------------------------------

inline std::string percent_decode(std::string_view s, std::string_view what = "store") {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
      };
      const int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
      if (hi < 0 || lo < 0)
        throw usage_error("bad percent-escape in the " + std::string(what) + " URL");
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (s[i] == '%') {
      throw usage_error("bad percent-escape in the " + std::string(what) + " URL");
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

/// A parsed URL (a store's or a transport's). `redacted` is what may be printed (the password
/// replaced).
struct store_url {
  std::string scheme, user, password, host, path;
  std::optional<int> port;
  std::vector<std::pair<std::string, std::string>> query;
  std::string redacted;
  std::vector<std::string> secrets;  ///< The password and secret parameters: never printed.
};

/// A URL parameter whose value is (or may hold) a secret: a password, a key (librdkafka's
/// ssl.key.pem, ssl.key.password; a key's file name is hidden too), a token, OAuth or JAAS
/// configuration.
inline bool is_secret_key(std::string_view key) {
  for (const std::string_view word :
       {"password", "secret", "key", "token", "credential", "oauthbearer", "jaas"})
    if (key.find(word) != std::string_view::npos) return true;
  return false;
}

/// Percent-encodes all but RFC 3986's unreserved characters.
inline std::string percent_encode(std::string_view s) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

/// A byte of a word: a letter, a digit, '_' or part of a non-ASCII character.
inline bool is_word_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return std::isalnum(u) != 0 || c == '_' || u >= 0x80;
}

/// Replaces each occurrence of `secret` in `text` (an error message) by ***, except inside a
/// longer word: a password "a" or "conn" hides itself, not the letters of "a connection".
inline std::string redact(std::string text, const std::string& secret) {
  if (secret.empty()) return text;
  const bool word_front = is_word_byte(secret.front()), word_back = is_word_byte(secret.back());
  for (auto at = text.find(secret); at != std::string::npos;) {
    const auto end = at + secret.size();
    const bool inside = (word_front && at > 0 && is_word_byte(text[at - 1])) ||
                        (word_back && end < text.size() && is_word_byte(text[end]));
    if (inside) {
      at = text.find(secret, at + 1);
      continue;
    }
    text.replace(at, secret.size(), "***");
    at = text.find(secret, at + 3);
  }
  return text;
}

/// Replaces every occurrence of each of `secrets` in `text` by ***.
inline std::string redact(std::string text, const std::vector<std::string>& secrets) {
  for (const auto& s : secrets) text = redact(std::move(text), s);
  return text;
}

/// A duration for people, in seconds with a tenth ("27.5 s").
inline std::string seconds_text(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

/// Parses a port number of a URL (1 to 65535).
inline int parse_port(const std::string& p, const std::string& kind) {
  try {
    std::size_t used = 0;
    const int port = std::stoi(p, &used);
    if (used != p.size() || port < 1 || port > 65535) throw std::out_of_range(p);
    return port;
  } catch (const std::exception&) {
    // A port of digits is quoted; anything else may be a password in a URL without its '@'.
    const bool digits = !p.empty() && p.find_first_not_of("0123456789") == std::string::npos;
    throw usage_error("bad port in the " + kind + " URL" + (digits ? ": '" + p + "'" : "") +
                      " (user:password@host:port)");
  }
}

/// How a scheme's URL is read (an adapter's `file_schemes` and `host_list_schemes`,
/// adapter_list.hpp): `scheme://[user[:password]@]host[:port]...` (the default), a file
/// (`scheme:path`), or a host list kept whole (`host:port,host:port`).
enum class url_form { host, file, host_list };

/// Parses `host[:port][/path][?k=v&...]` (what follows the user information) into `u`. An IPv6
/// address is written in brackets: `[::1]:5432`. For a host list, the host is the list, kept
/// whole (`host:port,host:port`).
inline void parse_host_path_query(store_url& u, std::string rest, std::string_view what,
                                  url_form form) {
  const std::string kind(what);
  std::string query;
  if (const auto q = rest.find('?'); q != std::string::npos) {
    query = rest.substr(q + 1);
    rest.erase(q);
  }
  std::string hostport = rest;
  if (const auto slash = rest.find('/'); slash != std::string::npos) {
    hostport = rest.substr(0, slash);
    u.path = percent_decode(rest.substr(slash + 1), what);
  }
  if (form == url_form::host_list) {
    u.host = percent_decode(hostport, what);
  } else if (!hostport.empty() && hostport.front() == '[') {
    const auto close = hostport.find(']');
    if (close == std::string::npos)
      throw usage_error("bad IPv6 address in the " + kind + " URL (no closing ']')");
    u.host = hostport.substr(1, close - 1);
    const std::string after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':')
        throw usage_error("bad host in the " + kind + " URL: '" + hostport + "'");
      u.port = parse_port(after.substr(1), kind);
    }
  } else {
    if (const auto c = hostport.rfind(':'); c != std::string::npos) {
      u.port = parse_port(hostport.substr(c + 1), kind);
      hostport.erase(c);
    }
    u.host = percent_decode(hostport, what);
  }
  std::string_view q = query;
  while (!q.empty()) {
    const auto amp = q.find('&');
    const std::string_view item = q.substr(0, amp);
    const auto eq = item.find('=');
    if (eq == 0)  // its value is not quoted: it may be a secret
      throw usage_error("a parameter with no name in the " + kind + " URL");
    if (eq == std::string_view::npos)
      throw usage_error("bad parameter in the " + kind + " URL: '" + std::string(item) +
                        "' (name=value)");
    u.query.emplace_back(percent_decode(item.substr(0, eq), what),
                         percent_decode(item.substr(eq + 1), what));
    q = amp == std::string_view::npos ? std::string_view{} : q.substr(amp + 1);
  }
}

/// Parses `scheme://[user[:password]@]host[:port][/path][?k=v&...]`, or, for a scheme that names
/// a file (`url_form::file`), `scheme://path` / `scheme:path`. `what`: "store" or "transport",
/// `schemes` the ones to suggest, for the messages, and `form_of` how a scheme is read
/// (adapter_urls.hpp's url_form_of: from the adapters' files).
inline store_url parse_url(const std::string& url, std::string_view what, std::string_view schemes,
                           url_form (*form_of)(std::string_view scheme)) {
  const std::string kind(what);
  store_url u;
  const auto colon = url.find(':');
  if (colon == std::string::npos || colon == 0)
    throw usage_error("the " + kind + " URL has no scheme (" + std::string(schemes) + ")");
  u.scheme = url.substr(0, colon);
  if (u.scheme == "postgres") u.scheme = "postgresql";
  std::string rest = url.substr(colon + 1);
  const url_form form = form_of(u.scheme);
  if (form == url_form::file) {
    // sqlite:///abs/path, sqlite://relative/path, sqlite:relative/path
    if (rest.rfind("//", 0) == 0) rest.erase(0, 2);
    u.path = percent_decode(rest, what);
    if (u.path.empty())
      throw usage_error("the " + u.scheme + " URL names no file (" + u.scheme + ":///path)");
    u.redacted = url;
    return u;
  }
  if (rest.rfind("//", 0) != 0)
    throw usage_error("the " + kind + " URL must look like " + u.scheme +
                      "://user:password@host/path");
  rest.erase(0, 2);
  // The user information ends at the last '@': a password may hold '/', '?', '#', ':' or '@'
  // unencoded and is still read whole, never split (and so never printed in part). A '@' in
  // the host, path or parameters must be percent-encoded (%40).
  std::string shown_userinfo;
  if (const auto at = rest.rfind('@'); at != std::string::npos) {
    const std::string userinfo = rest.substr(0, at);
    // Two '@' with a '/' or '?' after the first: a password with '@' and '/' in it, or a '@'
    // in the path or a parameter, which would send the password to the host after it. Which
    // one cannot be told: refused, without quoting.
    if (const auto first = userinfo.find('@');
        first != std::string::npos && userinfo.find_first_of("/?", first) != std::string::npos)
      throw usage_error("the " + kind +
                        " URL has an '@' before its last one with a '/' or '?' after it: write "
                        "a '@' in the password, path or parameters as %40");
    rest.erase(0, at + 1);
    const auto c = userinfo.find(':');
    if (c != std::string::npos) {
      // Its errors (a bad escape) never quote it.
      u.password = percent_decode(userinfo.substr(c + 1), what);
      u.secrets.push_back(u.password);
      if (userinfo.size() > c + 1) u.secrets.push_back(userinfo.substr(c + 1));  // as written
    }
    u.user = percent_decode(userinfo.substr(0, c), what);
    shown_userinfo = userinfo.substr(0, c) + (c != std::string::npos ? ":***" : "") + "@";
  }
  try {
    parse_host_path_query(u, rest, what, form);
  } catch (const usage_error& e) {
    throw usage_error(redact(e.what(), u.secrets));
  }
  // Parameters that carry a secret (sasl.password, ...) are not printed either.
  std::string shown_query;
  for (const auto& [k, v] : u.query) {
    shown_query += (shown_query.empty() ? "?" : "&") + k + "=" + (is_secret_key(k) ? "***" : v);
    if (is_secret_key(k)) u.secrets.push_back(v);
  }
  const bool ipv6 = u.host.find(':') != std::string::npos && form != url_form::host_list;
  u.redacted = u.scheme + "://" + shown_userinfo + (ipv6 ? "[" + u.host + "]" : u.host) +
               (u.port ? ":" + std::to_string(*u.port) : "") +
               (u.path.empty() ? "" : "/" + u.path) + shown_query;
  return u;
}

/// `key='value'` for libpq and SOCI's MySQL backend (a quote or backslash escaped).
inline std::string keyword(const std::string& key, const std::string& value) {
  std::string out = key + "='";
  for (const char c : value) {
    if (c == '\'' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "' ";
}

/// The keyword connect string of a server URL (libpq's, and SOCI's MySQL backend's: the same
/// form), the database under `db_keyword`, the URL's parameters passed as keywords.
inline std::string connect_string(const store_url& u, const char* db_keyword) {
  std::string out;
  if (!u.host.empty()) out += keyword("host", u.host);
  if (u.port) out += keyword("port", std::to_string(*u.port));
  if (!u.path.empty()) out += keyword(db_keyword, u.path);
  if (!u.user.empty()) out += keyword("user", u.user);
  if (!u.password.empty()) out += keyword("password", u.password);
  for (const auto& [k, v] : u.query) out += keyword(k, v);
  return out;
}

inline std::string iso8601(outbox::time_point t) {
  const auto secs = std::chrono::time_point_cast<std::chrono::seconds>(t);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - secs).count();
  const std::time_t tt = std::chrono::system_clock::to_time_t(secs);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

/// A number and a unit from `units` (the unit's case does not matter, the keys are in lower
/// case), as the count of the smallest unit; nullopt when the text is not one, or the count
/// would pass `max`.
inline std::optional<long long> parse_quantity(const std::string& text,
                                               const std::map<std::string, long long>& units,
                                               long long max) {
  std::size_t used = 0;
  long long n = -1;
  try {
    n = std::stoll(text, &used);
  } catch (const std::exception&) {
  }
  if (n < 0) return std::nullopt;
  std::string unit = text.substr(used);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto u = units.find(unit);
  if (u == units.end() || n > max / u->second) return std::nullopt;
  return n * u->second;
}

/// "7d", "12h", "30m", "45s", "250ms": an age, or a duration.
inline std::chrono::milliseconds parse_age(const std::string& text, const char* option) {
  const auto ms = parse_quantity(
      text, {{"ms", 1}, {"s", 1000}, {"m", 60'000}, {"h", 3'600'000}, {"d", 86'400'000}},
      100LL * 365 * 86'400'000);
  if (!ms)
    throw usage_error(std::string(option) + " takes an age such as 7d, 12h, 30m or 45s, got '" +
                      text + "'");
  return std::chrono::milliseconds(*ms);
}

/// What is wrong with a log-tailing relay's slot, for `slot status --max-kept` and `relay
/// --max-slot-kept`: its wal_status says WAL it needs is about to go or gone; or, with a limit
/// (`max_kept` bytes, 0: none), a slot a relay streams from is more than that behind
/// (`lag`: WAL after its confirmed position), or one nobody streams from keeps more than that
/// (`kept`: WAL from its restart point). A streaming slot is judged by its lag, not by what it
/// keeps: PostgreSQL moves the restart point only at its standby snapshots (every 15 s of
/// activity), so a relay that is not behind at all keeps that much WAL too. Empty when
/// nothing is wrong.
inline std::string slot_alarm(const std::string& slot, const std::string& wal_status,
                              std::int64_t kept, std::int64_t lag, std::int64_t max_kept,
                              bool active) {
  if (wal_status == "unreserved" || wal_status == "lost")
    return "slot " + slot + ": wal_status " + wal_status +
           ": the server is about to remove, or removed, WAL the slot needs "
           "(max_slot_wal_keep_size); events not relayed yet may be lost";
  if (max_kept <= 0) return {};
  if (active && lag > max_kept)
    return "slot " + slot + ": its relay is " + std::to_string(lag) +
           " bytes of WAL behind, more than " + std::to_string(max_kept) + " (the slot keeps " +
           std::to_string(kept) + ")";
  if (!active && kept > max_kept)
    return "slot " + slot + " keeps " + std::to_string(kept) + " bytes of WAL, more than " +
           std::to_string(max_kept) +
           " (no relay streams from it: start one, or drop a retired relay's slot)";
  return {};
}

/// "512MB", "2GB", "64kB", "1000": a size in bytes (kB, MB, GB, TB count by 1024, as
/// PostgreSQL's settings do; the unit's case does not matter).
inline std::int64_t parse_size(const std::string& text, const char* option) {
  const auto bytes = parse_quantity(text,
                                    {{"", 1},
                                     {"b", 1},
                                     {"kb", 1LL << 10},
                                     {"mb", 1LL << 20},
                                     {"gb", 1LL << 30},
                                     {"tb", 1LL << 40}},
                                    1LL << 62);
  if (!bytes)
    throw usage_error(std::string(option) + " takes a size such as 512MB, 2GB or 64kB, got '" +
                      text + "'");
  return *bytes;
}

/// A size limit: `parse_size`, above 0 (a limit of 0 would read as "no limit").
inline std::int64_t parse_limit(const std::string& text, const char* option) {
  const auto bytes = parse_size(text, option);
  if (bytes <= 0)
    throw usage_error(std::string(option) + " takes a size above 0, got '" + text + "'");
  return bytes;
}

}  // namespace outbox_tool
