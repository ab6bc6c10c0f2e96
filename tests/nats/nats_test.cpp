// The NATS JetStream transport's own tests against a real nats-server (OUTBOX_TEST_NATS).
#define BOOST_TEST_MODULE nats specific
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include "fixture.hpp"

OUTBOX_TEST_MAIN_REQUIRING("OUTBOX_TEST_NATS")
