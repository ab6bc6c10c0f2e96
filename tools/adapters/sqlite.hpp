#pragma once
// The `outbox` tool's SQLite store: sqlite:///var/lib/app/orders.db, sqlite:relative/path.db.

#include <string>
#include <string_view>

#include <outbox/sqlite/store.hpp>

#include "../store_maker.hpp"

namespace outbox_tool::adapters {

struct sqlite {
  static constexpr std::string_view schemes = "sqlite";
  static constexpr std::string_view file_schemes = "sqlite";
  /// Its URL forms, for `outbox --help`.
  static constexpr std::string_view help = "sqlite:///path/to.db";

  template <class R, class F>
  static R with_maker(const store_url& u, F& f) {
    if (!u.query.empty()) throw usage_error("a sqlite URL takes no parameters");
    // SOCI's sqlite3 backend takes a connect string without '=' as the file name, whole.
    if (u.path.find('=') != std::string::npos)
      throw usage_error("a sqlite file name with '=' in it is not supported");
    return f(store_maker<outbox::sqlite::store>{u.path});
  }
};

}  // namespace outbox_tool::adapters
