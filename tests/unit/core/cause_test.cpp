// The core's tests (test_core, module in ../core_test.cpp): the cause key of dead letters
// (outbox/cause.hpp), and the relay's fates that set it.
#include <boost/test/unit_test.hpp>

#include <random>
#include <string>
#include <vector>

#include <outbox/outbox.hpp>

BOOST_AUTO_TEST_SUITE(cause_keys)

BOOST_AUTO_TEST_CASE(ids_numbers_uuids_and_quoted_values_are_stripped) {
  // Two dead letters of one cause (a missing binding) differ by the event id and the names.
  const auto a =
      outbox::cause_key("permanent",
                        "NO_ROUTE 312: no binding for exchange 'orders' key \"eu.placed\" (event "
                        "0190a3b2-7c1d-7e8f-9a0b-1c2d3e4f5a6b, attempt 3)");
  const auto b =
      outbox::cause_key("permanent",
                        "NO_ROUTE 312: no binding for exchange 'billing' key \"us.paid\" (event "
                        "0190a3b2-0000-7e8f-9a0b-ffffffffffff, attempt 17)");
  BOOST_TEST(a == b);
  BOOST_TEST(a ==
             "permanent: NO_ROUTE #: no binding for exchange '?' key '?' (event #, attempt #)");
  // An address and a port, an offset with a sign: each one word with a digit.
  BOOST_TEST(outbox::normalise_error("connect to 10.0.0.1:5672 failed at offset -42") ==
             "connect to #:# failed at offset #");
}

BOOST_AUTO_TEST_CASE(the_class_and_the_words_without_digits_keep_causes_apart) {
  BOOST_TEST(outbox::cause_key("permanent", "topic 'x' refused") !=
             outbox::cause_key("transient", "topic 'x' refused"));
  BOOST_TEST(outbox::cause_key("permanent", "Unknown topic 'x'") !=
             outbox::cause_key("permanent", "Message too large 'x'"));
  BOOST_TEST(outbox::cause_class(outbox::errc::permanent) == "permanent");
}

BOOST_AUTO_TEST_CASE(white_space_is_collapsed_an_open_quote_kept_and_the_key_bounded) {
  BOOST_TEST(outbox::normalise_error("  a\t\tb\n c  ") == "a b c");
  BOOST_TEST(outbox::normalise_error("it's broken") == "it's broken");  // no closing quote
  BOOST_TEST(outbox::normalise_error("v1.2.3.") == "#.");
  std::string long_text;
  for (int i = 0; i < 100; ++i) long_text += "word \xc3\xa9 ";
  const auto key = outbox::cause_key("permanent", long_text);
  BOOST_TEST(key.size() <= outbox::cause_key_max);
  BOOST_TEST(outbox::is_valid_utf8(key));  // never cut inside a character
}

BOOST_AUTO_TEST_CASE(the_relay_keys_a_permanent_failure_and_a_spent_retry_by_their_class) {
  std::vector<outbox::message> wave(2);
  wave[0].id = outbox::make_uuid_v7();
  wave[1].id = outbox::make_uuid_v7();
  wave[1].attempts = 100;
  const std::vector<outbox::publish_result> results{
      {wave[0].id, false, outbox::errc::permanent, "no route to 'a' (312)"},
      {wave[1].id, false, outbox::errc::transient, "timeout after 30 s"}};
  std::vector<outbox::settlement> fates(2);
  std::mt19937_64 rng;
  outbox::fates::decide(wave, results, fates, outbox::exponential_backoff{}, rng, {});
  BOOST_TEST(fates[0].cause == "permanent: no route to '?' (#)");
  BOOST_TEST(fates[1].cause == "transient: timeout after # s");
}

BOOST_AUTO_TEST_SUITE_END()
