// `outbox dead-letters groups`, `requeue --group`, `dead-letters discard`, `purge
// --archive-before` and `outbox replay`, run as a process against a real store (the one named
// by -DOUTBOX_TOOL_TEST_<STORE>; the build compiles this file once per store it has, as
// outbox_tool_test.cpp). Dead letters are made by a relay whose transport fails chosen events
// for good with messages that differ only by ids and numbers; replayed events are read off an
// in-memory broker that records its wire.
#define BOOST_TEST_MODULE outbox tool triage
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <outbox/outbox.hpp>
#include <outbox/testing/faulty_transport.hpp>
#include <outbox/testing/memory_transport.hpp>

#include "tool_process.hpp"
#if defined(OUTBOX_TOOL_TEST_POSTGRESQL)
#include "../support/server_store_helpers.hpp"
#endif

namespace {

nlohmann::json json_of(const run_result& r) {
  BOOST_TEST_REQUIRE(r.code == 0, r.err);
  return nlohmann::json::parse(r.out);
}

/// Enqueues events of the aggregates `aggs` ("a", "b", ...), in one transaction; their ids.
std::vector<outbox::uuid> enqueue(fixture& fx, const std::vector<std::string>& aggs,
                                  const std::string& type = "order_placed") {
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::writer w(*st);
  std::vector<outbox::uuid> ids;
  auto tx = fixture::begin(*sql);
  for (const auto& a : aggs) ids.push_back(w.enqueue(*sql, outbox::event{"order", a, type, "{}"}));
  tx->commit();
  return ids;
}

/// Runs a relay until nothing is left; its transport fails the events of `permanent` for good
/// and those of `transient` for now, which its retry policy (one attempt) gives up on at once:
/// two cause keys, "permanent: ..." and "transient: ...". Returns what reached the broker, in
/// wire order.
std::vector<outbox::uuid> relay_all(fixture& fx, const std::set<outbox::uuid>& permanent = {},
                                    const std::set<outbox::uuid>& transient = {},
                                    outbox::retention r = outbox::retention::keep) {
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql, r);
  outbox::testing::memory_transport broker({.record = true});
  using faulty = outbox::testing::faulty_transport<outbox::testing::memory_transport>;
  faulty inner(broker);
  inner.fail_when([&](const outbox::message& m) { return transient.contains(m.id); },
                  outbox::errc::transient);
  outbox::testing::faulty_transport<faulty> outer(inner);
  outer.fail_when([&](const outbox::message& m) { return permanent.contains(m.id); },
                  outbox::errc::permanent);
  outbox::relay relay(*st, outer, {.batch_size = 100},
                      outbox::exponential_backoff{.max_attempts = 1});
  while (relay.run_once() > 0) {
  }
  std::vector<outbox::uuid> out;
  for (const auto& m : broker.wire()) out.push_back(m.id);
  return out;
}

/// Of `wire`, the ids among `of`, in wire order (one aggregate's events: their order).
std::vector<outbox::uuid> only(const std::vector<outbox::uuid>& wire,
                               const std::vector<outbox::uuid>& of) {
  std::vector<outbox::uuid> out;
  for (const auto& id : wire)
    if (std::find(of.begin(), of.end(), id) != of.end()) out.push_back(id);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(outbox_tool_triage,
                      *boost::unit_test::precondition(outbox::test::services_of<fixture>))

BOOST_AUTO_TEST_CASE(groups_requeue_by_group_discard_and_the_archive) {
  fixture fx;
  const auto url = url_of(fx);
  // Three dead letters of one cause (two event types), one of another, two published.
  auto ids = enqueue(fx, {"a", "b", "c", "d"});
  const auto paid = enqueue(fx, {"e", "f"}, "order_paid");
  ids.insert(ids.end(), paid.begin(), paid.end());
  const std::set<outbox::uuid> fail{ids[0], ids[2], ids[4]}, other{ids[1]};
  BOOST_TEST(relay_all(fx, fail, other).size() == 2u);
  const auto groups = json_of(tool({"dead-letters", "groups", "--store", url, "--json"}));
  BOOST_TEST_REQUIRE(groups.size() == 2u, groups.dump());
  BOOST_TEST(groups[0]["count"] == 3);
  BOOST_TEST((groups[0]["event_types"] == nlohmann::json{"order_paid", "order_placed"}));
  BOOST_TEST(groups[0]["sample"] == ids[0].to_string());  // the oldest of the group
  BOOST_TEST(groups[1]["count"] == 1);
  const std::string key = groups[0]["cause"];
  BOOST_TEST(key.rfind("permanent: ", 0) == 0u, key);
  BOOST_TEST(key.find(ids[0].to_string()) == std::string::npos, key);  // ids stripped
  const auto text = tool({"dead-letters", "groups", "--store", url});
  BOOST_TEST(text.code == 0, text.err);
  BOOST_TEST(text.out.find(key) != std::string::npos, text.out);
  // Requeue the group in batches of 2; its events fail again: replayed once, and shown so.
  const auto requeued =
      json_of(tool({"requeue", "--store", url, "--group", key, "--batch", "2", "--json"}));
  BOOST_TEST(requeued["requeued"] == 3);
  BOOST_TEST(json_of(tool({"stats", "--store", url, "--json"}))["dead"] == 1);
  BOOST_TEST(relay_all(fx, fail).empty());
  const auto shown =
      json_of(tool({"dead-letters", "show", "--store", url, ids[2].to_string(), "--json"}));
  BOOST_TEST(shown["replays"] == 1);
  BOOST_TEST(shown.contains("replayed_at"));
  BOOST_TEST(shown["cause"] == key);
  // Discard the group in batches of 2, the other by id; an id that is no dead letter: exit 1.
  const auto discarded = json_of(
      tool({"dead-letters", "discard", "--store", url, "--group", key, "--batch", "2", "--json"}));
  BOOST_TEST(discarded["discarded"] == 3);
  BOOST_TEST(json_of(tool({"dead-letters", "discard", "--store", url, ids[1].to_string(),
                           "--json"}))["discarded"] == 1);
  const auto again = tool({"dead-letters", "discard", "--store", url, ids[1].to_string()});
  BOOST_TEST(again.code == 1, again.out);
  BOOST_TEST(again.out.find("not a dead letter") != std::string::npos, again.out);
  BOOST_TEST(json_of(tool({"stats", "--store", url, "--json"}))["dead"] == 0);
  BOOST_TEST(tool({"requeue", "--store", url, ids[0].to_string()}).code == 1);  // archived
  // The archive is kept until purged: nothing is an hour old; everything is 0 s old.
  BOOST_TEST(
      json_of(tool({"purge", "--store", url, "--archive-before", "1h", "--json"}))["purged"] == 0);
  const auto purged =
      json_of(tool({"purge", "--store", url, "--archive-before", "0s", "--batch", "3", "--json"}));
  BOOST_TEST(purged["purged"] == 4);
  BOOST_TEST(purged["what"] == "archive");
  // Usage errors: exit 2, nothing changed.
  BOOST_TEST(tool({"dead-letters", "discard", "--store", url}).code == 2);
  BOOST_TEST(tool({"dead-letters", "discard", "--store", url, "--all", "--group", key}).code == 2);
  BOOST_TEST(tool({"requeue", "--store", url, "--group", key, "--all"}).code == 2);
  BOOST_TEST(
      tool({"purge", "--store", url, "--archive-before", "1h", "--published-before", "1h"}).code ==
      2);
}

BOOST_AUTO_TEST_CASE(
    replay_sends_events_again_in_order_with_their_ids_and_dry_run_changes_nothing) {
  fixture fx;
  const auto url = url_of(fx);
  const auto ids = enqueue(fx, {"a", "b", "a", "a", "b"});
  const std::vector<outbox::uuid> a{ids[0], ids[2], ids[3]}, b{ids[1], ids[4]};
  const auto first = relay_all(fx);
  BOOST_TEST(first.size() == 5u);
  BOOST_TEST((only(first, a) == a && only(first, b) == b));
  const auto dry =
      json_of(tool({"replay", "--store", url, "--since", "1h", "--dry-run", "--json"}));
  BOOST_TEST(dry["would_replay"] == 5);
  BOOST_TEST(json_of(tool({"stats", "--store", url, "--json"}))["pending"] == 0);  // unchanged
  BOOST_TEST(relay_all(fx).empty());
  // One aggregate, in batches of 2: its events, in their order, with their ids.
  const auto one = json_of(tool({"replay", "--store", url, "--since", "1h", "--aggregate-id", "a",
                                 "--batch", "2", "--json"}));
  BOOST_TEST(one["replayed"] == 3);
  BOOST_TEST(relay_all(fx) == a);
  // Everything, then a window that holds nothing (created before an hour ago).
  BOOST_TEST(json_of(tool({"replay", "--store", url, "--since", "1h", "--json"}))["replayed"] == 5);
  const auto again = relay_all(fx);
  BOOST_TEST(again.size() == 5u);
  BOOST_TEST((only(again, a) == a && only(again, b) == b), "each aggregate in its order");
  BOOST_TEST(json_of(tool({"replay", "--store", url, "--since", "3h", "--until", "2h",
                           "--json"}))["replayed"] == 0);
  BOOST_TEST(json_of(tool({"replay", "--store", url, "--since", "1h", "--event-type", "nothing",
                           "--json"}))["replayed"] == 0);
  // Usage errors: no --since, --since after --until, a bad time.
  BOOST_TEST(tool({"replay", "--store", url}).code == 2);
  BOOST_TEST(tool({"replay", "--store", url, "--since", "1h", "--until", "2h"}).code == 2);
  const auto bad = tool({"replay", "--store", url, "--since", "2026-13-01T00:00:00Z"});
  BOOST_TEST(bad.code == 2);
  BOOST_TEST(bad.err.find("UTC time") != std::string::npos, bad.err);
}

BOOST_AUTO_TEST_CASE(replay_is_refused_where_nothing_is_kept) {
  fixture fx;
  const auto url = url_of(fx);
  enqueue(fx, {"a", "b"});
  BOOST_TEST(relay_all(fx, {}, {}, outbox::retention::delete_on_publish).size() == 2u);
  for (const bool dry : {false, true}) {
    std::vector<std::string> args{"replay", "--store", url, "--since", "1h"};
    if (dry) args.push_back("--dry-run");
    const auto r = tool(args);
    BOOST_TEST(r.code == 1, r.out);
    BOOST_TEST(r.err.find("misconfigured") != std::string::npos, r.err);
    BOOST_TEST(r.err.find("retention") != std::string::npos, r.err);
  }
#if defined(OUTBOX_TOOL_TEST_POSTGRESQL)
  // The log-tailing store: refused before anything runs.
  const auto tail =
      tool({"replay", "--store", "postgresql+tail" + url.substr(url.find(':')), "--since", "1h"});
  BOOST_TEST(tail.code == 2, tail.err);
  BOOST_TEST(tail.err.find("log-tailing") != std::string::npos, tail.err);
#endif
}

#if defined(OUTBOX_TOOL_TEST_POSTGRESQL)
// The log-tailing store's dead letters (parked in the outbox table from the stream) keep a
// cause key, and the triage commands work on a postgresql+tail URL as on the polling store.
BOOST_AUTO_TEST_CASE(triage_works_on_the_log_tailing_store) {
  fixture fx;
  tail_slot slot(fx, "triage");
  BOOST_TEST_REQUIRE(tool({"migrate", "--store", slot.url}).code == 0);
  std::vector<outbox::uuid> ids;
  {
    auto sql = fx.open_session();
    outbox::writer<outbox::postgresql::tailing_store> w;
    auto tx = fixture::begin(*sql);
    for (const char* a : {"a", "b", "c"})
      ids.push_back(w.enqueue(*sql, outbox::event{"order", a, "order_placed", "{}"}));
    tx->commit();
  }
  const std::set<outbox::uuid> fail{ids[0], ids[1]};
  // A tailing relay whose transport refuses a and b for good, until both are dead letters.
  const auto relay_tail = [&](std::size_t dead) {
    auto sql = fx.open_session();
    outbox::postgresql::tailing_store st(fx.connect_string(), *sql,
                                         {.slot = slot.name, .publication = slot.name});
    outbox::testing::memory_transport broker;
    outbox::testing::faulty_transport<outbox::testing::memory_transport> t(broker);
    t.fail_when([&](const outbox::message& m) { return fail.contains(m.id); },
                outbox::errc::permanent);
    outbox::relay relay(st, t, {}, outbox::exponential_backoff{.max_attempts = 1});
    return outbox::test::eventually([&] {
      relay.run_once();
      return st.dead_letters(10).size() == dead;
    });
  };
  BOOST_TEST_REQUIRE(relay_tail(2));
  const auto groups = json_of(tool({"dead-letters", "groups", "--store", slot.url, "--json"}));
  BOOST_TEST_REQUIRE(groups.size() == 1u, groups.dump());
  BOOST_TEST(groups[0]["count"] == 2);
  const std::string key = groups[0]["cause"];
  BOOST_TEST(key.rfind("permanent: ", 0) == 0u, key);
  // Requeued, they go through the table and fail again: replayed once.
  BOOST_TEST(
      json_of(tool({"requeue", "--store", slot.url, "--group", key, "--json"}))["requeued"] == 2);
  BOOST_TEST(json_of(tool({"stats", "--store", slot.url, "--json"}))["dead"] == 0);
  BOOST_TEST_REQUIRE(relay_tail(2));
  const auto shown =
      json_of(tool({"dead-letters", "show", "--store", slot.url, ids[1].to_string(), "--json"}));
  BOOST_TEST(shown["replays"] == 1);
  BOOST_TEST(shown["cause"] == key);
  BOOST_TEST(json_of(tool({"dead-letters", "discard", "--store", slot.url, "--group", key,
                           "--json"}))["discarded"] == 2);
  BOOST_TEST(json_of(tool({"stats", "--store", slot.url, "--json"}))["dead"] == 0);
  BOOST_TEST(json_of(tool({"purge", "--store", slot.url, "--archive-before", "0s",
                           "--json"}))["purged"] == 2);
  const auto replay = tool({"replay", "--store", slot.url, "--since", "1h"});
  BOOST_TEST(replay.code == 2, replay.err);
}
#endif

BOOST_AUTO_TEST_SUITE_END()

OUTBOX_TOOL_TEST_MAIN()
