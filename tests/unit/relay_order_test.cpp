// Unit tests of the relay's ordering policy (outbox/relay/order.hpp): waves, the deferral behind
// a failed aggregate, predecessor stamps and the hold-back after a failure; and of its fates
// (outbox/relay/fates.hpp): what the transport said, made a settlement. No relay, no store.
#define BOOST_TEST_MODULE outbox relay ordering
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include <outbox/relay/fates.hpp>
#include <outbox/relay/order.hpp>
#include <outbox/uuid.hpp>

namespace {

using outbox::message;
using outbox::settlement;

/// A batch of messages named "<aggregate id>/<n>", all of aggregate type "order" unless the
/// name has a type: "t:<id>/<n>".
std::vector<message> batch(std::initializer_list<std::string> names) {
  std::vector<message> out;
  out.reserve(names.size());
  for (const auto& name : names) {
    message m;
    m.id = outbox::make_uuid_v7();
    const auto colon = name.find(':');
    const auto slash = name.find('/');
    m.aggregate_type = colon == std::string::npos ? "order" : name.substr(0, colon);
    const auto id_at = colon == std::string::npos ? 0 : colon + 1;
    m.aggregate_id = name.substr(id_at, slash - id_at);
    m.event_type = name;  // the name, read back by `names`
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<std::string> names(const std::vector<message>& msgs) {
  std::vector<std::string> out;
  out.reserve(msgs.size());
  for (const auto& m : msgs) out.push_back(m.event_type);
  return out;
}

using ranges = outbox::ordering::wave_ranges;

}  // namespace

BOOST_AUTO_TEST_SUITE(waves)

BOOST_AUTO_TEST_CASE(a_batch_without_a_repeated_aggregate_is_one_wave_in_its_order) {
  auto b = batch({"a/1", "b/1", "c/1"});
  BOOST_TEST((outbox::ordering::arrange_waves(b) == ranges{{0, 3}}));
  BOOST_TEST((names(b) == std::vector<std::string>{"a/1", "b/1", "c/1"}));
}

BOOST_AUTO_TEST_CASE(an_empty_batch_has_no_wave) {
  std::vector<message> b;
  BOOST_TEST(outbox::ordering::arrange_waves(b).empty());
}

BOOST_AUTO_TEST_CASE(wave_k_holds_the_kth_message_of_each_aggregate_in_batch_order) {
  auto b = batch({"a/1", "a/2", "b/1", "a/3", "c/1", "b/2"});
  BOOST_TEST((outbox::ordering::arrange_waves(b) == ranges{{0, 3}, {3, 5}, {5, 6}}));
  BOOST_TEST((names(b) == std::vector<std::string>{"a/1", "b/1", "c/1", "a/2", "b/2", "a/3"}));
}

BOOST_AUTO_TEST_CASE(an_aggregate_is_its_type_and_id_not_their_concatenation) {
  // ("ab", "c") and ("a", "bc") are two aggregates; so are ("order", "1") and ("invoice", "1").
  auto b = batch({"ab:c/1", "a:bc/1", "order:1/1", "invoice:1/1"});
  BOOST_TEST((outbox::ordering::arrange_waves(b) == ranges{{0, 4}}));
}

BOOST_AUTO_TEST_CASE(only_the_first_count_messages_are_arranged) {
  auto b = batch({"a/1", "a/2", "a/3"});
  BOOST_TEST((outbox::ordering::arrange_waves(std::span(b).first(2)) == ranges{{0, 1}, {1, 2}}));
  BOOST_TEST((names(b) == std::vector<std::string>{"a/1", "a/2", "a/3"}));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(deferral)

BOOST_AUTO_TEST_CASE(messages_of_a_failed_aggregate_go_behind_the_rest_of_the_wave) {
  auto b = batch({"a/2", "b/2", "c/2", "b/3"});
  const std::unordered_set<std::string> failed{outbox::detail::aggregate_key("order", "b")};
  BOOST_TEST(outbox::ordering::defer_behind_failed(b, failed) == 2U);
  BOOST_TEST((names(b) == std::vector<std::string>{"a/2", "c/2", "b/2", "b/3"}));
}

BOOST_AUTO_TEST_CASE(with_no_failure_the_wave_is_sent_whole) {
  auto b = batch({"a/2", "b/2"});
  BOOST_TEST(outbox::ordering::defer_behind_failed(b, {}) == 2U);
  BOOST_TEST((names(b) == std::vector<std::string>{"a/2", "b/2"}));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(stamps)

BOOST_AUTO_TEST_CASE(each_message_carries_the_id_of_the_one_before_it_in_its_aggregate) {
  auto b = batch({"a/1", "b/1", "a/2", "a/3", "b/2"});
  b[0].headers.insert_or_assign(std::string(outbox::predecessor_header), "stale");
  outbox::ordering::stamp_predecessors(b);
  const auto stamp = [&](std::size_t i) -> std::string {
    auto it = b[i].headers.find(outbox::predecessor_header);
    return it == b[i].headers.end() ? "none" : it->second;
  };
  BOOST_TEST(stamp(0) == "none");  // the first of an aggregate: a stale stamp is removed
  BOOST_TEST(stamp(1) == "none");
  BOOST_TEST(stamp(2) == b[0].id.to_string());
  BOOST_TEST(stamp(3) == b[2].id.to_string());
  BOOST_TEST(stamp(4) == b[1].id.to_string());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(hold_back)

namespace {
settlement fate(settlement::kind k) { return settlement{.what = k}; }
}  // namespace

BOOST_AUTO_TEST_CASE(after_a_retried_message_its_aggregates_unconfirmed_later_ones_are_released) {
  using k = settlement::kind;
  const auto b = batch({"a/1", "b/1", "a/2", "a/3", "b/2"});
  std::vector<settlement> fates{fate(k::retry), fate(k::published), fate(k::retry), fate(k::retry),
                                fate(k::published)};
  BOOST_TEST(outbox::ordering::hold_back_after_failures(b, fates) == 0U);
  BOOST_TEST((fates[0].what == k::retry));      // the failure itself keeps its retry
  BOOST_TEST((fates[1].what == k::published));  // another aggregate: untouched
  BOOST_TEST((fates[2].what == k::release));    // behind a/1: given back, no attempt charged
  BOOST_TEST((fates[3].what == k::release));
  BOOST_TEST((fates[4].what == k::published));
}

BOOST_AUTO_TEST_CASE(a_later_message_confirmed_behind_a_failure_is_counted_as_reordered) {
  using k = settlement::kind;
  const auto b = batch({"a/1", "a/2", "a/3"});
  std::vector<settlement> fates{fate(k::retry), fate(k::published), fate(k::retry)};
  BOOST_TEST(outbox::ordering::hold_back_after_failures(b, fates) == 1U);
  BOOST_TEST((fates[1].what == k::published));  // on the wire already: it stays published
  BOOST_TEST((fates[2].what == k::release));
}

BOOST_AUTO_TEST_CASE(a_dead_letter_does_not_hold_its_aggregate_back) {
  using k = settlement::kind;
  const auto b = batch({"a/1", "a/2"});
  std::vector<settlement> fates{fate(k::dead), fate(k::retry)};
  BOOST_TEST(outbox::ordering::hold_back_after_failures(b, fates) == 0U);
  BOOST_TEST((fates[0].what == k::dead));
  BOOST_TEST((fates[1].what == k::retry));  // the next event's own failure, retried on its own
}

BOOST_AUTO_TEST_SUITE_END()

// ---- the fates (outbox/relay/fates.hpp) --------------------------------------------------------

BOOST_AUTO_TEST_SUITE(relay_fates)

namespace {

using outbox::errc;
using outbox::publish_result;
using kind = outbox::settlement::kind;

publish_result confirmed(const message& m) { return {m.id, true, errc::transient, {}}; }
publish_result failed(const message& m, errc cls, std::string why = "refused") {
  return {m.id, false, cls, std::move(why)};
}

}  // namespace

BOOST_AUTO_TEST_CASE(results_match_by_id_in_any_order_and_a_missing_one_is_a_retry) {
  auto msgs = batch({"a/1", "b/1", "c/1", "d/1"});
  for (auto& m : msgs) m.attempts = 1;
  const outbox::exponential_backoff retry{.initial = std::chrono::milliseconds(100), .jitter = 0.0};
  std::mt19937_64 rng(1);
  const outbox::time_point now{std::chrono::seconds(1'000)};
  // Out of order, one duplicate confirm (ignored), one missing (c).
  const std::vector<publish_result> results{failed(msgs[3], errc::duplicate), confirmed(msgs[1]),
                                            confirmed(msgs[0]), failed(msgs[1], errc::permanent)};
  std::vector<settlement> fates(msgs.size());
  std::unordered_set<std::string> failed_aggregates;
  outbox::fates::decide(msgs, results, fates, retry, rng, now, &failed_aggregates);
  BOOST_TEST((fates[0].what == kind::published));
  BOOST_TEST((fates[1].what == kind::published));  // its first result counts
  BOOST_TEST((fates[2].what == kind::retry));
  BOOST_TEST(fates[2].error == "no confirm before the publish timeout");
  BOOST_TEST((fates[2].retry_at == now + std::chrono::milliseconds(100)));
  BOOST_TEST((fates[3].what == kind::published));  // the broker had it already
  BOOST_TEST(failed_aggregates.size() == 1U);
  BOOST_TEST(failed_aggregates.contains(outbox::detail::aggregate_key(msgs[2])));
}

BOOST_AUTO_TEST_CASE(permanent_and_spent_failures_are_dead_others_retry_with_the_delay) {
  auto msgs = batch({"a/1", "b/1", "c/1"});
  const outbox::exponential_backoff retry{.initial = std::chrono::milliseconds(100),
                                          .multiplier = 2.0,
                                          .jitter = 0.0,
                                          .max_attempts = 3};
  msgs[0].attempts = 1;
  msgs[1].attempts = 3;  // the policy's last
  msgs[2].attempts = 2;
  std::mt19937_64 rng(1);
  const outbox::time_point now{};
  const std::vector<publish_result> results{failed(msgs[0], errc::permanent, "bad\xff"),
                                            failed(msgs[1], errc::transient),
                                            failed(msgs[2], errc::transient)};
  std::vector<settlement> fates(msgs.size());
  outbox::fates::decide(msgs, results, fates, retry, rng, now);
  BOOST_TEST((fates[0].what == kind::dead));
  BOOST_TEST(fates[0].error.find('\xff') == std::string::npos);  // made storable
  BOOST_TEST((fates[1].what == kind::dead));
  BOOST_TEST((fates[2].what == kind::retry));
  BOOST_TEST((fates[2].retry_at == now + std::chrono::milliseconds(200)));
}

// The broker's silence is no message's failure: a broker frozen mid-batch must not dead-letter
// (or charge) the unanswered tail it may have stored, even on the policy's last attempt; nor one
// before a confirm (brokers answer out of send order: other partitions, queues, a reconnect).
BOOST_AUTO_TEST_CASE(in_doubt_is_deferred_with_the_attempt_given_back_never_dead) {
  auto msgs = batch({"c/1", "b/1", "a/1", "a/2"});
  const outbox::exponential_backoff retry{
      .initial = std::chrono::milliseconds(100), .jitter = 0.0, .max_attempts = 1};
  for (auto& m : msgs) m.attempts = 1;  // the policy's last
  std::mt19937_64 rng(1);
  const outbox::time_point now{std::chrono::seconds(1'000)};
  const std::vector<publish_result> results{failed(msgs[3], errc::in_doubt, "no ack by then"),
                                            confirmed(msgs[1]),
                                            failed(msgs[2], errc::in_doubt, "no ack by then"),
                                            failed(msgs[0], errc::in_doubt, "no ack by then")};
  std::vector<settlement> fates(msgs.size());
  std::unordered_set<std::string> failed_aggregates;
  outbox::fates::decide(msgs, results, fates, retry, rng, now, &failed_aggregates);
  BOOST_TEST((fates[1].what == kind::published));
  for (const std::size_t i : {0U, 2U, 3U}) {
    BOOST_TEST((fates[i].what == kind::release));  // its attempt given back
    BOOST_TEST((fates[i].retry_at == now + std::chrono::milliseconds(100)));
    BOOST_TEST(fates[i].error == "no ack by then");
  }
  BOOST_TEST(failed_aggregates.contains(outbox::detail::aggregate_key(msgs[2])));
  // Sent in one call, the aggregate's later event follows the deferred one, released at once.
  BOOST_TEST(outbox::ordering::hold_back_after_failures(msgs, fates) == 0U);
  BOOST_TEST((fates[2].what == kind::release && fates[2].retry_at > outbox::time_point{}));
  BOOST_TEST((fates[3].what == kind::release && fates[3].retry_at == outbox::time_point{}));
}

BOOST_AUTO_TEST_CASE(a_configuration_error_of_the_transport_is_thrown_not_dead_lettered) {
  auto msgs = batch({"a/1", "b/1"});
  std::mt19937_64 rng(1);
  std::vector<settlement> fates(msgs.size());
  const std::vector<publish_result> results{confirmed(msgs[0]),
                                            failed(msgs[1], errc::misconfigured, "no such queue")};
  BOOST_CHECK_EXCEPTION(
      outbox::fates::decide(msgs, results, fates, outbox::exponential_backoff{}, rng, {}),
      outbox::error, [](const outbox::error& e) {
        return e.code() == errc::misconfigured &&
               std::string(e.what()).find("no such queue") != std::string::npos;
      });
  BOOST_TEST((fates[1].what != kind::dead));
}

BOOST_AUTO_TEST_CASE(spent_messages_go_last_dead_and_the_rest_keep_their_order) {
  auto msgs = batch({"a/1", "b/1", "a/2", "c/1"});
  const outbox::exponential_backoff retry{.max_attempts = 2};
  msgs[0].attempts = 1;
  msgs[1].attempts = 3;  // two attempts that never settled: spent
  msgs[2].attempts = 2;  // one: may go again
  msgs[3].attempts = 5;
  std::vector<settlement> fates(msgs.size());
  const std::size_t sendable = outbox::fates::set_aside_spent(msgs, fates, retry);
  BOOST_TEST(sendable == 2U);
  BOOST_TEST(names(msgs) == (std::vector<std::string>{"a/1", "a/2", "b/1", "c/1"}),
             boost::test_tools::per_element());
  BOOST_TEST((fates[0].what == kind::release));
  BOOST_TEST((fates[2].what == kind::dead));
  BOOST_TEST(fates[2].error.find("gave up after 2 attempts") != std::string::npos);
  BOOST_TEST((fates[3].what == kind::dead));
}

BOOST_AUTO_TEST_SUITE_END()
