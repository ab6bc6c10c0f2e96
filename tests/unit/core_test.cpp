// Unit tests of the core (test_core): the concepts and ids here; validation, the retry policy
// and errors, the loops and the testing doubles in core/*_test.cpp, one executable.
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
#include <outbox/sql/statements.hpp>
#include <outbox/store_options.hpp>
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
