#pragma once
// The `outbox` tool's MySQL store: mysql://user:password@host:3306/db (the parameters are SOCI's
// MySQL keywords).

#include <string_view>

#include <outbox/mysql/store.hpp>

#include "../store_maker.hpp"

namespace outbox_tool::adapters {

struct mysql {
  static constexpr std::string_view schemes = "mysql";
  /// Its URL forms, for `outbox --help`.
  static constexpr std::string_view help = "mysql://user:password@host:3306/db";

  template <class R, class F>
  static R with_maker(const store_url& u, F& f) {
    return f(store_maker<outbox::mysql::store>{connect_string(with_connect_timeout(u), "db")});
  }
};

}  // namespace outbox_tool::adapters
