#pragma once
// The `outbox` tool's tests on MySQL (tool_process.hpp includes it): the fixture, its store URL,
// and the test main (a missing server fails it under OUTBOX_REQUIRE_SERVICES).

#include <string>

#include "fixture.hpp"

using fixture = outbox::test::mysql_locking_fixture;

/// The store URL of the fixture's database, with `password` instead of the real one if given.
inline std::string url_of(const fixture& fx, const std::string& password = {}) {
  auto k = keywords(fx.connect_string());
  const std::string pw = password.empty() ? k["password"] : password;
  return "mysql://" + pct(k["user"]) + (pw.empty() ? "" : ":" + pct(pw)) + "@" +
         (k.count("host") ? k["host"] : "127.0.0.1") + (k.count("port") ? ":" + k["port"] : "") +
         "/" + k["db"] + (k.count("charset") ? "?charset=" + k["charset"] : "");
}

#define OUTBOX_TOOL_TEST_MAIN() OUTBOX_TEST_MAIN_REQUIRING("OUTBOX_TEST_MYSQL")
