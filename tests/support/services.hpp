#pragma once
// Tests that need a server read its address from the environment (OUTBOX_TEST_POSTGRESQL,
// OUTBOX_TEST_MYSQL, OUTBOX_TEST_AMQP, OUTBOX_TEST_KAFKA). Unset: the test executable exits 77,
// which Meson reports as SKIP; with OUTBOX_REQUIRE_SERVICES=1 (CI) an unset address is a failure.
//
// Use: #define BOOST_TEST_NO_MAIN before including Boost.Test, then
// OUTBOX_TEST_MAIN_REQUIRING(VAR).

#include <cstdlib>
#include <iostream>
#include <string>

#include <boost/test/unit_test.hpp>

namespace outbox::test {

/// The address in `var`, or an empty string.
inline std::string service_address(const char* var) {
  const char* v = std::getenv(var);
  return v ? std::string(v) : std::string();
}

inline int run_requiring(const char* var, int argc, char* argv[]) {
  if (service_address(var).empty()) {
    const char* req = std::getenv("OUTBOX_REQUIRE_SERVICES");
    const bool required = req && std::string(req) == "1";
    std::cerr << var << " is not set: " << (required ? "FAIL (OUTBOX_REQUIRE_SERVICES=1)" : "SKIP")
              << "\n";
    return required ? 1 : 77;
  }
  return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}

}  // namespace outbox::test

#define OUTBOX_TEST_MAIN_REQUIRING(var) \
  int main(int argc, char* argv[]) { return outbox::test::run_requiring(var, argc, argv); }
