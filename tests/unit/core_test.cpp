// Unit tests of the core: ids, validation, retry policy, errors, concepts.
#define BOOST_TEST_MODULE outbox core
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <cctype>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <outbox/outbox.hpp>
#include <outbox/store/options.hpp>
#include <outbox/store/statements.hpp>
#include <outbox/testing/duplicating_receiver.hpp>
#include <outbox/testing/faulty_transport.hpp>
#include <outbox/testing/manual_clock.hpp>
#include <outbox/testing/memory_transport.hpp>

#include "../support/errors.hpp"

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
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const auto id = outbox::make_uuid_v7();
  const auto after = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  BOOST_TEST(id.version() == 7);
  BOOST_TEST(id.rfc_variant());
  BOOST_TEST(id.unix_ms() >= static_cast<std::uint64_t>(before));
  BOOST_TEST(id.unix_ms() <= static_cast<std::uint64_t>(after) + 1);
}

BOOST_AUTO_TEST_CASE(is_strictly_increasing_within_a_millisecond_and_across_threads) {
  outbox::uuid_v7_generator gen;
  std::vector<outbox::uuid> ids;
  ids.reserve(10'000);
  for (int i = 0; i < 10'000; ++i) ids.push_back(gen.next(1'700'000'000'000));  // same ms
  for (std::size_t i = 1; i < ids.size(); ++i) BOOST_TEST_REQUIRE(ids[i - 1] < ids[i]);
  BOOST_TEST(ids.back().unix_ms() >= 1'700'000'000'000u);  // the counter borrowed milliseconds

  std::vector<std::vector<outbox::uuid>> per_thread(4);
  std::vector<std::thread> threads;
  threads.reserve(per_thread.size());
  for (auto& v : per_thread)
    threads.emplace_back([&v] {
      v.reserve(5'000);
      for (int i = 0; i < 5'000; ++i) v.push_back(outbox::make_uuid_v7());
    });
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
  for (const char* bad :
       {"", "{", "{\"a\":}", "not json", "{\"a\":1} trailing", "{'a':1}", "{\"s\":\"\xc3\x28\"}"}) {
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

BOOST_AUTO_TEST_CASE(a_payload_of_another_content_type_is_bytes_and_the_type_is_checked) {
  auto e = good();
  BOOST_TEST(e.content_type == "application/json");
  e.content_type = "application/avro";
  e.payload = std::string("\0\x01\xff not json \xc3\x28", 15);
  BOOST_TEST(refused_field(e).empty());  // opaque bytes, NUL and invalid UTF-8 included
  e.payload = std::string(60, '\xff');
  BOOST_TEST(refused_field(e, {.max_payload_bytes = 50}) == "payload");  // the size still counts
  e = good();
  e.payload = "not json";
  for (const char* json_type :
       {"application/json", "Application/JSON; charset=utf-8", "application/cloudevents+json"}) {
    e.content_type = json_type;
    BOOST_TEST(refused_field(e) == "payload", json_type);
    BOOST_TEST(outbox::is_json_content_type(json_type));
  }
  for (const char* other : {"application/avro", "application/x-protobuf", "text/plain",
                            "application/jsonx", "application/json-seq"})
    BOOST_TEST(!outbox::is_json_content_type(other), other);
  for (const std::string& bad :
       {std::string(), std::string("json"), std::string("/json"), std::string("application/"),
        std::string("a/b\n"), std::string("caf\xc3\xa9/x"), std::string(256, 'a') + "/b"}) {
    e = good();
    e.content_type = bad;
    BOOST_TEST(refused_field(e) == "content_type", bad);
  }
  outbox::message m;
  m.id = outbox::make_uuid_v7();
  m.aggregate_type = m.aggregate_id = m.event_type = "x";
  m.payload = std::string("\0\xff", 2);
  m.content_type = "application/octet-stream";
  BOOST_TEST(outbox::unpublishable_reason(m).empty());
  m.content_type = "application/json";
  BOOST_TEST(!outbox::unpublishable_reason(m).empty());
  m.content_type = "";
  BOOST_TEST(outbox::unpublishable_reason(m).find("content_type") != std::string::npos);
  m.content_type = "application/x;\tq=1";  // a tab between parameters is a media type
  BOOST_TEST(outbox::unpublishable_reason(m).empty());
  m.aggregate_id = std::string("a\0b", 3);  // another program's row: a NUL in a name
  BOOST_TEST(outbox::unpublishable_reason(m).find("NUL") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(refuses_a_payload_nested_past_the_depth_limit_without_recursing) {
  // 30,000 levels in 60 KB, well under the size limit: the old NUL check recursed once per
  // level and overflowed the stack (SIGSEGV inside enqueue).
  auto e = good();
  constexpr int deep = 30'000;
  e.payload = std::string(deep, '[') + R"("\u0000")" + std::string(deep, ']');
  BOOST_TEST(refused_field(e) == "payload");
  e.payload = std::string(deep, '[') + std::string(deep, ']');
  BOOST_TEST(refused_field(e) == "payload");
  // The limit is exact and configurable; objects count like arrays.
  const outbox::validation_limits limits{.max_json_depth = 5};
  e.payload = std::string(5, '[') + std::string(5, ']');
  BOOST_TEST(refused_field(e, limits).empty());
  e.payload = std::string(6, '[') + std::string(6, ']');
  BOOST_TEST(refused_field(e, limits) == "payload");
  e.payload = R"({"a":{"b":{"c":{"d":{"e":1}}}}})";
  BOOST_TEST(refused_field(e, limits).empty());
  e.payload = R"({"a":{"b":{"c":{"d":{"e":[1]}}}}})";
  BOOST_TEST(refused_field(e, limits) == "payload");
  // The default (100, what MySQL's JSON type takes) accepts 100 levels and refuses 101.
  e.payload = std::string(100, '[') + std::string(100, ']');
  BOOST_TEST(refused_field(e).empty());
  e.payload = std::string(101, '[') + std::string(101, ']');
  BOOST_TEST(refused_field(e) == "payload");
  try {
    outbox::validate(e);
  } catch (const outbox::error& err) {
    BOOST_TEST(std::string(err.what()).find("max_json_depth") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(refuses_a_nul_byte_anywhere_in_the_payload) {
  // nlohmann's parser stops at a NUL byte as if the input ended there: {"a":1}\0garbage was
  // accepted, then stored and published as bytes that are not JSON (or cut at the NUL).
  auto e = good();
  for (const std::string& bad :
       {std::string("{\"a\":1}\0garbage", 15), std::string("{\"a\":1}\0", 8),
        std::string("\0{\"a\":1}", 8), std::string("{\"s\":\"a\0b\"}", 11)}) {
    e.payload = bad;
    BOOST_TEST(refused_field(e) == "payload", "payload of " << bad.size() << " bytes");
  }
  e.payload =
      "\xEF\xBB\xBF{\"a\":1}";  // a byte order mark: nlohmann skipped it, PostgreSQL refused
  BOOST_TEST(refused_field(e) == "payload");
  e.payload = "{\"a\":1}  \n";  // trailing white space is JSON
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
  // The relay's predecessor stamp is reserved: an event carrying it would be held back by
  // consumers waiting for a predecessor that never comes.
  e.headers = {{std::string(outbox::predecessor_header), outbox::make_uuid_v7().to_string()}};
  BOOST_TEST(refused_field(e) == "headers");
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

BOOST_AUTO_TEST_CASE(headers_that_are_not_utf8_render_without_throwing) {
  // The dead-letter path renders headers a peer sent (AMQP header values may be bytes): it
  // must not fail on what it keeps.
  const outbox::header_map h{{"ok", "v"}, {"bad", "caf\xe9 \xff"}, {"k\xc0", "x"}};
  std::string text;
  BOOST_CHECK_NO_THROW(text = outbox::headers_to_json(h));
  BOOST_TEST(outbox::is_valid_utf8(text));
  const auto back = outbox::headers_from_json(text);
  BOOST_TEST(back.at("ok") == "v");
  BOOST_TEST(back.size() == 3u);
}

BOOST_AUTO_TEST_CASE(headers_round_trip_through_json) {
  const outbox::header_map h{{"a", "1"}, {"quote", "\"'\\"}, {"u", "caf\xc3\xa9"}};
  BOOST_TEST((outbox::headers_from_json(outbox::headers_to_json(h)) == h));
  BOOST_TEST(outbox::headers_to_json({}) == "{}");
  BOOST_CHECK_THROW((void)outbox::headers_from_json("[1]"), outbox::error);
}

BOOST_AUTO_TEST_SUITE_END()

// ---- retry policy ------------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(statements)

BOOST_AUTO_TEST_CASE(a_multi_row_insert_repeats_the_tuple_and_keeps_what_follows_it_once) {
  const std::string one =
      "INSERT INTO t (a, b) VALUES ($1, coalesce($2, '(-infinity)')) ON CONFLICT (a) DO NOTHING";
  BOOST_TEST(outbox::store::multi_row_insert(one, 2, 2) ==
             "INSERT INTO t (a, b) VALUES ($1, coalesce($2, '(-infinity)')),"
             "($3, coalesce($4, '(-infinity)')) ON CONFLICT (a) DO NOTHING");
  BOOST_TEST(outbox::store::multi_row_insert("INSERT INTO t VALUES (?, ?)", 3, 2) ==
             "INSERT INTO t VALUES (?, ?),(?, ?),(?, ?)");
  BOOST_CHECK_THROW((void)outbox::store::multi_row_insert("INSERT INTO t VALUES ($1", 2, 1),
                    outbox::error);
  BOOST_CHECK_THROW((void)outbox::store::multi_row_insert("SELECT 1", 2, 1), outbox::error);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(retry)

BOOST_AUTO_TEST_CASE(backoff_grows_exponentially_up_to_the_cap) {
  outbox::exponential_backoff b{
      .initial = 100ms, .multiplier = 2.0, .max_delay = 1s, .jitter = 0, .max_attempts = 5};
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
    outbox::settle_result settle(const outbox::claimed_batch&, std::span<const outbox::settlement>,
                                 outbox::time_point) {
      return {};
    }
    void release(const outbox::claimed_batch&) {}
  } st;
  outbox::testing::memory_transport t;
  using relay = outbox::relay<nothing_store, outbox::testing::memory_transport>;
  BOOST_CHECK_THROW(relay(st, t, {.batch_size = 0}), outbox::error);
  // A batch is held in memory: 2^40 used to be reserved up front (std::bad_alloc out of run).
  try {
    const relay accepted(st, t, {.batch_size = std::size_t{1} << 40});
    BOOST_ERROR("a batch of 2^40 was accepted");
  } catch (const outbox::error& e) {
    BOOST_TEST((e.kind() == outbox::errc::misconfigured));
  }
  BOOST_CHECK_NO_THROW(relay(st, t, {.batch_size = outbox::relay_options::max_batch_size}));
  BOOST_CHECK_THROW(relay(st, t, {.lease = 5s, .publish_timeout = 10s}), outbox::error);
  relay ok(st, t, {});
  BOOST_TEST(ok.options().owner.rfind("relay-", 0) == 0u);
  BOOST_TEST(ok.run_once() == 0u);
}

namespace {
/// A store whose claim holds a transaction that the server ends once idle for
/// `idle_in_transaction_timeout` (locking), or holds none (leasing), as MySQL's and
/// PostgreSQL's do; a locking one claims one batch at a time on its session.
struct idle_limited_store {
  outbox::store_options options_;
  [[nodiscard]] const outbox::store_options& options() const { return options_; }
  [[nodiscard]] static std::optional<std::chrono::milliseconds> claim_idle_limit(
      const outbox::store_options& o) noexcept {
    if (o.policy == outbox::claim_policy::leasing) return std::nullopt;
    return o.idle_in_transaction_timeout;
  }
  [[nodiscard]] bool claims_overlap() const {
    return options_.policy == outbox::claim_policy::leasing;
  }
  outbox::claimed_batch claim(const outbox::claim_request&) { return {}; }
  outbox::settle_result settle(const outbox::claimed_batch&, std::span<const outbox::settlement>,
                               outbox::time_point) {
    return {};
  }
  void release(const outbox::claimed_batch&) {}
};
static_assert(outbox::concepts::idle_limited_claims_store<idle_limited_store>);
/// Its `options()` is not a store's options.
struct other_options_store : idle_limited_store {
  [[nodiscard]] int options() const { return 0; }
};
static_assert(!outbox::concepts::idle_limited_claims_store<other_options_store>);
}  // namespace

// A locking claim holds its transaction through its publish (pipelined, through the publish
// of the batch before it too); the server ends a transaction idle longer than the store's
// idle-in-transaction timeout (60 s by default), the settle then finds it gone and the batch
// is published again (MySQL, --publish-timeout 35s pipelined and a broker stalled 64 s). A
// relay that could hold a claim that long is refused.
BOOST_AUTO_TEST_CASE(relay_refuses_a_claim_that_can_outlast_the_stores_idle_limit) {
  outbox::testing::memory_transport t;
  using relay = outbox::relay<idle_limited_store, outbox::testing::memory_transport>;
  idle_limited_store locking{{.policy = outbox::claim_policy::locking}};
  idle_limited_store second{{.policy = outbox::claim_policy::locking}};
  idle_limited_store leasing{{.policy = outbox::claim_policy::leasing}};
  const auto refused = [&](auto make) {
    const auto e = outbox::test::error_of(make);
    if (e) {
      BOOST_TEST((e->kind() == outbox::errc::misconfigured), e->what());
      const std::string what = e->what();
      BOOST_TEST(what.find("publish_timeout") != std::string::npos, what);
      BOOST_TEST(what.find("idle_in_transaction_timeout, 60000 ms") != std::string::npos, what);
    }
    return e.has_value();
  };
  // One batch at a time: the publish timeout and a tenth of it, at most 1 s.
  BOOST_TEST(!refused([&] { relay r(locking, t, {.lease = 80s, .publish_timeout = 59s}); }));
  BOOST_TEST(refused([&] { relay r(locking, t, {.lease = 80s, .publish_timeout = 59'001ms}); }));
  BOOST_TEST(refused([&] { relay r(locking, t, {.lease = 80s, .publish_timeout = 70s}); }));
  // Pipelined on two sessions: twice the publish timeout and 5 s.
  BOOST_TEST(
      !refused([&] { relay r(locking, second, t, {.lease = 80s, .publish_timeout = 27'500ms}); }));
  BOOST_TEST(refused([&] { relay r(locking, second, t, {.lease = 80s, .publish_timeout = 35s}); }));
  BOOST_TEST(refused([&] { relay r(second, locking, t, {.lease = 80s, .publish_timeout = 35s}); }));
  BOOST_TEST(!refused([&] {  // not pipelined (pipeline off, or a lease too short for it)
    relay r(locking, second, t, {.lease = 80s, .publish_timeout = 35s, .pipeline = false});
  }));
  BOOST_TEST(
      !refused([&] { relay r(locking, second, t, {.lease = 70s, .publish_timeout = 35s}); }));
  // A longer idle limit; a leasing claim holds no transaction.
  idle_limited_store patient{
      {.policy = outbox::claim_policy::locking, .idle_in_transaction_timeout = 80s}};
  BOOST_TEST(!refused([&] { relay r(patient, t, {.lease = 80s, .publish_timeout = 70s}); }));
  BOOST_TEST(!refused([&] { relay r(leasing, t, {.lease = 200s, .publish_timeout = 70s}); }));
  BOOST_TEST(relay::longest_claim_hold({.publish_timeout = 10s}, false) == 11s);
  BOOST_TEST(relay::longest_claim_hold({.publish_timeout = 2s}, false) == 2'200ms);
  BOOST_TEST(relay::longest_claim_hold({.publish_timeout = 10s}, true) == 25s);
}

BOOST_AUTO_TEST_SUITE_END()

// ---- long-running loops: what they back off from, what stops them -----------------------------

namespace {
/// An inbox store whose `begin` fails as `transient` the first `failures` times.
struct flaky_inbox {
  using session_type = int;
  struct transaction {
    void commit() {}
  };
  int session_ = 0;
  int failures = 0;
  int dead = 0;
  session_type& session() { return session_; }
  transaction begin() {
    if (failures > 0) {
      --failures;
      throw outbox::error(outbox::errc::transient, "test", {}, "database is busy");
    }
    return {};
  }
  bool record_delivery(std::string_view, const outbox::uuid&, outbox::time_point) { return true; }
  void dead_letter_delivery(std::string_view, const outbox::message&, std::string_view,
                            outbox::time_point) {
    ++dead;
  }
};

/// A database client's own exception type, and a store that knows it.
struct deadlock_detected : std::runtime_error {
  deadlock_detected() : std::runtime_error("deadlock detected") {}
};
struct classifying_inbox : flaky_inbox {
  std::optional<outbox::errc> classify(const std::exception& e) const {
    if (dynamic_cast<const deadlock_detected*>(&e)) return outbox::errc::transient;
    return std::nullopt;
  }
};
static_assert(outbox::concepts::classifying_store<classifying_inbox>);
static_assert(!outbox::concepts::classifying_store<flaky_inbox>);

/// An inbox that keeps names of at most 8 characters (MySQL's kind of limit, made small), and
/// one whose limit has no unit (a bare number is not a `name_limit`).
struct short_names_inbox : flaky_inbox {
  static constexpr outbox::name_limit consumer_name_limit{8, true};
};
struct bare_limit_inbox : flaky_inbox {
  static constexpr std::size_t consumer_name_limit = 8;
};
static_assert(outbox::concepts::consumer_name_limited_store<short_names_inbox>);
static_assert(!outbox::concepts::consumer_name_limited_store<bare_limit_inbox>);
static_assert(!outbox::concepts::consumer_name_limited_store<flaky_inbox>);

/// A retry policy that records which delays were asked for, and waits for none.
struct recording_retry {
  std::vector<int>* asked;
  int max_attempts = 3;
  template <class Rng>
  std::chrono::milliseconds delay(int attempt, Rng&) const {
    asked->push_back(attempt);
    return 0ms;
  }
  bool exhausted(int attempt) const noexcept { return attempt >= max_attempts; }
};

/// A receiver whose `receive` throws `kind` a number of times, then asks `stop` to stop.
struct failing_receiver {
  outbox::errc kind;
  int failures;
  std::stop_source* stop;
  std::optional<outbox::delivery> receive(std::chrono::milliseconds) {
    if (failures-- > 0) throw outbox::error(kind, "test", {}, "receive failed");
    stop->request_stop();
    return std::nullopt;
  }
  void ack(const outbox::delivery&) {}
  void nack(const outbox::delivery&, bool) {}
};

outbox::message one_message() {
  outbox::message m;
  m.id = outbox::make_uuid_v7();
  m.aggregate_type = "order";
  m.aggregate_id = "1";
  m.event_type = "placed";
  m.payload = "{}";
  return m;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(loops)

BOOST_AUTO_TEST_CASE(consumer_backs_off_more_after_each_transient_failure_and_spends_no_attempt) {
  // The database away for 8 tries: each retry waits longer than the one before (it waited the
  // first-attempt delay every time: 579 retries in 5 s), and none of them spends an attempt
  // (max_attempts is 3: the old code never dead-lettered these either, but for the wrong reason).
  flaky_inbox st;
  st.failures = 8;
  outbox::testing::memory_transport t;
  (void)t.publish(std::vector{one_message()}, std::chrono::steady_clock::now() + 1s);
  std::vector<int> asked;
  outbox::consumer c(
      st, t, [](int&, const outbox::message&) {}, {.name = "c"}, recording_retry{&asked});
  using outcome = decltype(c)::outcome;
  outcome last = outcome::idle;
  for (int i = 0; i < 20 && last != outcome::applied; ++i) last = c.poll_once();
  BOOST_TEST((last == outcome::applied));
  BOOST_TEST((asked == std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}));
  BOOST_TEST(st.dead == 0);
  BOOST_TEST(c.stats().retried == 8u);
}

BOOST_AUTO_TEST_CASE(consumer_classifies_a_handler_sql_error_by_the_store_and_retries_it) {
  // A deadlock in the handler's own statement is transient: retried, never a dead letter after
  // max_attempts (it was a "handler bug", dead after 3 quick attempts).
  classifying_inbox st;
  outbox::testing::memory_transport t;
  (void)t.publish(std::vector{one_message()}, std::chrono::steady_clock::now() + 1s);
  std::vector<int> asked;
  int calls = 0;
  outbox::consumer c(
      st, t,
      [&](int&, const outbox::message&) {
        if (++calls <= 6) throw deadlock_detected();
      },
      {.name = "c"}, recording_retry{&asked});
  using outcome = decltype(c)::outcome;
  outcome last = outcome::idle;
  for (int i = 0; i < 20 && last != outcome::applied; ++i) last = c.poll_once();
  BOOST_TEST((last == outcome::applied));
  BOOST_TEST(calls == 7);
  BOOST_TEST(st.dead == 0);
  // The same failure from a store that cannot classify it spends attempts: dead after 3.
  flaky_inbox plain;
  (void)t.publish(std::vector{one_message()}, std::chrono::steady_clock::now() + 1s);
  outbox::consumer d(
      plain, t, [](int&, const outbox::message&) { throw deadlock_detected(); }, {.name = "d"},
      recording_retry{&asked});
  using outcome_d = decltype(d)::outcome;
  outcome_d last_d = outcome_d::idle;
  for (int i = 0; i < 20 && last_d != outcome_d::dead_lettered; ++i) last_d = d.poll_once();
  BOOST_TEST((last_d == outcome_d::dead_lettered));
  BOOST_TEST(plain.dead == 1);
}

BOOST_AUTO_TEST_CASE(consumer_requires_a_name) {
  flaky_inbox st;
  outbox::testing::memory_transport t;
  try {
    outbox::consumer c(st, t, [](int&, const outbox::message&) {});
    BOOST_ERROR("a consumer without a name was accepted");
  } catch (const outbox::error& e) {
    BOOST_TEST((e.kind() == outbox::errc::misconfigured));
  }
}

BOOST_AUTO_TEST_CASE(consumer_refuses_a_name_its_store_cannot_keep_whole) {
  // Counted in the limit's unit: 8 two-byte characters fit 8 characters, 9 do not.
  short_names_inbox st;
  outbox::testing::memory_transport t;
  const auto refused = [&](std::string name) {
    try {
      outbox::consumer c(st, t, [](int&, const outbox::message&) {}, {.name = std::move(name)});
      return false;
    } catch (const outbox::error& e) {
      BOOST_TEST((e.kind() == outbox::errc::misconfigured), e.what());
      return true;
    }
  };
  std::string eight;
  for (int i = 0; i < 8; ++i) eight += "\xc3\xa9";
  BOOST_TEST(!refused(eight));
  BOOST_TEST(refused(eight + "x"));
  BOOST_TEST(refused("\xc3"));  // not UTF-8
  // A store without a limit keeps any length, but never a name that is not text.
  flaky_inbox any;
  BOOST_CHECK_NO_THROW(outbox::consumer(any, t, [](int&, const outbox::message&) {},
                                        {.name = std::string(100'000, 'n')}));
  BOOST_CHECK_THROW(outbox::consumer(any, t, [](int&, const outbox::message&) {},
                                     {.name = std::string("a\0b", 3)}),
                    outbox::error);
}

BOOST_AUTO_TEST_CASE(consumer_run_backs_off_from_every_error_but_misconfigured) {
  flaky_inbox st;
  std::stop_source stop;
  failing_receiver r{outbox::errc::permanent, 3, &stop};
  std::vector<int> asked;
  int reported = 0;
  outbox::consumer c(
      st, r, [](int&, const outbox::message&) {},
      {.name = "c", .on_error = [&](const outbox::error&) { ++reported; }},
      recording_retry{&asked});
  BOOST_CHECK_NO_THROW(c.run(stop.get_token()));  // a permanent error used to escape run
  BOOST_TEST(reported == 3);
  BOOST_TEST(c.stats().errors == 3u);
  BOOST_TEST((asked == std::vector<int>{1, 2, 3}));

  std::stop_source stop2;
  failing_receiver bad{outbox::errc::misconfigured, 1, &stop2};
  outbox::consumer c2(
      st, bad, [](int&, const outbox::message&) {}, {.name = "c"}, recording_retry{&asked});
  BOOST_CHECK_THROW(c2.run(stop2.get_token()), outbox::error);
}

BOOST_AUTO_TEST_CASE(relay_run_backs_off_from_every_error_but_misconfigured) {
  struct failing_store {
    outbox::errc kind;
    int failures;
    std::stop_source* stop;
    outbox::claimed_batch claim(const outbox::claim_request&) {
      if (failures-- > 0) throw outbox::error(kind, "test", {}, "claim failed");
      stop->request_stop();
      return {};
    }
    outbox::settle_result settle(const outbox::claimed_batch&, std::span<const outbox::settlement>,
                                 outbox::time_point) {
      return {};
    }
    void release(const outbox::claimed_batch&) {}
  };
  outbox::testing::memory_transport t;
  const outbox::exponential_backoff quick{.initial = 1ms, .max_delay = 2ms, .jitter = 0};
  std::stop_source stop;
  failing_store st{outbox::errc::permanent, 3, &stop};
  int reported = 0;
  outbox::relay r(st, t,
                  {.idle_poll_min = 1ms,
                   .idle_poll_max = 2ms,
                   .on_error = [&](const outbox::error&) { ++reported; }},
                  quick);
  BOOST_CHECK_NO_THROW(r.run(stop.get_token()));  // a permanent error used to escape run
  BOOST_TEST(reported == 3);
  BOOST_TEST(r.stats().errors == 3u);

  std::stop_source stop2;
  failing_store bad{outbox::errc::misconfigured, 1, &stop2};
  outbox::relay r2(bad, t, {.idle_poll_min = 1ms, .idle_poll_max = 2ms}, quick);
  BOOST_CHECK_THROW(r2.run(stop2.get_token()), outbox::error);
}

// The pause after an error is the pause the retry policy asks for: neither work waiting (a
// store whose wait_for_work says so at once: a log-tailing store holding events its table
// claim could not get past, a notification per commit) nor `wake()` ends it. Seen: 4,000 to
// 6,000 failed claims a second, each one an ERROR in the server's log.
BOOST_AUTO_TEST_CASE(relay_run_does_not_spin_on_errors_while_work_is_waiting) {
  struct busy_failing_store {
    std::atomic<int> claims{0};
    outbox::claimed_batch claim(const outbox::claim_request&) {
      ++claims;
      throw outbox::error(outbox::errc::permanent, "test", {}, "claim refused");
    }
    outbox::settle_result settle(const outbox::claimed_batch&, std::span<const outbox::settlement>,
                                 outbox::time_point) {
      return {};
    }
    void release(const outbox::claimed_batch&) {}
    bool wait_for_work(std::chrono::milliseconds) { return true; }  // always work waiting
    void interrupt() noexcept {}
  };
  static_assert(outbox::concepts::waking_store<busy_failing_store>);
  busy_failing_store st;
  outbox::testing::memory_transport t;
  const outbox::exponential_backoff every_20ms{.initial = 20ms, .max_delay = 20ms, .jitter = 0};
  outbox::relay r(st, t, {.idle_poll_min = 1ms, .idle_poll_max = 2ms, .error_backoff_max = 20ms},
                  every_20ms);
  const auto start = std::chrono::steady_clock::now();
  std::jthread runner([&](std::stop_token stop) { r.run(stop); });
  std::jthread waker([&](std::stop_token stop) {
    while (!stop.stop_requested()) {
      r.wake();  // a writer's wake-up per commit
      std::this_thread::sleep_for(1ms);
    }
  });
  // Six claims take five pauses of 20 ms at least (a spin makes thousands in that time); a
  // loaded machine only makes them take longer.
  while (st.claims.load() < 6) std::this_thread::sleep_for(1ms);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  waker.request_stop();
  waker.join();
  runner.request_stop();
  runner.join();
  BOOST_TEST((elapsed >= 100ms), std::chrono::duration<double>(elapsed).count()
                                     << " s for 6 claims: the relay spins");
  BOOST_TEST(r.stats().errors == static_cast<std::uint64_t>(st.claims.load()));
}

// `run` claims again at once after a batch that claimed something, but not after one it could
// only release (its publish deadline had passed: the claim outlived its lease): that would spin
// on the database. It sleeps its idle poll then, as after an empty claim.
namespace {
/// A store whose every claim outlived its lease (one message, lease_until in the past); it can
/// claim ahead (pipelined) or not, as told.
template <bool Overlap>
struct late_store {
  std::atomic<int> claims{0};  // read by the test while the relay runs
  std::atomic<int> releases{0};
  [[nodiscard]] bool claims_overlap() const { return Overlap; }
  outbox::claimed_batch claim(const outbox::claim_request& req) {
    ++claims;
    outbox::claimed_batch b;
    b.lease_until = req.now - 1s;  // the lease ran out during the claim
    b.messages.push_back(one_message());
    return b;
  }
  outbox::settle_result settle(const outbox::claimed_batch&,
                               std::span<const outbox::settlement> fates, outbox::time_point) {
    outbox::settle_result r;
    for (const auto& f : fates) r.released += f.what == outbox::settlement::kind::release;
    releases += static_cast<int>(r.released);
    return r;
  }
  void release(const outbox::claimed_batch& b) { releases += static_cast<int>(b.size()); }
};
using late_stores = std::tuple<late_store<false>, late_store<true>>;
}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(relay_run_does_not_spin_on_a_batch_it_can_only_release, Store,
                              late_stores) {
  Store st;
  outbox::testing::memory_transport t;
  outbox::relay r(st, t, {.idle_poll_min = 20ms, .idle_poll_max = 20ms});
  BOOST_TEST(r.pipelines() == st.claims_overlap());
  const auto start = std::chrono::steady_clock::now();
  std::jthread runner([&](std::stop_token stop) { r.run(stop); });
  // One claim per idle poll (20 ms), two when pipelined (the one claimed ahead): twelve claims
  // take 220 ms at least (100 ms pipelined); half that is checked, a spin makes thousands.
  while (st.claims.load() < 12) std::this_thread::sleep_for(1ms);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  runner.request_stop();
  runner.join();
  BOOST_TEST(t.published_count() == 0u);
  // Every claim was given back, the batch claimed ahead included.
  BOOST_TEST(r.stats().released == static_cast<std::uint64_t>(st.claims.load()));
  BOOST_TEST(st.releases.load() == st.claims.load());
  const auto least = (r.pipelines() ? 12 / 2 / 2 : 12 / 2) * 20ms;
  BOOST_TEST((elapsed >= least), std::chrono::duration<double>(elapsed).count()
                                     << " s for 12 claims: the relay spins");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(testing_doubles)

BOOST_AUTO_TEST_CASE(duplicating_receiver_storms_with_copies_an_inbox_absorbs) {
  // An inbox that remembers: the storm's copies must come back as duplicates, never applied
  // twice; their acks must not reach the transport (which owes nothing for them).
  struct remembering_inbox : flaky_inbox {
    std::set<std::string> seen;
    std::vector<std::string> asked;  // every delivery's id, in order
    bool record_delivery(std::string_view, const outbox::uuid& id, outbox::time_point) {
      asked.push_back(id.to_string());
      return seen.insert(id.to_string()).second;
    }
  };
  remembering_inbox st;
  outbox::testing::memory_transport t;
  std::vector<outbox::message> batch;
  batch.reserve(5);
  for (int i = 0; i < 5; ++i) batch.push_back(one_message());
  (void)t.publish(batch, std::chrono::steady_clock::now() + 1s);
  outbox::testing::duplicating_receiver dup(t, 3);  // keeps the last 3
  std::map<std::string, int> applied;
  outbox::consumer c(st, dup, [&](int&, const outbox::message& m) { ++applied[m.id.to_string()]; },
                     {.name = "c", .poll_timeout = 10ms});
  using outcome = decltype(c)::outcome;
  for (int i = 0; i < 5; ++i) BOOST_TEST((c.poll_once() == outcome::applied));
  BOOST_TEST(!dup.last_was_copy());
  dup.storm(4);
  for (int i = 0; i < 12; ++i) {
    BOOST_TEST((c.poll_once() == outcome::duplicate));
    BOOST_TEST(dup.last_was_copy());
  }
  BOOST_TEST(dup.copies() == 12u);
  BOOST_TEST((c.poll_once() == outcome::idle));  // the storm is over, the transport empty
  BOOST_TEST(applied.size() == 5u);
  for (const auto& [id, n] : applied) BOOST_TEST(n == 1);
  // The copies were of the last 3, in their order, 4 rounds: the first 2 never came again.
  BOOST_REQUIRE(st.asked.size() == 17u);
  for (std::size_t i = 0; i < 12; ++i)
    BOOST_TEST(st.asked[5 + i] == batch[2 + i % 3].id.to_string());
  BOOST_TEST(c.stats().duplicates_skipped == 12u);
  // Every real delivery was acked once; nothing is left unacked for a copy.
  BOOST_TEST(t.unacked() == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
