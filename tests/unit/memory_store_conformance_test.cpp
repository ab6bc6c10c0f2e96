// The store conformance suite against the in-memory store (core only: no database).
#define BOOST_TEST_MODULE memory store conformance
#include <boost/test/unit_test.hpp>

#include <tuple>

#include "../support/memory_store_fixture.hpp"

using store_fixtures = std::tuple<outbox::test::memory_store_fixture>;

#include "../conformance/store_conformance.hpp"
#include "../conformance/triage_conformance.hpp"
#include "../conformance/writer_transaction_conformance.hpp"
