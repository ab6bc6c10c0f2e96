// End-to-end: the in-memory store with the in-memory transport (core only: no database, no
// broker).
#define BOOST_TEST_MODULE memory end to end
#include <boost/test/unit_test.hpp>

#include <tuple>

#include "../support/combo.hpp"
#include "../support/memory_store_fixture.hpp"
#include "../support/memory_transport_fixture.hpp"

using e2e_combinations = std::tuple<
    e2e::combo<outbox::test::memory_store_fixture, outbox::test::memory_transport_fixture>>;

#include "../conformance/end_to_end.hpp"
