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
#ifdef OUTBOX_TEST_WITH_AMQP
#include <boost/test/tree/traverse.hpp>
#include <boost/test/tree/visitor.hpp>

#include "../support/amqp_fixture.hpp"
#endif

using e2e_combinations = std::tuple<
    e2e::combo<outbox::test::postgresql_locking_fixture, outbox::test::memory_transport_fixture>,
    e2e::combo<outbox::test::postgresql_leasing_fixture, outbox::test::memory_transport_fixture>
#ifdef OUTBOX_TEST_WITH_ZEROMQ
    ,
    e2e::combo<outbox::test::postgresql_locking_fixture, outbox::test::zeromq_tcp_fixture>,
    e2e::combo<outbox::test::postgresql_leasing_fixture, outbox::test::zeromq_tcp_fixture>
#endif
#ifdef OUTBOX_TEST_WITH_AMQP
    ,
    e2e::combo<outbox::test::postgresql_locking_fixture, outbox::test::amqp_fixture>,
    e2e::combo<outbox::test::postgresql_leasing_fixture, outbox::test::amqp_fixture>
#endif
    >;

#include "../conformance/end_to_end.hpp"
#include "../conformance/end_to_end_bytes.hpp"

#ifdef OUTBOX_TEST_WITH_AMQP
// The PostgreSQL x amqp combos also need OUTBOX_TEST_AMQP. Unset: they are disabled (SKIP) and
// the others run; with OUTBOX_REQUIRE_SERVICES=1 an unset address is a failure.
namespace {
struct amqp_combos : boost::unit_test::test_tree_visitor {
  std::vector<boost::unit_test::test_unit_id> ids;
  void visit(const boost::unit_test::test_case& tc) override {
    if (tc.p_name.get().find("amqp_fixture") != std::string::npos) ids.push_back(tc.p_id);
  }
  using boost::unit_test::test_tree_visitor::visit;
};
bool init_without_amqp() {
  amqp_combos found;
  boost::unit_test::traverse_test_tree(boost::unit_test::framework::master_test_suite(), found,
                                       true);
  for (const auto id : found.ids)
    boost::unit_test::framework::get(id, boost::unit_test::TUT_CASE).p_default_status.value =
        boost::unit_test::test_unit::RS_DISABLED;
  return true;
}
}  // namespace

int main(int argc, char* argv[]) {
  if (outbox::test::service_address("OUTBOX_TEST_POSTGRESQL").empty() ||
      !outbox::test::service_address("OUTBOX_TEST_AMQP").empty())
    return outbox::test::run_requiring("OUTBOX_TEST_POSTGRESQL", argc, argv);
  const char* req = std::getenv("OUTBOX_REQUIRE_SERVICES");
  if (req && std::string(req) == "1") {
    std::cerr << "OUTBOX_TEST_AMQP is not set: FAIL (OUTBOX_REQUIRE_SERVICES=1)\n";
    return 1;
  }
  std::cerr << "OUTBOX_TEST_AMQP is not set: the PostgreSQL x amqp combos are skipped\n";
  return boost::unit_test::unit_test_main(&init_without_amqp, argc, argv);
}
#else
OUTBOX_TEST_MAIN_REQUIRING("OUTBOX_TEST_POSTGRESQL")
#endif
