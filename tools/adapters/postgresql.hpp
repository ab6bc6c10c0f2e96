#pragma once
// The `outbox` tool's PostgreSQL stores:
//   postgresql://user:password@host:5432/db?options=-csearch_path%3Dapp   (postgres:// too)
//   postgresql+tail://user:password@host:5432/db?slot=NAME&publication=NAME   (the log-tailing
//       relay's store: its slot and publication, both default outbox_relay; `migrate` creates
//       them)
// The parameters are libpq's own keywords (and the tail's slot and publication).

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <outbox/postgresql/store.hpp>
#include <outbox/postgresql/tailing_store.hpp>

#include "../store_maker.hpp"

namespace outbox_tool::adapters {

/// The log-tailing relay's store in the tool: `tailing_store` with the table's per-type stats
/// (`stats` adds the slot's lag).
class tail_store : public outbox::postgresql::tailing_store {
 public:
  static constexpr int schema_version = outbox::postgresql::store::schema_version;
  /// The relay command reads it: one relay thread, one session (a slot streams to one
  /// connection).
  static constexpr bool tails_the_log = true;

  tail_store(std::string conninfo, soci::session& sql, outbox::postgresql::tailing_options o)
      : tailing_store(std::move(conninfo), sql, std::move(o)) {}
  static void configure(soci::session& sql, const outbox::session_options& s = {}) {
    outbox::postgresql::store::configure(sql, s);
  }
  std::vector<outbox::aggregate_type_stats> stats_by_aggregate_type(outbox::time_point now) {
    return table().stats_by_aggregate_type(now);
  }
};

/// The maker of `tail_store`: the connection and the slot's and publication's names.
struct tail_maker {
  using store_type = tail_store;
  std::string conninfo;
  outbox::postgresql::tailing_options tail{.slot = "outbox_relay", .publication = "outbox_relay"};

  void connect(soci::session& sql) const { outbox::postgresql::store::connect(sql, conninfo); }
  int migrate(soci::session& sql) const {
    const int version = outbox::postgresql::store::migrate(sql);
    (void)tail_store::setup(sql, tail);
    return version;
  }
  std::unique_ptr<tail_store> make(soci::session& sql, const outbox::store_options& o) const {
    auto t = tail;
    t.table = o;
    return std::make_unique<tail_store>(conninfo, sql, std::move(t));
  }
  [[nodiscard]] const std::string& slot_name() const { return tail.slot; }
  [[nodiscard]] auto slot(soci::session& sql) const { return tail_store::slot(sql, tail); }
  void drop(soci::session& sql, bool publication) const {
    tail_store::drop(sql, tail, publication);
  }
  /// Rows the relay found passed over by its stream; set before `make`.
  void set_on_stranded(std::function<void(const outbox::error&)> f) {
    tail.on_stranded = std::move(f);
  }
};

struct postgresql {
  static constexpr std::string_view schemes = "postgresql postgresql+tail";
  /// Its URL forms, for `outbox --help`.
  static constexpr std::string_view help =
      "postgresql://user:password@host:5432/db, "
      "postgresql+tail://user:password@host:5432/db?slot=NAME&publication=NAME (the log-tailing "
      "relay: its slot and publication, made by migrate)";

  template <class R, class F>
  static R with_maker(const store_url& u, F& f) {
    if (u.scheme == "postgresql")
      return f(store_maker<outbox::postgresql::store>{
          connect_string(with_connect_timeout(u), "dbname")});
    tail_maker m;
    store_url plain = u;
    plain.query.clear();
    for (const auto& [k, v] : u.query) {
      if (k == "slot")
        m.tail.slot = v;
      else if (k == "publication")
        m.tail.publication = v;
      else
        plain.query.emplace_back(k, v);
    }
    for (const std::string* name : {&m.tail.slot, &m.tail.publication})
      if (!outbox::postgresql::detail::valid_slot_name(*name))
        throw usage_error("slot and publication names take 1 to 63 of a-z, 0-9 and _");
    m.conninfo = connect_string(with_connect_timeout(plain), "dbname");
    return f(std::move(m));
  }
};

}  // namespace outbox_tool::adapters
