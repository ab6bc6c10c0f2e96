// End-to-end: the SQLite store with every transport that exists.
#define BOOST_TEST_MODULE sqlite end to end
#include <boost/test/unit_test.hpp>

#include <tuple>

#include "../support/combo.hpp"
#include "../support/memory_transport_fixture.hpp"
#include "../support/sqlite_fixture.hpp"

using e2e_combinations =
    std::tuple<e2e::combo<outbox::test::sqlite_fixture, outbox::test::memory_transport_fixture>>;

#include "../conformance/end_to_end.hpp"
#include "../conformance/end_to_end_bytes.hpp"
