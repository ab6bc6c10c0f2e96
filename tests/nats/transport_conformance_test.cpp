// The transport conformance suite against a real nats-server with JetStream (OUTBOX_TEST_NATS).
#define BOOST_TEST_MODULE nats transport conformance
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <tuple>

#include "fixture.hpp"

using transport_fixtures = std::tuple<outbox::test::nats_fixture>;

#include "../conformance/transport_conformance.hpp"

OUTBOX_TEST_MAIN_REQUIRING("OUTBOX_TEST_NATS")
