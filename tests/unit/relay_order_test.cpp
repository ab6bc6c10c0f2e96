// Unit tests of the relay's ordering policy (outbox/relay/order.hpp): waves, the deferral behind
// a failed aggregate, predecessor stamps and the hold-back after a failure. No relay, no store.
#define BOOST_TEST_MODULE outbox relay ordering
#include <boost/test/unit_test.hpp>

#include <string>
#include <unordered_set>
#include <vector>

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
