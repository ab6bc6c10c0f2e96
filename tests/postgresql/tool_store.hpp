#pragma once
// The `outbox` tool's tests on PostgreSQL (tool_process.hpp includes it): the fixture, its store
// URL, and the test main (a missing server fails it under OUTBOX_REQUIRE_SERVICES).

#include <string>

#include <outbox/postgresql/tailing_store.hpp>

#include "fixture.hpp"

using fixture = outbox::test::postgresql_locking_fixture;

/// The store URL of the fixture's database, with `password` instead of the real one if given.
inline std::string url_of(const fixture& fx, const std::string& password = {}) {
  auto k = keywords(fx.connect_string());
  const std::string pw = password.empty() ? k["password"] : password;
  return "postgresql://" + pct(k["user"]) + (pw.empty() ? "" : ":" + pct(pw)) + "@" +
         (k.count("host") ? k["host"] : "127.0.0.1") + (k.count("port") ? ":" + k["port"] : "") +
         "/" + k["dbname"] + "?options=" + pct(k["options"]);
}

/// A log-tailing relay's slot and publication named after the process (`tag` tells tests
/// apart), and the fixture's postgresql+tail URL for them; both dropped at the end.
struct tail_slot {
  tail_slot(fixture& f, const std::string& tag)
      : fx(f), name("outbox_tool_" + tag + "_" + std::to_string(::getpid())), url(url_of(f)) {
    url.replace(0, std::string("postgresql").size(), "postgresql+tail");
    url += "&slot=" + name + "&publication=" + name;
  }
  ~tail_slot() {
    try {
      auto sql = fx.open_session();
      outbox::postgresql::tailing_store::drop(*sql, {.slot = name, .publication = name}, true);
    } catch (...) {  // NOLINT(bugprone-empty-catch): none there
    }
  }
  tail_slot(const tail_slot&) = delete;
  tail_slot& operator=(const tail_slot&) = delete;
  fixture& fx;
  std::string name;  ///< The slot's and the publication's.
  std::string url;   ///< postgresql+tail://...&slot=NAME&publication=NAME
};

#define OUTBOX_TOOL_TEST_MAIN() OUTBOX_TEST_MAIN_REQUIRING("OUTBOX_TEST_POSTGRESQL")
