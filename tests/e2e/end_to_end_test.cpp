// The end-to-end matrix, one cell: this file is compiled once per store x transport pair the
// build found (tests/meson.build: each its own test, e2e_<store>_<transport>). The build names
// the pair's fixture headers and fixture lists (tests/support/<name>_fixture.hpp defines
// outbox::test::<name>_fixtures); every store fixture of the list meets every transport fixture
// of the other. A pair whose server address is missing skips its cases (exit 77: SKIP), or
// fails under OUTBOX_REQUIRE_SERVICES=1.
#define BOOST_TEST_MODULE end to end
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include OUTBOX_E2E_STORE_HEADER
#include OUTBOX_E2E_TRANSPORT_HEADER
#include "../support/combo.hpp"
#include "../support/services.hpp"

using e2e_combinations = e2e::pairs_t<OUTBOX_E2E_STORE_FIXTURES, OUTBOX_E2E_TRANSPORT_FIXTURES>;

#include "../conformance/end_to_end.hpp"
#include "../conformance/end_to_end_bytes.hpp"

OUTBOX_TEST_MAIN()
