// The transport conformance suite against the Kafka transport: the cluster at OUTBOX_TEST_KAFKA,
// or a mock cluster started in this process when it is empty or unset. One fixture of four
// partitions, where the order holds per aggregate (capability keeps_batch_order = false).
#define BOOST_TEST_MODULE kafka transport conformance
#include <boost/test/unit_test.hpp>

#include <tuple>

#include "fixture.hpp"

using transport_fixtures = std::tuple<outbox::test::kafka_partitions_fixture>;

#include "../conformance/transport_conformance.hpp"
