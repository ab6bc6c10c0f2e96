// Unit tests of the core: ids, validation, retry policy, errors, concepts.
#define BOOST_TEST_MODULE outbox core
#include <boost/test/unit_test.hpp>

#include <cctype>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <outbox/outbox.hpp>
#include <outbox/testing/faulty_transport.hpp>
#include <outbox/testing/manual_clock.hpp>
#include <outbox/testing/memory_transport.hpp>

using namespace std::chrono_literals;

// ---- concepts: deliberately incomplete types must not satisfy them -------------------------

namespace {
struct no_publish {};
struct publish_returns_bool {
  bool publish(std::span<const outbox::message>, std::chrono::steady_clock::time_point);
};
struct receiver_without_nack {
  std::optional<outbox::delivery> receive(std::chrono::milliseconds);
  void ack(const outbox::delivery&);
};
struct store_without_settle {
  outbox::claimed_batch claim(const outbox::claim_request&);
  void release(const outbox::claimed_batch&);
};
struct appending_without_session_type {
  void append(int&, std::span<const outbox::outgoing>);
};
struct steady_clock_policy {  // monotonic time cannot be stored
  std::chrono::steady_clock::time_point now() const;
};
}  // namespace

static_assert(outbox::concepts::transport<outbox::testing::memory_transport>);
static_assert(outbox::concepts::receiver<outbox::testing::memory_transport>);
static_assert(outbox::concepts::transport<
              outbox::testing::faulty_transport<outbox::testing::memory_transport>>);
static_assert(!outbox::concepts::transport<no_publish>);
static_assert(!outbox::concepts::transport<publish_returns_bool>);
static_assert(!outbox::concepts::receiver<receiver_without_nack>);
static_assert(!outbox::concepts::claiming_store<store_without_settle>);
static_assert(!outbox::concepts::appending_store<appending_without_session_type>);
static_assert(!outbox::concepts::clock<steady_clock_policy>);
static_assert(outbox::concepts::clock<outbox::testing::manual_clock>);
static_assert(outbox::concepts::retry_policy<outbox::exponential_backoff>);

// ---- uuid -------------------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(uuid_v7)

BOOST_AUTO_TEST_CASE(has_the_rfc_9562_layout_and_the_current_time) {
  const auto before = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  const auto id = outbox::make_uuid_v7();
  const auto after = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
  BOOST_TEST(id.version() == 7);
  BOOST_TEST(id.rfc_variant());
  BOOST_TEST(id.unix_ms() >= static_cast<std::uint64_t>(before));
  BOOST_TEST(id.unix_ms() <= static_cast<std::uint64_t>(after) + 1);
}

BOOST_AUTO_TEST_CASE(is_strictly_increasing_within_a_millisecond_and_across_threads) {
  outbox::uuid_v7_generator gen;
  std::vector<outbox::uuid> ids;
  for (int i = 0; i < 10'000; ++i) ids.push_back(gen.next(1'700'000'000'000));  // same ms
  for (std::size_t i = 1; i < ids.size(); ++i) BOOST_TEST_REQUIRE(ids[i - 1] < ids[i]);
  BOOST_TEST(ids.back().unix_ms() >= 1'700'000'000'000u);  // the counter borrowed milliseconds

  std::vector<std::vector<outbox::uuid>> per_thread(4);
  std::vector<std::thread> threads;
  for (auto& v : per_thread)
    threads.emplace_back([&v] { for (int i = 0; i < 5'000; ++i) v.push_back(outbox::make_uuid_v7()); });
  for (auto& t : threads) t.join();
  std::set<outbox::uuid> all;
  for (const auto& v : per_thread) {
    for (std::size_t i = 1; i < v.size(); ++i) BOOST_TEST_REQUIRE(v[i - 1] < v[i]);
    all.insert(v.begin(), v.end());
  }
  BOOST_TEST(all.size() == 20'000u);
}

BOOST_AUTO_TEST_CASE(clock_going_backwards_does_not_break_the_order) {
  outbox::uuid_v7_generator gen;
  const auto a = gen.next(2'000);
  const auto b = gen.next(1'000);
  BOOST_TEST(a < b);
  BOOST_TEST(b.unix_ms() == 2'000u);
}

BOOST_AUTO_TEST_CASE(round_trips_through_text_and_rejects_garbage) {
  const auto id = outbox::make_uuid_v7();
  const auto text = id.to_string();
  BOOST_TEST(text.size() == 36u);
  BOOST_TEST(text[14] == '7');
  BOOST_TEST(outbox::uuid::parse(text).value() == id);
  std::string upper = text;
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  BOOST_TEST(outbox::uuid::parse(upper).value() == id);
  BOOST_TEST(!outbox::uuid::parse(""));
  BOOST_TEST(!outbox::uuid::parse(text.substr(1)));
  BOOST_TEST(!outbox::uuid::parse("0189e0b2-7c5a-7def-8abc-0123456789zz"));
  BOOST_TEST(!outbox::uuid::parse("0189e0b2x7c5a-7def-8abc-0123456789ab"));
  BOOST_TEST(outbox::uuid::parse("0189e0b2-7c5a-7def-8abc-0123456789ab")->unix_ms() ==
             0x0189e0b27c5aULL);
}

BOOST_AUTO_TEST_SUITE_END()

// ---- validation --------------------------------------------------------------------------------

namespace {
outbox::event good() { return {"order", "42", "order_placed", R"({"total":1})", {{"k", "v"}}}; }

std::string refused_field(const outbox::event& e, const outbox::validation_limits& l = {}) {
  try {
    outbox::validate(e, l);
  } catch (const outbox::error& err) {
    BOOST_TEST((err.kind() == outbox::errc::invalid_input));
    BOOST_TEST((err.code() == outbox::errc::invalid_input));
    return err.field();
  }
  return "";
}
}  // namespace

BOOST_AUTO_TEST_SUITE(validation)

BOOST_AUTO_TEST_CASE(accepts_a_well_formed_event) { BOOST_TEST(refused_field(good()).empty()); }

BOOST_AUTO_TEST_CASE(refuses_empty_or_oversized_names_naming_the_field) {
  auto e = good();
  e.aggregate_type.clear();
  BOOST_TEST(refused_field(e) == "aggregate_type");
  e = good();
  e.aggregate_id = std::string(256, 'x');
  BOOST_TEST(refused_field(e) == "aggregate_id");
  e = good();
  e.event_type = "";
  BOOST_TEST(refused_field(e) == "event_type");
  e = good();
  e.aggregate_id = std::string(255, 'x');
  BOOST_TEST(refused_field(e).empty());
  e.event_type = "bad\xff";
  BOOST_TEST(refused_field(e) == "event_type");
  e = good();
  e.aggregate_type = std::string("ord\0er", 6);
  BOOST_TEST(refused_field(e) == "aggregate_type");
}

BOOST_AUTO_TEST_CASE(refuses_invalid_json_and_payloads_over_the_limit) {
  for (const char* bad : {"", "{", "{\"a\":}", "not json", "{\"a\":1} trailing", "{'a':1}",
                          "{\"s\":\"\xc3\x28\"}"}) {
    auto e = good();
    e.payload = bad;
    BOOST_TEST(refused_field(e) == "payload", "payload " << bad);
  }
  auto e = good();
  e.payload = "\"" + std::string(100, 'x') + "\"";
  BOOST_TEST(refused_field(e, {.max_payload_bytes = 50}) == "payload");
  BOOST_TEST(refused_field(e, {.max_payload_bytes = 102}).empty());
  e.payload = "[1, 2, {\"nested\": null}, \"caf\xc3\xa9\"]";
  BOOST_TEST(refused_field(e).empty());
  e.payload = R"({"s":"a\u0000b"})";  // valid JSON, not storable
  BOOST_TEST(refused_field(e) == "payload");
  e.payload = R"({"k":[{"a\u0000":1}]})";
  BOOST_TEST(refused_field(e) == "payload");
  e.payload = R"({"s":"\\u0000 is only text here"})";  // an escaped backslash, then text
  BOOST_TEST(refused_field(e).empty());
}

BOOST_AUTO_TEST_CASE(refuses_headers_that_are_not_utf8_or_too_large) {
  auto e = good();
  e.headers = {{"ok", "caf\xc3\xa9"}};
  BOOST_TEST(refused_field(e).empty());
  e.headers = {{"bad\xc0\xaf", "v"}};  // overlong encoding of '/'
  BOOST_TEST(refused_field(e) == "headers");
  e.headers = {{"k", "\xed\xa0\x80"}};  // UTF-16 surrogate
  BOOST_TEST(refused_field(e) == "headers");
  e.headers = {{"", "v"}};
  BOOST_TEST(refused_field(e) == "headers");
  e.headers = {{"k", std::string(100, 'v')}};
  BOOST_TEST(refused_field(e, {.max_header_bytes = 50}) == "headers");
}

BOOST_AUTO_TEST_CASE(utf8_checker_follows_the_standard) {
  BOOST_TEST(outbox::is_valid_utf8(""));
  BOOST_TEST(outbox::is_valid_utf8("plain ascii"));
  BOOST_TEST(outbox::is_valid_utf8("\xf0\x9f\x98\x80"));   // U+1F600
  BOOST_TEST(outbox::is_valid_utf8("\xf4\x8f\xbf\xbf"));   // U+10FFFF
  BOOST_TEST(!outbox::is_valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  BOOST_TEST(!outbox::is_valid_utf8("\xe0\x80\xaf"));      // overlong
  BOOST_TEST(!outbox::is_valid_utf8("\xc3"));              // truncated
  BOOST_TEST(!outbox::is_valid_utf8("\x80"));              // lone continuation
}

BOOST_AUTO_TEST_CASE(sanitize_text_makes_any_bytes_storable) {
  BOOST_TEST(outbox::sanitize_text("plain") == "plain");
  BOOST_TEST(outbox::sanitize_text("caf\xc3\xa9") == "caf\xc3\xa9");
  BOOST_TEST(outbox::sanitize_text(std::string("a\0b", 3)) == "ab");
  BOOST_TEST(outbox::sanitize_text("bad\xff!") == "bad\xef\xbf\xbd!");
  BOOST_TEST(outbox::sanitize_text("cut\xc3") == "cut\xef\xbf\xbd");
  BOOST_TEST(outbox::is_valid_utf8(outbox::sanitize_text("\xed\xa0\x80\xc0\xaf")));
  BOOST_TEST(outbox::sanitize_text(std::string(5000, 'x')).size() == 2048u);
  BOOST_TEST(outbox::sanitize_text("\xc3\xa9\xc3\xa9", 3) == "\xc3\xa9");  // on a boundary
}

BOOST_AUTO_TEST_CASE(headers_round_trip_through_json) {
  const outbox::header_map h{{"a", "1"}, {"quote", "\"'\\"}, {"u", "caf\xc3\xa9"}};
  BOOST_TEST((outbox::headers_from_json(outbox::headers_to_json(h)) == h));
  BOOST_TEST(outbox::headers_to_json({}) == "{}");
  BOOST_CHECK_THROW(outbox::headers_from_json("[1]"), outbox::error);
}

BOOST_AUTO_TEST_SUITE_END()

// ---- retry policy ------------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(retry)

BOOST_AUTO_TEST_CASE(backoff_grows_exponentially_up_to_the_cap) {
  outbox::exponential_backoff b{.initial = 100ms, .multiplier = 2.0, .max_delay = 1s, .jitter = 0,
                                .max_attempts = 5};
  std::mt19937_64 rng(1);
  BOOST_TEST(b.delay(1, rng).count() == 100);
  BOOST_TEST(b.delay(2, rng).count() == 200);
  BOOST_TEST(b.delay(4, rng).count() == 800);
  BOOST_TEST(b.delay(5, rng).count() == 1000);
  BOOST_TEST(b.delay(60, rng).count() == 1000);
  BOOST_TEST(!b.exhausted(4));
  BOOST_TEST(b.exhausted(5));
}

BOOST_AUTO_TEST_CASE(jitter_spreads_delays_below_the_nominal_value) {
  outbox::exponential_backoff b{.initial = 1000ms, .jitter = 0.5};
  std::mt19937_64 rng(7);
  std::set<long> seen;
  for (int i = 0; i < 100; ++i) {
    const auto d = b.delay(1, rng).count();
    BOOST_TEST_REQUIRE(d <= 1000);
    BOOST_TEST_REQUIRE(d >= 500);
    seen.insert(d);
  }
  BOOST_TEST(seen.size() > 10u);
}

BOOST_AUTO_TEST_SUITE_END()

// ---- errors and options ------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(errors)

BOOST_AUTO_TEST_CASE(error_carries_class_adapter_and_native_code) {
  const outbox::error e(outbox::errc::transient, "sqlite", "5 database is locked", "claim");
  BOOST_TEST((e.kind() == outbox::errc::transient));
  BOOST_TEST(e.adapter() == "sqlite");
  BOOST_TEST(e.native_code() == "5 database is locked");
  BOOST_TEST(std::string(e.what()).find("sqlite [5 database is locked]: claim") == 0u);
  BOOST_TEST(e.code().category().name() == std::string("outbox"));
  const std::system_error& base = e;
  BOOST_TEST((base.code() == outbox::errc::transient));
}

BOOST_AUTO_TEST_CASE(relay_refuses_contradictory_options) {
  struct nothing_store {
    outbox::claimed_batch claim(const outbox::claim_request&) { return {}; }
    outbox::settle_result settle(const outbox::claimed_batch&, std::span<const outbox::settlement>) { return {}; }
    void release(const outbox::claimed_batch&) {}
  } st;
  outbox::testing::memory_transport t;
  using relay = outbox::relay<nothing_store, outbox::testing::memory_transport>;
  BOOST_CHECK_THROW(relay(st, t, {.batch_size = 0}), outbox::error);
  BOOST_CHECK_THROW(relay(st, t, {.lease = 5s, .publish_timeout = 10s}), outbox::error);
  relay ok(st, t, {});
  BOOST_TEST(ok.options().owner.rfind("relay-", 0) == 0u);
  BOOST_TEST(ok.run_once() == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
