// The Prometheus adapter (adapters/prometheus/): relay and backlog metrics fed by a real relay,
// and consumer metrics fed by a real consumer, over the in-memory store and transport, count
// what the relay and the consumer counted; label values are valid UTF-8 and their sets bounded; the
// registry's text is Prometheus text (`promtool check metrics`, when PROMTOOL names it).
#define BOOST_TEST_MODULE outbox prometheus
#include <boost/test/unit_test.hpp>

#include <cmath>
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

BOOST_AUTO_TEST_SUITE(consumer_metrics)

// A consumer that applies three events of two aggregate types, fails one until it is
// dead-lettered (two attempts) and meets a redelivery: the counters say what `consumer_stats`
// says, the histograms are by aggregate type (bounded: "order" first, the other type in
// "_other"), the times and `held` come from the stats, and every series names the consumer.
BOOST_AUTO_TEST_CASE(a_real_consumer_is_counted_by_outcome) {
  memory_database db;
  memory_session app(db), relay_sql(db), consumer_sql(db);
  memory_store store(app), relay_store(relay_sql), consumer_store(consumer_sql);
  write(app, store, 3, "order");  // "0", "1", "2" (which fails)
  write(app, store, 1, "invoice");
  outbox::testing::memory_transport broker({.record = true});
  outbox::relay relay(relay_store, broker);
  BOOST_TEST(relay.run_once() == 4u);

  ::prometheus::Registry registry;
  outbox::prometheus::consumer_metrics metrics(registry, {.name = "shipping", .max_types = 1});
  const auto handler = [](memory_session& sql, const outbox::message& m) {
    if (m.aggregate_type == "order" && m.aggregate_id == "2")
      throw outbox::error(outbox::errc::permanent, "test", {}, "refused");
    sql.insert("shipments", m.aggregate_type + "/" + m.aggregate_id, "1");
  };
  outbox::consumer shipping(
      consumer_store, broker, handler,
      {.name = "shipping", .poll_timeout = 10ms, .on_delivery = metrics.on_delivery()},
      outbox::exponential_backoff{.initial = 0ms, .max_attempts = 2});
  const auto drain = [&] {
    for (int idle = 0; idle < 3;)
      idle = shipping.poll_once() == outbox::delivery_outcome::idle ? idle + 1 : 0;
  };
  drain();
  BOOST_TEST_REQUIRE(broker.redeliver(broker.wire().front().id));
  drain();
  const auto s = shipping.stats();
  BOOST_TEST(s.applied == 3u);
  BOOST_TEST(s.duplicates_skipped == 1u);
  BOOST_TEST(s.retried == 1u);
  BOOST_TEST(s.dead_lettered == 1u);
  metrics.sample(s);

  page p(registry);
  const std::string me = R"(consumer="shipping")";
  BOOST_TEST(p.value("outbox_consumer_applied_total", me) == 3);
  BOOST_TEST(p.value("outbox_consumer_duplicates_total", me) == 1);
  BOOST_TEST(p.value("outbox_consumer_retried_total", me) == 1);
  BOOST_TEST(p.value("outbox_consumer_dead_lettered_total", me) == 1);
  BOOST_TEST(p.value("outbox_consumer_deferred_total", me) == 0);
  BOOST_TEST(p.value("outbox_consumer_out_of_order_total", me) == 0);
  BOOST_TEST(p.value("outbox_consumer_errors_total", me) == 0);
  BOOST_TEST(p.value("outbox_consumer_held", me) == 0);
  const double progress = p.value("outbox_consumer_last_progress_timestamp_seconds", me);
  BOOST_TEST(progress > 1.7e9);
  const double delivery = p.value("outbox_consumer_last_delivery_timestamp_seconds", me);
  BOOST_TEST(delivery > 1.7e9);  // received, then finished: apart by the handling
  BOOST_TEST(std::abs(delivery - progress) < 60);
  // The handler's time of each run (the two that threw included: the retried and the
  // dead-lettered one), and the end-to-end time of each applied event: "order" has its own
  // series, "invoice" came second.
  const auto handled =
      p.by_label("outbox_consumer_handler_duration_seconds_count", "aggregate_type");
  BOOST_TEST(handled.size() == 2u);
  BOOST_TEST(handled.at("order") == 4);
  BOOST_TEST(handled.at("_other") == 1);
  const auto end_to_end = p.by_label("outbox_consumer_end_to_end_seconds_count", "aggregate_type");
  BOOST_TEST(end_to_end.at("order") == 2);
  BOOST_TEST(end_to_end.at("_other") == 1);
  for (const auto& [series, value] : p.samples)
    BOOST_TEST(series.find(me) != std::string::npos, series);
  BOOST_TEST(p.check_with_promtool());
}

// Before any delivery the times are 0 (none yet), which the stalled-consumer rule reads as
// "no progress" only once deliveries arrive; a consumer needs its name.
BOOST_AUTO_TEST_CASE(an_idle_consumer_has_zero_times_and_a_name_is_required) {
  ::prometheus::Registry registry;
  outbox::prometheus::consumer_metrics metrics(registry, {.name = "billing"});
  metrics.sample({});
  page p(registry);
  BOOST_TEST(p.value("outbox_consumer_last_progress_timestamp_seconds", "billing") == 0);
  BOOST_TEST(p.value("outbox_consumer_last_delivery_timestamp_seconds", "billing") == 0);
  BOOST_CHECK_THROW(outbox::prometheus::consumer_metrics(registry, {}), std::invalid_argument);
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
  BOOST_TEST(p.value("outbox_backlog_scheduled") == 0);
  const auto pending = p.by_label("outbox_backlog_type_pending", "aggregate_type");
  BOOST_TEST(pending.size() == 4u);
  BOOST_TEST(pending.at("type-0") == 5);
  BOOST_TEST(pending.at("_other") == 27);
  BOOST_TEST(p.by_label("outbox_backlog_type_dead_lettered", "aggregate_type").size() == 4u);
  BOOST_TEST(p.samples.count("outbox_log_lag_bytes") == 0u);  // not a log-tailing store
  BOOST_TEST(p.check_with_promtool());

  backlog.sample({.pending = 1, .scheduled = 3}, {{"type-1", {.pending = 1}}});
  page q(registry);
  BOOST_TEST(q.value("outbox_backlog_scheduled") == 3);  // apart from the backlog
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
