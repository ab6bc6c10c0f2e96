// The Prometheus adapter (adapters/prometheus/): relay and backlog metrics fed by a real relay
// over the in-memory store and transport count what the relay counted; label values are valid
// UTF-8 and their sets bounded; the registry's text is Prometheus text (`promtool check
// metrics`, when PROMTOOL names it).
#define BOOST_TEST_MODULE outbox prometheus
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <outbox/outbox.hpp>
#include <outbox/prometheus/prometheus.hpp>
#include <outbox/testing/faulty_transport.hpp>
#include <outbox/testing/memory_store.hpp>
#include <outbox/testing/memory_transport.hpp>

#include "page.hpp"

namespace {

using namespace std::chrono_literals;
using outbox::test::page;
using outbox::testing::memory_database;
using outbox::testing::memory_session;
using outbox::testing::memory_store;

/// `n` events of type `type`, each on an aggregate of its own ("0", "1", ...), committed.
void write(memory_session& app, memory_store<>& store, int n, const std::string& type = "order") {
  outbox::writer writer(store);
  memory_session::transaction tx(app);
  for (int i = 0; i < n; ++i)
    writer.enqueue(app, outbox::event{type, std::to_string(i), "placed", R"({"n":1})", {}});
  tx.commit();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(relay_metrics)

// A relay over a transport that refuses two events for good and one for now: the counters say
// what `relay_stats` says, the histograms saw each batch and each published event, and the
// series carry the instance's labels.
BOOST_AUTO_TEST_CASE(a_real_relay_is_counted_as_its_stats_count) {
  memory_database db;
  memory_session app(db), relay_sql(db);
  memory_store store(app), relay_store(relay_sql);
  write(app, store, 10);
  outbox::testing::memory_transport broker;
  outbox::testing::faulty_transport<outbox::testing::memory_transport> wire(broker);
  wire.fail_when(
      [](const outbox::message& m) { return m.aggregate_id == "3" || m.aggregate_id == "4"; });
  ::prometheus::Registry registry;
  outbox::prometheus::relay_metrics metrics(registry, {.labels = {{"relay", "r1"}}});
  outbox::relay relay(relay_store, wire, {.on_batch = metrics.on_batch()});
  wire.fail_next(1);  // "0": retried
  BOOST_TEST(relay.run_once() == 10u);
  const auto s = relay.stats();
  BOOST_TEST(s.published == 7u);
  BOOST_TEST(s.dead_lettered == 2u);
  BOOST_TEST(s.retried == 1u);

  // on_batch alone counts the settle's counts.
  page p(registry);
  BOOST_TEST(p.value("outbox_relay_published_total", R"(relay="r1")") == 7);
  BOOST_TEST(p.value("outbox_relay_dead_lettered_total", R"(relay="r1")") == 2);
  BOOST_TEST(p.value("outbox_relay_retried_total", R"(relay="r1")") == 1);
  BOOST_TEST(p.value("outbox_relay_batches_total", R"(relay="r1")") == 1);
  BOOST_TEST(p.value("outbox_relay_batch_duration_seconds_count", R"(relay="r1")") == 1);
  BOOST_TEST(p.value("outbox_relay_publish_duration_seconds_count", R"(relay="r1")") == 1);
  BOOST_TEST(p.value("outbox_relay_event_latency_seconds_count", R"(relay="r1")") == 7);
  BOOST_TEST(p.value("outbox_relay_last_batch_timestamp_seconds", R"(relay="r1")") > 1.7e9);
  for (const auto& [series, value] : p.samples)
    BOOST_TEST(series.find(R"(relay="r1")") != std::string::npos, series);

  // observe(stats) adds nothing on_batch counted, and what only the stats know (errors).
  metrics.observe(relay.stats());
  outbox::relay_stats more = relay.stats();
  more.errors = 3;
  more.reordered = 1;
  metrics.observe(more);
  metrics.observe(relay.stats());  // a lower count adds nothing
  page q(registry);
  BOOST_TEST(q.value("outbox_relay_published_total", R"(relay="r1")") == 7);
  BOOST_TEST(q.value("outbox_relay_dead_lettered_total", R"(relay="r1")") == 2);
  BOOST_TEST(q.value("outbox_relay_errors_total", R"(relay="r1")") == 3);
  BOOST_TEST(q.value("outbox_relay_reordered_total", R"(relay="r1")") == 1);
  BOOST_TEST(q.check_with_promtool());
}

// Two relays on one registry share the families (one HELP and TYPE each, which a scrape
// requires) and keep their series apart by label.
BOOST_AUTO_TEST_CASE(two_relays_share_the_families_with_their_own_series) {
  ::prometheus::Registry registry;
  outbox::prometheus::relay_metrics a(registry, {.labels = {{"relay", "a"}}});
  outbox::prometheus::relay_metrics b(registry, {.labels = {{"relay", "b"}}});
  a.observe({.published = 5});
  b.observe({.published = 2});
  page p(registry);
  BOOST_TEST(p.value("outbox_relay_published_total", R"(relay="a")") == 5);
  BOOST_TEST(p.value("outbox_relay_published_total", R"(relay="b")") == 2);
  BOOST_TEST(p.help_lines("outbox_relay_published_total") == 1);
  BOOST_TEST(p.check_with_promtool());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(backlog_metrics)

// A real store's backlog: the totals and a series per type, the largest `max_types` and then
// `_other`; types gone from a later sample lose their series.
BOOST_AUTO_TEST_CASE(the_per_type_series_are_capped_and_follow_the_samples) {
  memory_database db;
  memory_session app(db);
  memory_store store(app);
  for (int t = 0; t < 30; ++t) write(app, store, t < 3 ? 5 : 1, "type-" + std::to_string(t));
  ::prometheus::Registry registry;
  outbox::prometheus::backlog_metrics backlog(registry, {.max_types = 3});
  BOOST_TEST(page(registry).samples.empty());  // no sample yet: no series
  const auto now = std::chrono::system_clock::now();
  backlog.sample(store.stats(now), store.stats_by_aggregate_type(now));
  page p(registry);
  BOOST_TEST(p.value("outbox_backlog_pending") == 42);
  const auto pending = p.by_label("outbox_backlog_type_pending", "aggregate_type");
  BOOST_TEST(pending.size() == 4u);
  BOOST_TEST(pending.at("type-0") == 5);
  BOOST_TEST(pending.at("_other") == 27);
  BOOST_TEST(p.by_label("outbox_backlog_type_dead_lettered", "aggregate_type").size() == 4u);
  BOOST_TEST(p.samples.count("outbox_log_lag_bytes") == 0u);  // not a log-tailing store
  BOOST_TEST(p.check_with_promtool());

  backlog.sample({.pending = 1}, {{"type-1", {.pending = 1}}});
  page q(registry);
  BOOST_TEST(q.by_label("outbox_backlog_type_pending", "aggregate_type").size() == 1u);
  BOOST_TEST(q.value("outbox_backlog_type_pending", R"(aggregate_type="type-1")") == 1);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(labels)

// An aggregate type is a label value: one byte Prometheus cannot read there (not UTF-8, a
// control character) would fail the whole scrape. The serializer escapes; label_value does not.
BOOST_AUTO_TEST_CASE(label_values_are_valid_utf8) {
  using outbox::prometheus::label_value;
  BOOST_TEST(label_value("order") == "order");
  BOOST_TEST(label_value("a\"b\\c\nd") == "a\"b\\c\nd");
  BOOST_TEST(label_value("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x93\xA6") ==
             "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x93\xA6");
  const std::string bad(
      "ord\xFF"
      "er\x00\r\xC3",
      9);
  BOOST_TEST(label_value(bad) ==
             "ord\xEF\xBF\xBD"
             "er\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  BOOST_TEST(outbox::is_valid_utf8(label_value("\xED\xA0\x80\xC0\xAF")));  // surrogate, overlong

  // On a page: escaped once, by the serializer, and read back by promtool.
  ::prometheus::Registry registry;
  outbox::prometheus::backlog_metrics backlog(registry);
  backlog.sample({.pending = 2}, {{"a\"b\\c\nd", {.pending = 1}}, {bad, {.pending = 1}}});
  page p(registry);
  BOOST_TEST(p.text.find(R"(aggregate_type="a\"b\\c\nd")") != std::string::npos, p.text);
  BOOST_TEST(p.check_with_promtool());
}

// Aggregate types that differ only in bytes that are not valid UTF-8 have one label value once
// made valid: one series (their counts added, the oldest age kept), never two samples of one
// series, which fail the whole scrape.
BOOST_AUTO_TEST_CASE(aggregate_types_with_one_label_value_are_one_series) {
  const auto stats = [](std::int64_t pending, std::int64_t dead, std::chrono::milliseconds age) {
    outbox::backlog_stats s;
    s.pending = pending;
    s.dead = dead;
    s.oldest_pending_age = age;
    return s;
  };
  const std::vector<outbox::aggregate_type_stats> types{
      {"order\xFF", stats(2, 1, 5s)}, {"invoice", stats(7, 0, 1s)}, {"order\xFE", stats(3, 0, 9s)}};
  const auto series = outbox::prometheus::by_label(types);
  BOOST_TEST_REQUIRE(series.size() == 2u);
  BOOST_TEST(series[0].aggregate_type == "invoice");
  BOOST_TEST(series[0].stats.pending == 7);
  BOOST_TEST(series[1].aggregate_type == "order\xEF\xBF\xBD");  // U+FFFD
  BOOST_TEST(series[1].stats.pending == 5);
  BOOST_TEST(series[1].stats.dead == 1);
  BOOST_TEST((series[1].stats.oldest_pending_age == 9s));
}

// The first values seen keep their labels; later ones share "_other", however many come.
BOOST_AUTO_TEST_CASE(bounded_labels_give_the_first_values_their_own) {
  outbox::prometheus::bounded_labels labels(3);
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) seen.insert(labels("type-" + std::to_string(i % 50)));
  BOOST_TEST(seen.size() == 4u);
  BOOST_TEST(seen.count("_other") == 1u);
  BOOST_TEST(labels("type-1") == "type-1");
  BOOST_TEST(labels("type-49") == "_other");
  BOOST_TEST(labels("_other") == "_other");
  BOOST_TEST(labels("\xFF") == "_other");
}

BOOST_AUTO_TEST_SUITE_END()
