// The transport conformance suite against RabbitMQ (OUTBOX_TEST_AMQP).
#define BOOST_TEST_MODULE amqp transport conformance
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <tuple>

#include "fixture.hpp"

using transport_fixtures = std::tuple<outbox::test::amqp_fixture>;

#include "../conformance/transport_conformance.hpp"

OUTBOX_TEST_MAIN_REQUIRING("OUTBOX_TEST_AMQP")
