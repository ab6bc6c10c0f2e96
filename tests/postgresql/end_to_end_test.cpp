// End-to-end: the PostgreSQL store (both claim policies) with every transport that exists.
#define BOOST_TEST_MODULE postgresql end to end
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <tuple>

#include "../support/combo.hpp"
#include "../support/memory_transport_fixture.hpp"
#include "../support/postgresql_fixture.hpp"
#ifdef OUTBOX_TEST_WITH_ZEROMQ
#include "../support/zeromq_fixture.hpp"
#endif

using e2e_combinations = std::tuple<
    e2e::combo<outbox::test::postgresql_locking_fixture, outbox::test::memory_transport_fixture>,
    e2e::combo<outbox::test::postgresql_leasing_fixture, outbox::test::memory_transport_fixture>
#ifdef OUTBOX_TEST_WITH_ZEROMQ
    ,
    e2e::combo<outbox::test::postgresql_locking_fixture, outbox::test::zeromq_tcp_fixture>,
    e2e::combo<outbox::test::postgresql_leasing_fixture, outbox::test::zeromq_tcp_fixture>
#endif
    >;

#include "../conformance/end_to_end.hpp"

OUTBOX_TEST_MAIN_REQUIRING("OUTBOX_TEST_POSTGRESQL")
