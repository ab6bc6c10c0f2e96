// The `outbox` command-line tool (tools/outbox.cpp) run as a process against a real store: the
// one named by -DOUTBOX_TOOL_TEST_<STORE> (the build compiles this file once per store it has).
// The tool's path comes in OUTBOX_TOOL. Dead letters are made by a relay whose transport fails
// chosen events for good; the tool lists, shows and requeues them, and a healthy relay then
// publishes them; purges are counted; bad input exits 2, a server that refuses exits 1, and no
// message carries the password.
#define BOOST_TEST_MODULE outbox tool
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <outbox/outbox.hpp>
#include <outbox/testing/faulty_transport.hpp>
#include <outbox/testing/memory_transport.hpp>

#include "tool_process.hpp"

namespace {

using namespace std::chrono_literals;

nlohmann::json json_of(const run_result& r) {
  BOOST_TEST_REQUIRE(r.code == 0, r.err);
  return nlohmann::json::parse(r.out);
}

/// Ten events, three of which (the 2nd, 5th and 8th) a relay dead-letters at once (its
/// transport fails them for good); the rest published. Returns the dead ones' ids, oldest first.
std::vector<outbox::uuid> make_dead_letters(fixture& fx) {
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::writer w(*st);
  std::vector<outbox::uuid> ids;
  {
    auto tx = fixture::begin(*sql);
    for (int i = 0; i < 10; ++i)
      ids.push_back(w.enqueue(*sql, outbox::event{"order",
                                                  std::to_string(i),
                                                  "order_placed",
                                                  R"({"i":)" + std::to_string(i) + "}",
                                                  {{"tenant", "acme"}}}));
    tx->commit();
  }
  const std::set<outbox::uuid> failing{ids[1], ids[4], ids[7]};
  outbox::testing::memory_transport broker;
  outbox::testing::faulty_transport<outbox::testing::memory_transport> faulty(broker);
  faulty.fail_when([&](const outbox::message& m) { return failing.contains(m.id); },
                   outbox::errc::permanent);
  outbox::relay relay(*st, faulty, {.batch_size = 100});
  while (relay.run_once() > 0) {
  }
  BOOST_TEST(relay.stats().dead_lettered == 3u);
  BOOST_TEST(relay.stats().published == 7u);
  return {ids[1], ids[4], ids[7]};
}

/// Publishes what is pending through a healthy transport; returns how many.
std::uint64_t publish_pending(fixture& fx) {
  auto sql = fx.open_session();
  auto st = fx.make_store(*sql);
  outbox::testing::memory_transport broker;
  outbox::relay relay(*st, broker, {.batch_size = 100});
  while (relay.run_once() > 0) {
  }
  return relay.stats().published;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(outbox_tool,
                      *boost::unit_test::precondition(outbox::test::services_of<fixture>))

BOOST_AUTO_TEST_CASE(help_for_every_subcommand_and_usage_errors_exit_2) {
  fixture fx;
  const auto url = url_of(fx);
  const auto help = tool({"--help"});
  BOOST_TEST(help.code == 0);
  for (const char* sub : {"migrate", "stats", "dead-letters", "requeue", "purge"})
    BOOST_TEST(help.out.find(sub) != std::string::npos, sub);
  for (const std::vector<std::string>& sub : {std::vector<std::string>{"migrate"},
                                              {"stats"},
                                              {"dead-letters"},
                                              {"dead-letters", "list"},
                                              {"dead-letters", "show"},
                                              {"requeue"},
                                              {"purge"}}) {
    auto args = sub;
    args.push_back("--help");
    const auto r = tool(args);
    BOOST_TEST(r.code == 0, sub.back() << ": " << r.err);
    const bool group = sub == std::vector<std::string>{"dead-letters"};  // no store of its own
    BOOST_TEST((group || r.out.find("--store") != std::string::npos), r.out);
  }
  BOOST_TEST(tool({}).code == 2);                                            // no subcommand
  BOOST_TEST(tool({"stats"}).code == 2);                                     // no store
  BOOST_TEST(tool({"frobnicate"}).code == 2);                                // no such subcommand
  BOOST_TEST(tool({"stats", "--store", "nowhere"}).code == 2);               // no scheme
  BOOST_TEST(tool({"stats", "--store", "oracle://u@h/db"}).code == 2);       // not in this build
  BOOST_TEST(tool({"stats", "--store", "mysql://u@h:99999/db"}).code == 2);  // bad port
  BOOST_TEST(tool({"stats", "--store", "mysql://u@[::1/db"}).code == 2);     // no ']'
  // An IPv6 address in brackets: read (nothing listens on port 1, so it cannot connect).
#if defined(OUTBOX_TOOL_TEST_POSTGRESQL)
  const auto v6 = tool({"stats", "--store", "postgresql://u:pw@[::1]:1/db"});
  BOOST_TEST(v6.code == 1, v6.err);
  BOOST_TEST(v6.err.find("::1") != std::string::npos, v6.err);
#endif
  BOOST_TEST(tool({"requeue", "--store", url}).code == 2);  // neither ids nor --all
  BOOST_TEST(tool({"requeue", "--store", url, "not-a-uuid"}).code == 2);
  const auto age = tool({"purge", "--store", url, "--published-before", "7x"});
  BOOST_TEST(age.code == 2);
  BOOST_TEST(age.err.find("7d") != std::string::npos, age.err);
  BOOST_TEST(tool({"purge", "--store", url}).code == 2);  // neither window
  // The store from the environment.
  BOOST_TEST(tool({"stats"}, url).code == 0);
  // ... or from a TOML file, a subcommand's options under its name; a key that names no option
  // is refused, not ignored.
  const auto config = std::filesystem::temp_directory_path() /
                      ("outbox-tool-" + std::to_string(::getpid()) + ".toml");
  std::ofstream(config) << "[stats]\nstore = \"" << url << "\"\njson = true\n";
  const auto from_file = tool({"--config", config.string(), "stats"});
  BOOST_TEST(from_file.code == 0, from_file.err);
  BOOST_TEST(nlohmann::json::parse(from_file.out).contains("pending"));
  std::ofstream(config) << "[relay]\nstore = \"" << url
                        << "\"\ntransport = \"zmq+tcp://127.0.0.1:5\"\n"
                        << "batch_sise = 3\n";
  const auto misspelt = tool({"--config", config.string(), "relay"});
  BOOST_TEST(misspelt.code == 2);
  BOOST_TEST(misspelt.err.find("batch_sise") != std::string::npos, misspelt.err);
  std::filesystem::remove(config);
  // The relay's own help.
  const auto relay_help = tool({"relay", "--help"});
  BOOST_TEST(relay_help.code == 0);
  BOOST_TEST(relay_help.out.find("--metrics-address") != std::string::npos, relay_help.out);
}

BOOST_AUTO_TEST_CASE(migrate_prints_the_schema_version) {
  fixture fx;  // migrated already: migrate again is a no-op that says where it is
  const auto text = tool({"migrate", "--store", url_of(fx)});
  BOOST_TEST(text.code == 0, text.err);
  BOOST_TEST(text.out ==
             "schema version " + std::to_string(fixture::store_type::schema_version) + "\n");
  const auto j = json_of(tool({"migrate", "--store", url_of(fx), "--json"}));
  BOOST_TEST(j.at("schema_version").get<int>() == fixture::store_type::schema_version);
}

BOOST_AUTO_TEST_CASE(dead_letters_are_listed_shown_requeued_and_published) {
  fixture fx;
  const auto url = url_of(fx);
  const auto dead = make_dead_letters(fx);
  auto stats = json_of(tool({"stats", "--store", url, "--json"}));
  BOOST_TEST(stats.at("dead").get<int>() == 3);
  BOOST_TEST(stats.at("pending").get<int>() == 0);
  BOOST_TEST(stats.at("in_flight").get<int>() == 0);
  const auto text_stats = tool({"stats", "--store", url});
  BOOST_TEST(text_stats.out.find("dead-lettered        3") != std::string::npos, text_stats.out);

  const auto list = json_of(tool({"dead-letters", "list", "--store", url, "--json"}));
  BOOST_TEST_REQUIRE(list.size() == 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    BOOST_TEST(list[i].at("id").get<std::string>() == dead[i].to_string());
    BOOST_TEST(list[i].at("event_type").get<std::string>() == "order_placed");
    BOOST_TEST(list[i].at("attempts").get<int>() == 1);
    BOOST_TEST(!list[i].at("last_error").get<std::string>().empty());
  }
  const auto limited =
      json_of(tool({"dead-letters", "list", "--store", url, "--json", "--limit", "1"}));
  BOOST_TEST(limited.size() == 1u);
  const auto table = tool({"dead-letters", "list", "--store", url});
  BOOST_TEST(table.out.find(dead[2].to_string()) != std::string::npos, table.out);

  const auto shown =
      json_of(tool({"dead-letters", "show", "--store", url, "--json", dead[1].to_string()}));
  BOOST_TEST(shown.at("payload").at("i").get<int>() == 4);
  BOOST_TEST(shown.at("headers").at("tenant").get<std::string>() == "acme");
  BOOST_TEST(shown.at("aggregate_id").get<std::string>() == "4");
  const auto unknown = outbox::make_uuid_v7().to_string();
  BOOST_TEST(tool({"dead-letters", "show", "--store", url, unknown}).code == 1);

  // One by id (and one that is not a dead letter: exit 1, the other still requeued) ...
  const auto some = tool({"requeue", "--store", url, "--json", dead[0].to_string(), unknown});
  BOOST_TEST(some.code == 1);
  const auto some_j = nlohmann::json::parse(some.out);
  BOOST_TEST(some_j.at("requeued").get<int>() == 1);
  BOOST_TEST(some_j.at("not_dead_lettered").at(0).get<std::string>() == unknown);
  // ... the rest of one event type (none here) and then all, in batches of one.
  const auto typed =
      json_of(tool({"requeue", "--store", url, "--json", "--all", "--event-type", "other"}));
  BOOST_TEST(typed.at("requeued").get<int>() == 0);
  // ... none dead-lettered in the future either (--since 0s), and --since needs --all.
  const auto since = json_of(tool({"requeue", "--store", url, "--json", "--all", "--since", "0s"}));
  BOOST_TEST(since.at("requeued").get<int>() == 0);
  BOOST_TEST(tool({"requeue", "--store", url, "--since", "1h", dead[1].to_string()}).code == 2);
  BOOST_TEST(tool({"requeue", "--store", url, "--all", "--since", "soon"}).code == 2);
  const auto all = tool({"requeue", "--store", url, "--all", "--batch", "1"});
  BOOST_TEST(all.code == 0, all.err);
  BOOST_TEST(all.out == "requeued 2\n");
  BOOST_TEST(all.err.find("requeued 2") != std::string::npos, all.err);  // progress, plain lines
  stats = json_of(tool({"stats", "--store", url, "--json"}));
  BOOST_TEST(stats.at("dead").get<int>() == 0);
  BOOST_TEST(stats.at("pending").get<int>() == 3);
  BOOST_TEST(publish_pending(fx) == 3u);
  stats = json_of(tool({"stats", "--store", url, "--json"}));
  BOOST_TEST(stats.at("pending").get<int>() == 0);
  BOOST_TEST(json_of(tool({"dead-letters", "list", "--store", url, "--json"})).empty());
}

// A reminder scheduled an hour ahead: `stats` counts it as scheduled, apart from the backlog
// (not pending, no age), in total and under its type, in JSON and in text.
BOOST_AUTO_TEST_CASE(stats_count_scheduled_events_apart_from_the_backlog) {
  outbox::event e{"reminder", "7", "due", "{}", {}};
  e.deliver_at = std::chrono::system_clock::now() + 1h;
  fixture fx;
  const auto url = url_of(fx);
  {
    auto sql = fx.open_session();
    auto st = fx.make_store(*sql);  // sets the session up: before the transaction
    auto tx = fixture::begin(*sql);
    (void)outbox::writer(*st).enqueue(*sql, e);
    tx->commit();
  }
  BOOST_TEST(publish_pending(fx) == 0u);  // not due
  const auto j = json_of(tool({"stats", "--store", url, "--json"}));
  BOOST_TEST(j.at("scheduled").get<int>() == 1);
  BOOST_TEST(j.at("pending").get<int>() == 0);
  BOOST_TEST(j.at("waiting_retry").get<int>() == 0);
  BOOST_TEST(j.at("oldest_pending_age_ms").get<std::int64_t>() == 0);
  const auto& types = j.at("by_aggregate_type");
  BOOST_TEST_REQUIRE(types.size() == 1u, j.dump());
  BOOST_TEST(types[0].at("scheduled").get<int>() == 1);
  const auto text = tool({"stats", "--store", url});
  BOOST_TEST(text.out.find("scheduled            1 (not due yet") != std::string::npos, text.out);
}

// Events of two aggregate types; the "invoice" ones fail once and wait an hour for their retry:
// `stats` counts them as pending and waiting for a retry, in total and under their type (the
// published "order" ones make no entry); `--watch` looks again until SIGINT and exits 0.
BOOST_AUTO_TEST_CASE(stats_count_retries_per_aggregate_type_and_watch_ends_cleanly) {
  fixture fx;
  const auto url = url_of(fx);
  {
    auto sql = fx.open_session();
    auto st = fx.make_store(*sql);
    outbox::writer w(*st);
    {
      auto tx = fixture::begin(*sql);
      for (int i = 0; i < 5; ++i)
        (void)w.enqueue(
            *sql,
            outbox::event{i < 3 ? "order" : "invoice", std::to_string(i), "created", "{}", {}});
      tx->commit();
    }
    outbox::testing::memory_transport broker;
    outbox::testing::faulty_transport<outbox::testing::memory_transport> faulty(broker);
    faulty.fail_when([](const outbox::message& m) { return m.aggregate_type == "invoice"; },
                     outbox::errc::transient);
    outbox::relay relay(*st, faulty, {.batch_size = 100},
                        outbox::exponential_backoff{.initial = 1h, .max_delay = 1h, .jitter = 0});
    while (relay.run_once() > 0) {
    }
    BOOST_TEST(relay.stats().retried == 2u);
  }
  const auto j = json_of(tool({"stats", "--store", url, "--json"}));
  BOOST_TEST(j.at("pending").get<int>() == 2);
  BOOST_TEST(j.at("waiting_retry").get<int>() == 2);
  BOOST_TEST(j.at("in_flight").get<int>() == 0);
  BOOST_TEST(j.at("dead").get<int>() == 0);
  BOOST_TEST(j.at("oldest_pending_age_ms").get<std::int64_t>() >= 0);
  const auto& types = j.at("by_aggregate_type");
  BOOST_TEST_REQUIRE(types.size() == 1u, j.dump());
  BOOST_TEST(types[0].at("aggregate_type").get<std::string>() == "invoice");
  BOOST_TEST(types[0].at("pending").get<int>() == 2);
  BOOST_TEST(types[0].at("waiting_retry").get<int>() == 2);
  const auto text = tool({"stats", "--store", url});
  BOOST_TEST(text.out.find("pending              2 (waiting for a retry: 2)") != std::string::npos,
             text.out);
  BOOST_TEST(text.out.find("\ninvoice ") != std::string::npos, text.out);

  // --watch, plain (not a terminal) and JSON: looks follow one another until SIGINT.
  for (const bool as_json : {false, true}) {
    std::vector<std::string> args{"stats", "--store", url, "--watch", "200ms"};
    if (as_json) args.push_back("--json");
    tool_process watch(args);
    const auto until = std::chrono::steady_clock::now() + 60s;
    const std::string marker = as_json ? "backlog_change_per_s" : "since the last look";
    while (watch.out().find(marker) == std::string::npos && watch.running() &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(50ms);
    watch.signal(SIGINT);  // taken by the tool from its first look on: the marker is in the 2nd
    BOOST_TEST(watch.wait(30s) == 0, watch.log());
    const auto out = watch.out();
    BOOST_TEST(out.find(marker) != std::string::npos, out);
    if (as_json) {
      std::istringstream lines(out);
      int n = 0;
      for (std::string line; std::getline(lines, line); ++n)
        BOOST_TEST(nlohmann::json::parse(line).at("waiting_retry").get<int>() == 2);
      BOOST_TEST(n >= 2);
    }
  }
  BOOST_TEST(tool({"stats", "--store", url, "--watch", "10ms"}).code == 2);
}

BOOST_AUTO_TEST_CASE(purges_count_and_refuse_a_short_inbox_window) {
  fixture fx;
  const auto url = url_of(fx);
  (void)make_dead_letters(fx);  // 7 published, 3 dead
  {
    auto sql = fx.open_session();
    auto st = fx.make_store(*sql);
    auto tx = st->begin();
    for (int i = 0; i < 5; ++i)
      (void)st->record_delivery("billing", outbox::make_uuid_v7(),
                                std::chrono::system_clock::now() - std::chrono::hours(24 * 40));
    (void)st->record_delivery("billing", outbox::make_uuid_v7(), std::chrono::system_clock::now());
    tx.commit();
  }
  // Nothing published a day ago yet.
  BOOST_TEST(json_of(tool({"purge", "--store", url, "--json", "--published-before", "1d"}))
                 .at("purged")
                 .get<int>() == 0);
  const auto published =
      tool({"purge", "--store", url, "--published-before", "0s", "--batch", "3"});
  BOOST_TEST(published.code == 0, published.err);
  BOOST_TEST(published.out == "purged 7 published events\n");
  const auto stats = json_of(tool({"stats", "--store", url, "--json"}));
  BOOST_TEST(stats.at("dead").get<int>() == 3);  // dead letters are not published events

  const auto short_window = tool({"purge", "--store", url, "--inbox-before", "1d"});
  BOOST_TEST(short_window.code == 2);
  BOOST_TEST(short_window.err.find("--force") != std::string::npos, short_window.err);
  BOOST_TEST(short_window.err.find("applied twice") != std::string::npos, short_window.err);
  const auto inbox = json_of(tool({"purge", "--store", url, "--json", "--inbox-before", "30d"}));
  BOOST_TEST(inbox.at("purged").get<int>() == 5);
  const auto forced =
      json_of(tool({"purge", "--store", url, "--json", "--inbox-before", "0s", "--force"}));
  BOOST_TEST(forced.at("purged").get<int>() == 1);
  // The dead letters (not purged) were dead-lettered within the last day.
  const auto recent =
      json_of(tool({"requeue", "--store", url, "--json", "--all", "--since", "1d"}));
  BOOST_TEST(recent.at("requeued").get<int>() == 3);
}

// The config file is TOML to the spec: a quoted value is read whole, its '#', quotes, '=' and
// non-ASCII characters kept (a cut at the '#' made the store URL "bad port", exit 2); an array
// gives a repeated option its values; a syntax error names the file, line and column.
BOOST_AUTO_TEST_CASE(a_config_file_is_toml_and_its_quoted_values_are_read_whole) {
  fixture fx;
  const auto dead = make_dead_letters(fx);
  const auto dir =
      std::filesystem::temp_directory_path() / ("outbox-tool-config-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto config = dir / "outbox.toml";
  // A TOML basic string: '"' and '\' escaped, the rest as it is.
  const auto quoted = [](const std::string& s) {
    std::string q = "\"";
    for (const char c : s) {
      if (c == '"' || c == '\\') q.push_back('\\');
      q.push_back(c);
    }
    return q + "\"";
  };
  const std::string tricky = "Pw#Secret42 \"q\" =\xc3\xa9";  // ends in e-acute, UTF-8
  // The store URL.
#if defined(OUTBOX_TOOL_TEST_SQLITE)
  // A file name with all of them but '=' (a sqlite URL refuses that): migrate creates it.
  const auto db = dir / "orders #1 \"q\" '\xc3\xa9'.db";
  std::ofstream(config) << "[migrate]\nstore = " << quoted("sqlite://" + db.string())
                        << "  # another\n";
  const auto migrated = tool({"--config", config.string(), "migrate"});
  BOOST_TEST(migrated.code == 0, migrated.err);
  BOOST_TEST(std::filesystem::exists(db), db);
#else
  // A wrong password, written as is: read whole it reaches the server, which refuses it (exit
  // 1, not the usage error of a URL cut at its '#'), and it is printed nowhere.
  std::string wrong = url_of(fx, "PASSWORD");
  wrong.replace(wrong.find("PASSWORD"), 8, tricky);
  std::ofstream(config) << "[stats]\nstore = " << quoted(wrong) << "  # a comment\n";
  const auto refused = tool({"--config", config.string(), "stats"});
  BOOST_TEST(refused.code == 1, refused.err);
  BOOST_TEST(refused.err.find("outbox: error") != std::string::npos, refused.err);
  BOOST_TEST(refused.err.find("bad port") == std::string::npos, refused.err);
  BOOST_TEST(refused.err.find(tricky) == std::string::npos, refused.err);
  BOOST_TEST(refused.out.find(tricky) == std::string::npos, refused.out);
#endif
  const auto url = url_of(fx);
  // A transport parameter, whole: the zmq transport quotes the value it refuses.
#if defined(OUTBOX_TOOL_TEST_TRANSPORT_ZEROMQ)
  std::ofstream(config) << "[relay]\nstore = " << quoted(url)
                        << "\ntransport = " << quoted("zmq+tcp://127.0.0.1:5?connect=" + tricky)
                        << "\n";
  const auto relay = tool({"--config", config.string(), "relay"});
  BOOST_TEST(relay.code == 2);
  BOOST_TEST(
      relay.err.find("connect takes true or false, got '" + tricky + "'") != std::string::npos,
      relay.err);
#endif
  // An array: requeue's ids, over lines, with comments.
  std::ofstream(config) << "[requeue]\nstore = " << quoted(url) << "\njson = true\nids = [\n  \""
                        << dead[0].to_string() << "\",  # the first\n  '" << dead[2].to_string()
                        << "',\n]\n";
  const auto requeued = json_of(tool({"--config", config.string(), "requeue"}));
  BOOST_TEST(requeued.at("requeued").get<int>() == 2);
  const auto left = json_of(tool({"dead-letters", "list", "--store", url, "--json"}));
  BOOST_TEST_REQUIRE(left.size() == 1u);
  BOOST_TEST(left[0].at("id").get<std::string>() == dead[1].to_string());
  // A syntax error (an unquoted URL on line 3): the file, line and column; exit 2.
  std::ofstream(config) << "# the relay\n[stats]\nstore = " << url << "\n";
  const auto syntax = tool({"--config", config.string(), "stats"});
  BOOST_TEST(syntax.code == 2);
  BOOST_TEST(syntax.err.find(config.string() + ":3:9: ") != std::string::npos, syntax.err);
  // A section that names no subcommand is refused too, at its place.
  std::ofstream(config) << "[stat]\nstore = " << quoted(url) << "\n";
  const auto section = tool({"--config", config.string(), "stats", "--store", url});
  BOOST_TEST(section.code == 2);
  BOOST_TEST(section.err.find(".toml:1:2: [stat] names no subcommand") != std::string::npos,
             section.err);
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_store_that_refuses_exits_1_without_the_password) {
  fixture fx;
#if defined(OUTBOX_TOOL_TEST_SQLITE)
  const auto r = tool({"stats", "--store", "sqlite:///nonexistent-dir-outbox/x.db"});
  BOOST_TEST(r.code == 1);
  BOOST_TEST(r.err.find("outbox: error") != std::string::npos, r.err);
#else
  const std::string secret = "wrong-Secret-4711";
  const auto r = tool({"stats", "--store", url_of(fx, secret)});
  BOOST_TEST(r.code == 1);
#if defined(OUTBOX_TOOL_TEST_POSTGRESQL)
  BOOST_TEST(r.err.starts_with("outbox: error (misconfigured, postgresql 28P01): "), r.err);
#else
  BOOST_TEST(r.err.starts_with("outbox: error (misconfigured, mysql 1045): "), r.err);
#endif
  BOOST_TEST(r.err.find(secret) == std::string::npos, r.err);
  BOOST_TEST(r.out.find(secret) == std::string::npos, r.out);
#endif
}

// A store it cannot reach (a server away: a port bound by this test, where nothing listens;
// SQLite: a file in a directory that does not exist) ends each subcommand, and the relay's
// start-up, with exit 1 and the error's class, adapter and native code, as the store classifies
// its errors: `outbox: error (transient, postgresql 08001): ...`.
BOOST_AUTO_TEST_CASE(a_store_it_cannot_reach_exits_1_with_the_class_and_native_code) {
#if defined(OUTBOX_TOOL_TEST_SQLITE)
  const std::string url = "sqlite:///nonexistent-dir-outbox/x.db";
  const std::string origin = "outbox: error (misconfigured, sqlite 14 ";
#else
  fixture fx;
  // Bound and not listening: a connection to it is refused, and no other process takes it.
  const int closed = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  BOOST_TEST_REQUIRE(::bind(closed, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
  socklen_t len = sizeof at;
  ::getsockname(closed, reinterpret_cast<sockaddr*>(&at), &len);
  std::string url = url_of(fx);
  const auto host = url.rfind('@') + 1;
  url.replace(host, url.find('/', host) - host, "127.0.0.1:" + std::to_string(ntohs(at.sin_port)));
#if defined(OUTBOX_TOOL_TEST_POSTGRESQL)
  const std::string origin = "outbox: error (transient, postgresql 08001): ";
#else
  const std::string origin = "outbox: error (transient, mysql 200";  // 2002 or 2003
#endif
#endif
  const auto socket = std::filesystem::temp_directory_path() /
                      ("outbox-tool-" + std::to_string(::getpid()) + "-unreachable.sock");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"stats", "--store", url},
        {"migrate", "--store", url},
        {"dead-letters", "list", "--store", url},
        {"requeue", "--store", url, "--all"},
        {"purge", "--store", url, "--published-before", "7d"},
        {"relay", "--store", url, "--transport", "zmq+ipc://" + socket.string(),
         "--metrics-address", "off"}}) {
    const auto r = tool(args);
    BOOST_TEST(r.code == 1, args.front() << ": " << r.err);
    BOOST_TEST(r.err.find(origin) != std::string::npos, args.front() << ": " << r.err);
  }
#if !defined(OUTBOX_TOOL_TEST_SQLITE)
  ::close(closed);
#endif
}

#if defined(OUTBOX_TOOL_TEST_POSTGRESQL)
// A connection parameter libpq refuses before dialling is misconfigured, not an outage: the
// relay stops at once instead of trying again.
BOOST_AUTO_TEST_CASE(a_connection_parameter_libpq_refuses_is_misconfigured) {
  fixture fx;
  const auto url = url_of(fx) + "&sslmode=bogus";
  const auto socket = std::filesystem::temp_directory_path() /
                      ("outbox-tool-" + std::to_string(::getpid()) + "-bogus.sock");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"stats", "--store", url},
        {"relay", "--store", url, "--transport", "zmq+ipc://" + socket.string(),
         "--metrics-address", "off"}}) {
    const auto r = tool(args);
    BOOST_TEST(r.code == 1, args.front() << ": " << r.err);
    BOOST_TEST(r.err.find("outbox: error (misconfigured, postgresql 22023): ") != std::string::npos,
               args.front() << ": " << r.err);
  }
}
#endif

BOOST_AUTO_TEST_SUITE_END()

OUTBOX_TOOL_TEST_MAIN()
