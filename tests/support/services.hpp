#pragma once
// Tests that need a server read its address from the environment variable its fixture names
// (OUTBOX_TEST_<SERVER>, e.g. OUTBOX_TEST_POSTGRESQL; its adapter's record has it as 'server_env').
// Unset: the test executable exits 77, which Meson reports as SKIP; with
// OUTBOX_REQUIRE_SERVICES=1 (CI) an unset address is a failure.
//
// Two ways to say it:
//  - a whole executable needs one address: #define BOOST_TEST_NO_MAIN before including
//    Boost.Test, then OUTBOX_TEST_MAIN_REQUIRING(VAR);
//  - fixtures say what they need (`static constexpr service_need service`), and suites over
//    them carry the precondition `services_of<Fixtures...>`: a suite whose fixtures lack an
//    address is skipped, and OUTBOX_TEST_MAIN() turns "skipped for a missing address" into
//    exit 77 (or 1 under OUTBOX_REQUIRE_SERVICES=1). The end-to-end matrix works this way.
//
// The address convention: an unset or empty variable means "no server", except for a fixture
// that can start its server in-process (`in_process`, e.g. a Kafka mock cluster): for it, empty
// means "start one here", and its cases always run.

#include <cstdlib>
#include <iostream>
#include <string>

#include <boost/test/unit_test.hpp>

namespace outbox::test {

/// What a test fixture needs from its surroundings: the server whose address is in the
/// environment variable `env` (nullptr: none), and whether an empty address means "start one
/// in-process" (the fixture does it).
struct service_need {
  const char* env = nullptr;
  bool in_process = false;
};

/// The address in `var`, or an empty string.
inline std::string service_address(const char* var) {
  const char* v = std::getenv(var);
  return v ? std::string(v) : std::string();
}

/// True when OUTBOX_REQUIRE_SERVICES=1: a missing address is a failure, not a skip.
inline bool services_required() {
  const char* req = std::getenv("OUTBOX_REQUIRE_SERVICES");
  return req && std::string(req) == "1";
}

inline int run_requiring(const char* var, int argc, char* argv[]) {
  if (service_address(var).empty()) {
    const bool required = services_required();
    std::cerr << var << " is not set: " << (required ? "FAIL (OUTBOX_REQUIRE_SERVICES=1)" : "SKIP")
              << "\n";
    return required ? 1 : 77;
  }
  return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}

/// True when `need` can be met here: nothing is needed, its address is set, or an empty one
/// means "start in-process".
inline bool available(service_need need) {
  return need.env == nullptr || need.in_process || !service_address(need.env).empty();
}

namespace detail {
/// The variables whose absence skipped a suite (read by run_tests; Boost.Test evaluates
/// preconditions on the main thread).
inline std::string missing_services;
}  // namespace detail

/// A Boost.Test precondition (`* boost::unit_test::precondition(services_of<F...>)`): every
/// fixture's service is available. When one is not, the suite is skipped with the variable
/// named, and the executable's exit code says so (run_tests).
template <class... Fixtures>
boost::test_tools::assertion_result services_of(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result ok(true);
  for (const service_need need : {Fixtures::service...}) {
    if (available(need)) continue;
    if (detail::missing_services.find(need.env) == std::string::npos)
      detail::missing_services +=
          (detail::missing_services.empty() ? "" : ", ") + std::string(need.env);
    ok = false;
    ok.message() << need.env << " is not set";
  }
  return ok;
}

/// Runs the tests; a run in which a suite was skipped for a missing address (and nothing
/// failed) exits 77, which Meson reports as SKIP, or 1 under OUTBOX_REQUIRE_SERVICES=1.
inline int run_tests(int argc, char* argv[]) {
  const int rc = boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
  if (detail::missing_services.empty()) return rc;
  if (services_required()) {
    std::cerr << detail::missing_services << " not set: FAIL (OUTBOX_REQUIRE_SERVICES=1)\n";
    return 1;
  }
  std::cerr << detail::missing_services << " not set: the suites needing it were skipped (SKIP)\n";
  return rc == 0 ? 77 : rc;
}

}  // namespace outbox::test

/// main() for an executable whose suites carry services_of preconditions.
#define OUTBOX_TEST_MAIN() \
  int main(int argc, char* argv[]) { return outbox::test::run_tests(argc, argv); }

#define OUTBOX_TEST_MAIN_REQUIRING(var) \
  int main(int argc, char* argv[]) { return outbox::test::run_requiring(var, argc, argv); }
