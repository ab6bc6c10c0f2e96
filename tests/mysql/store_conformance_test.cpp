// The store conformance suite against the MySQL store (a real MariaDB or MySQL server), under
// both claim policies.
#define BOOST_TEST_MODULE mysql store conformance
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <tuple>

#include "fixture.hpp"

using store_fixtures =
    std::tuple<outbox::test::mysql_locking_fixture, outbox::test::mysql_leasing_fixture>;

#include "../conformance/store_conformance.hpp"
#include "../conformance/store_kit_conformance.hpp"
#include "../conformance/triage_conformance.hpp"
#include "../conformance/writer_transaction_conformance.hpp"

OUTBOX_TEST_MAIN_REQUIRING("OUTBOX_TEST_MYSQL")
