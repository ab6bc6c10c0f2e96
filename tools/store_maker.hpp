#pragma once
// What a store adapter of the `outbox` tool builds from a store URL: a maker, the value that
// opens sessions and makes stores with what the URL said (adapters/<name>.hpp).
//
// A store maker M has
//   using store_type = ...;                         // the store
//   void connect(soci::session&) const;             // opens a session on it
//   int migrate(soci::session&) const;              // `outbox migrate`
//   std::unique_ptr<store_type> make(soci::session&, const outbox::store_options&) const;
// and, for a log-tailing store (store_type::tails_the_log), its slot:
//   slot(session), drop(session, publication), slot_name(), set_on_stranded(f).

#include <memory>
#include <string>
#include <utility>

#include <soci/soci.h>

#include <outbox/outbox.hpp>

#include "common.hpp"

namespace outbox_tool {

/// The maker of a store that needs nothing but its connect string.
template <class Store>
struct store_maker {
  using store_type = Store;
  std::string connect_string;  ///< Store::connect's

  void connect(soci::session& sql) const { Store::connect(sql, connect_string); }
  int migrate(soci::session& sql) const { return Store::migrate(sql); }
  std::unique_ptr<Store> make(soci::session& sql, const outbox::store_options& o) const {
    return std::make_unique<Store>(sql, o);
  }
};

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

}  // namespace outbox_tool
