// The store conformance suite against the PostgreSQL store, under both claim policies.
#define BOOST_TEST_MODULE postgresql store conformance
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <tuple>

#include "fixture.hpp"

using store_fixtures =
    std::tuple<outbox::test::postgresql_locking_fixture, outbox::test::postgresql_leasing_fixture>;

#include "../conformance/store_conformance.hpp"
#include "../conformance/store_kit_conformance.hpp"
#include "../conformance/triage_conformance.hpp"
#include "../conformance/writer_transaction_conformance.hpp"

OUTBOX_TEST_MAIN_REQUIRING("OUTBOX_TEST_POSTGRESQL")
