// The store conformance suite against the SQLite store.
#define BOOST_TEST_MODULE sqlite store conformance
#include <boost/test/unit_test.hpp>

#include <tuple>

#include "fixture.hpp"

using store_fixtures = std::tuple<outbox::test::sqlite_fixture>;

#include "../conformance/store_conformance.hpp"
#include "../conformance/store_kit_conformance.hpp"
#include "../conformance/triage_conformance.hpp"
#include "../conformance/writer_transaction_conformance.hpp"
