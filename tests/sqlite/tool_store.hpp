#pragma once
// The `outbox` tool's tests on SQLite (tool_process.hpp includes it): the fixture, its store
// URL, and the test main.

#include <string>

#include "fixture.hpp"

using fixture = outbox::test::sqlite_fixture;

/// The store URL of the fixture's database (a file: no password).
inline std::string url_of(const fixture& fx, const std::string& /*password*/ = {}) {
  return "sqlite://" + fx.path().string();
}

#define OUTBOX_TOOL_TEST_MAIN() OUTBOX_TEST_MAIN()
