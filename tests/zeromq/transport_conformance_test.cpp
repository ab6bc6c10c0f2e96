// The transport conformance suite against the ZeroMQ transport, over tcp (127.0.0.1, an
// ephemeral port) and ipc (a socket in a temp dir).
#define BOOST_TEST_MODULE zeromq transport conformance
#include <boost/test/unit_test.hpp>

#include <tuple>

#include "fixture.hpp"

using transport_fixtures =
    std::tuple<outbox::test::zeromq_tcp_fixture, outbox::test::zeromq_ipc_fixture>;

#include "../conformance/transport_conformance.hpp"
