// The `outbox` tool's option parsing and slot alarm (tools/common.hpp), without a server: the
// ages and sizes its options take, what it refuses, and each reason the slot guard gives
// (`slot status --max-kept`, `relay --max-slot-kept`), including the wal_status a test server
// cannot be brought to on demand (unreserved, lost). (The per-type series of /metrics: the
// Prometheus adapter's tests/prometheus/.)
#define BOOST_TEST_MODULE outbox tool options
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "../../tools/common.hpp"

namespace {

using namespace std::chrono_literals;
using outbox_tool::parse_age;
using outbox_tool::parse_size;
using outbox_tool::slot_alarm;
using outbox_tool::usage_error;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

// A secret is hidden wherever it stands alone, and only there: a short or common password does
// not eat the letters of the words around it.
BOOST_AUTO_TEST_CASE(a_password_is_hidden_as_a_whole_not_inside_other_words) {
  using outbox_tool::redact;
  const std::string msg = "connect: could not translate host name \"db\": a connection error";
  BOOST_TEST(redact(msg, "a") ==
             "connect: could not translate host name \"db\": *** connection error");
  BOOST_TEST(redact(msg, "on") == msg);
  BOOST_TEST(redact(msg, "connection") ==
             "connect: could not translate host name \"db\": a *** error");
  // Wherever a client library could echo it: a URL's user information, key=value, quoted.
  BOOST_TEST(redact("u:hunter2@h/db password=hunter2 'hunter2',hunter2", "hunter2") ==
             "u:***@h/db password=*** '***',***");
  BOOST_TEST(redact("pw=Pw#Secret42!", "Pw#Secret42!") == "pw=***");
  BOOST_TEST(redact("x#1 #12", "#1") == "x*** #12");  // '#' takes no side, '1' does
  BOOST_TEST(redact("caf\xc3\xa9 \xc3\xa9", "\xc3\xa9") == "caf\xc3\xa9 ***");
  BOOST_TEST(redact(msg, std::vector<std::string>{"a", "", "db"}) ==
             "connect: could not translate host name \"***\": *** connection error");
}

BOOST_AUTO_TEST_CASE(ages_take_a_count_and_a_unit) {
  BOOST_TEST(parse_age("250ms", "--x").count() == 250);
  BOOST_TEST(parse_age("45s", "--x") == 45s);
  BOOST_TEST(parse_age("30m", "--x") == 30min);
  BOOST_TEST(parse_age("12h", "--x") == 12h);
  BOOST_TEST(parse_age("7d", "--x") == 7 * 24h);
  BOOST_TEST(parse_age("7D", "--x") == 7 * 24h);
  BOOST_TEST(parse_age("0s", "--x") == 0s);
  for (const char* bad : {"", "7", "-1s", "s", "1y", "1.5h", "99999999999999999999d", "36501d"})
    BOOST_CHECK_EXCEPTION(parse_age(bad, "--since"), usage_error, [&](const usage_error& e) {
      return contains(e.what(), "--since takes an age") && contains(e.what(), bad);
    });
}

BOOST_AUTO_TEST_CASE(sizes_count_by_1024_in_any_case) {
  BOOST_TEST(parse_size("1000", "--x") == 1000);
  BOOST_TEST(parse_size("1b", "--x") == 1);
  BOOST_TEST(parse_size("64kB", "--x") == 64 * 1024);
  BOOST_TEST(parse_size("512MB", "--x") == 512LL << 20);
  BOOST_TEST(parse_size("2gb", "--x") == 2LL << 30);
  BOOST_TEST(parse_size("1TB", "--x") == 1LL << 40);
  for (const char* bad : {"", "MB", "-1MB", "1.5GB", "1PB", "4194305TB", "2 GB"})
    BOOST_CHECK_EXCEPTION(parse_size(bad, "--max-kept"), usage_error, [&](const usage_error& e) {
      return contains(e.what(), "--max-kept takes a size") && contains(e.what(), bad);
    });
}

BOOST_AUTO_TEST_CASE(a_limit_is_a_size_above_0) {
  BOOST_TEST(outbox_tool::parse_limit("1", "--x") == 1);
  BOOST_CHECK_EXCEPTION(
      outbox_tool::parse_limit("0MB", "--max-kept"), usage_error,
      [](const usage_error& e) { return contains(e.what(), "--max-kept takes a size above 0"); });
}

BOOST_AUTO_TEST_CASE(the_slot_alarm_names_each_reason_and_is_quiet_otherwise) {
  // No limit: nothing to say, whatever the slot keeps or its relay is behind.
  BOOST_TEST(slot_alarm("s", "extended", 1LL << 40, 1LL << 40, 0, false).empty());
  BOOST_TEST(slot_alarm("s", "reserved", 1LL << 40, 1LL << 40, 0, true).empty());
  // A slot a relay streams from is judged by its lag: one that keeps more than the limit
  // only because the server's restart point is behind (every 15 s) is not.
  BOOST_TEST(slot_alarm("s", "reserved", 7'000'000, 0, 4'000'000, true).empty());
  BOOST_TEST(slot_alarm("s", "reserved", 7'000'000, 100, 100, true).empty());
  const auto behind = slot_alarm("s", "reserved", 7'000'000, 101, 100, true);
  BOOST_TEST(contains(behind, "slot s: its relay is 101 bytes of WAL behind, more than 100"),
             behind);
  BOOST_TEST(contains(behind, "the slot keeps 7000000"), behind);
  // One nobody streams from by all it keeps (its lag means nothing: nobody reads it).
  BOOST_TEST(slot_alarm("s", "extended", 100, 0, 100, false).empty());
  const auto idle = slot_alarm("s", "extended", 101, 0, 100, false);
  BOOST_TEST(contains(idle, "slot s keeps 101 bytes of WAL, more than 100"), idle);
  BOOST_TEST(contains(idle, "no relay streams from it"), idle);
  // WAL about to go, or gone: said with or without a limit, and before the sizes.
  for (const char* status : {"unreserved", "lost"}) {
    for (const std::int64_t limit : {std::int64_t{0}, std::int64_t{100}}) {
      for (const bool active : {true, false}) {
        const auto at_risk = slot_alarm("s", status, 101, 101, limit, active);
        BOOST_TEST(contains(at_risk, std::string("slot s: wal_status ") + status), at_risk);
        BOOST_TEST(contains(at_risk, "max_slot_wal_keep_size"), at_risk);
        BOOST_TEST(!contains(at_risk, "bytes of WAL"), at_risk);
      }
    }
  }
}
