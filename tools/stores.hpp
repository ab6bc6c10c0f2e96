#pragma once
// The stores this build of the `outbox` tool has (-DOUTBOX_TOOL_<STORE>), picked at run time by a
// URL's scheme.

#include <string>
#include <utility>

#include "common.hpp"
#ifdef OUTBOX_TOOL_SQLITE
#include <outbox/sqlite/store.hpp>
#endif
#ifdef OUTBOX_TOOL_POSTGRESQL
#include <outbox/postgresql/store.hpp>
#include <outbox/postgresql/tailing_store.hpp>
#endif
#ifdef OUTBOX_TOOL_MYSQL
#include <outbox/mysql/store.hpp>
#endif

namespace outbox_tool {

/// The stores in this build, for messages: " sqlite postgresql mysql".
inline std::string stores_in_build() {
  std::string out;
#ifdef OUTBOX_TOOL_SQLITE
  out += " sqlite";
#endif
#ifdef OUTBOX_TOOL_POSTGRESQL
  out += " postgresql postgresql+tail";
#endif
#ifdef OUTBOX_TOOL_MYSQL
  out += " mysql";
#endif
  return out;
}

/// How long a connection attempt to a database server may take by default (libpq's and SOCI
/// MySQL's `connect_timeout`, in seconds; the URL's own `?connect_timeout=` wins): without one,
/// a server that accepts the TCP connection and never answers holds the tool forever.
inline constexpr const char* default_connect_timeout = "10";

inline store_url with_connect_timeout(store_url u) {
  for (const auto& kv : u.query)
    if (kv.first == "connect_timeout") return u;
  u.query.emplace_back("connect_timeout", default_connect_timeout);
  return u;
}

#ifdef OUTBOX_TOOL_POSTGRESQL
/// The log-tailing relay's store in the tool (scheme `postgresql+tail`): `tailing_store` made
/// like the tool's other stores, from a session and store options. Its slot and publication
/// are the URL's `slot` and `publication` parameters (both default `outbox_relay`); `migrate`
/// also creates them when missing. `stats` adds the slot's lag.
class tail_store : public outbox::postgresql::tailing_store {
 public:
  /// Set from the URL by `with_store_type` (one store URL per run of the tool).
  static inline outbox::postgresql::tailing_options from_url{.slot = "outbox_relay",
                                                             .publication = "outbox_relay"};
  static inline std::string conninfo{};
  static void connect(soci::session& sql, const std::string& connect_string) {
    outbox::postgresql::store::connect(sql, connect_string);
  }
  static constexpr int schema_version = outbox::postgresql::store::schema_version;
  /// The relay command reads it: one relay thread, one session (a slot streams to one
  /// connection).
  static constexpr bool tails_the_log = true;

  tail_store(soci::session& sql, const outbox::store_options& o)
      : tailing_store(conninfo, sql, with_table(o)) {}
  static void configure(soci::session& sql, const outbox::session_options& s = {}) {
    outbox::postgresql::store::configure(sql, s);
  }
  static int migrate(soci::session& sql, int target = outbox::store::latest_version) {
    const int version = outbox::postgresql::store::migrate(sql, target);
    (void)tailing_store::setup(sql, from_url);
    return version;
  }
  std::vector<outbox::aggregate_type_stats> stats_by_aggregate_type(outbox::time_point now) {
    return table().stats_by_aggregate_type(now);
  }

 private:
  static outbox::postgresql::tailing_options with_table(const outbox::store_options& o) {
    auto t = from_url;
    t.table = o;
    return t;
  }
};
#endif

/// Calls `f.template operator()<Store>(connect_string)` with the store type that `u`'s scheme
/// names (`Store::connect` opens a session on it); a scheme this build has no store for is a
/// usage error.
template <class F>
decltype(auto) with_store_type(const store_url& u, F&& f) {
#ifdef OUTBOX_TOOL_SQLITE
  if (u.scheme == "sqlite") {
    if (!u.query.empty()) throw usage_error("a sqlite URL takes no parameters");
    // SOCI's sqlite3 backend takes a connect string without '=' as the file name, whole.
    if (u.path.find('=') != std::string::npos)
      throw usage_error("a sqlite file name with '=' in it is not supported");
    return std::forward<F>(f).template operator()<outbox::sqlite::store>(u.path);
  }
#endif
#ifdef OUTBOX_TOOL_POSTGRESQL
  if (u.scheme == "postgresql")  // the parameters are libpq's own keywords
    return std::forward<F>(f).template operator()<outbox::postgresql::store>(
        connect_string(with_connect_timeout(u), "dbname"));
#endif
#ifdef OUTBOX_TOOL_POSTGRESQL
  if (u.scheme == "postgresql+tail") {  // libpq keywords, and the slot's and publication's names
    store_url plain = u;
    plain.query.clear();
    for (const auto& [k, v] : u.query) {
      if (k == "slot")
        tail_store::from_url.slot = v;
      else if (k == "publication")
        tail_store::from_url.publication = v;
      else
        plain.query.emplace_back(k, v);
    }
    for (const std::string* name : {&tail_store::from_url.slot, &tail_store::from_url.publication})
      if (!outbox::postgresql::detail::valid_slot_name(*name))
        throw usage_error("slot and publication names take 1 to 63 of a-z, 0-9 and _");
    tail_store::conninfo = connect_string(with_connect_timeout(plain), "dbname");
    return std::forward<F>(f).template operator()<tail_store>(tail_store::conninfo);
  }
#endif
#ifdef OUTBOX_TOOL_MYSQL
  if (u.scheme == "mysql")  // the parameters are SOCI's MySQL keywords
    return std::forward<F>(f).template operator()<outbox::mysql::store>(
        connect_string(with_connect_timeout(u), "db"));
#endif
  throw usage_error("store '" + u.scheme +
                    "' is not in this build of outbox (it has:" + stores_in_build() + ")");
}

}  // namespace outbox_tool
