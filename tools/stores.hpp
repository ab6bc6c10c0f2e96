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
  out += " postgresql";
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

/// Calls `f.template operator()<Store>(soci_backend, connect_string)` with the store type that
/// `u`'s scheme names; a scheme this build has no store for is a usage error.
template <class F>
decltype(auto) with_store_type(const store_url& u, F&& f) {
#ifdef OUTBOX_TOOL_SQLITE
  if (u.scheme == "sqlite") {
    if (!u.query.empty()) throw usage_error("a sqlite URL takes no parameters");
    // SOCI's sqlite3 backend takes a connect string without '=' as the file name, whole.
    if (u.path.find('=') != std::string::npos)
      throw usage_error("a sqlite file name with '=' in it is not supported");
    return std::forward<F>(f).template operator()<outbox::sqlite::store>("sqlite3", u.path);
  }
#endif
#ifdef OUTBOX_TOOL_POSTGRESQL
  if (u.scheme == "postgresql")  // the parameters are libpq's own keywords
    return std::forward<F>(f).template operator()<outbox::postgresql::store>(
        "postgresql", connect_string(with_connect_timeout(u), "dbname"));
#endif
#ifdef OUTBOX_TOOL_MYSQL
  if (u.scheme == "mysql")  // the parameters are SOCI's MySQL keywords
    return std::forward<F>(f).template operator()<outbox::mysql::store>(
        "mysql", connect_string(with_connect_timeout(u), "db"));
#endif
  throw usage_error("store '" + u.scheme +
                    "' is not in this build of outbox (it has:" + stores_in_build() + ")");
}

}  // namespace outbox_tool
