// The `outbox` tool's --config file (tools/config_file.hpp), without a server: a CLI11 app shaped
// like the tool's (subcommands with a store, a transport, numbers, flags, positional ids) reads
// TOML files. Quoted values come whole ('#', quotes, '=' and non-ASCII kept: CLI11's own reader
// cut them at the first '#'), arrays give a repeated option its values, keys that name no option
// are refused, and syntax errors name the file, line and column.
#define BOOST_TEST_MODULE outbox tool config
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../../tools/config_file.hpp"

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// The options a file can set, as the tool's are laid out.
struct values {
  std::string stats_store, relay_store, transport, requeue_store, event_type;
  bool json = false;
  std::size_t batch_size = 500, limit = 100;
  std::vector<std::string> ids;
};

/// Parses `args` after `--config FILE`, FILE holding `toml`: the values, or the error's message
/// (empty when it parsed).
class tool_app {
 public:
  tool_app() {
    outbox_tool::add_config_option(app_, "read options from a TOML file");
    auto* stats = app_.add_subcommand("stats");
    stats->add_option("--store", v_.stats_store);
    stats->add_flag("--json", v_.json);
    auto* relay = app_.add_subcommand("relay");
    relay->add_option("--store", v_.relay_store)->required();
    relay->add_option("--transport", v_.transport)->required();
    relay->add_option("--batch-size", v_.batch_size);
    auto* requeue = app_.add_subcommand("requeue");
    requeue->add_option("--store", v_.requeue_store);
    requeue->add_option("ids", v_.ids);
    requeue->add_option("--event-type", v_.event_type);
    auto* dead = app_.add_subcommand("dead-letters");
    auto* list = dead->add_subcommand("list");
    list->add_option("--limit", v_.limit);
  }

  std::string parse(const std::string& toml, std::vector<std::string> args) {
    std::ofstream(file_, std::ios::binary) << toml;
    args.insert(args.begin(), {"outbox", "--config", file_.string()});
    std::vector<char*> argv;
    argv.reserve(args.size());
    for (auto& a : args) argv.push_back(a.data());
    try {
      app_.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError& e) {
      return e.what();
    }
    return {};
  }

  [[nodiscard]] const values& got() const { return v_; }
  [[nodiscard]] std::string file() const { return file_.string(); }

  tool_app(const tool_app&) = delete;
  tool_app& operator=(const tool_app&) = delete;
  ~tool_app() { std::filesystem::remove(file_); }

 private:
  CLI::App app_{"outbox"};
  values v_;
  std::filesystem::path file_ = std::filesystem::temp_directory_path() /
                                ("outbox-config-" + std::to_string(::getpid()) + ".toml");
};

/// A file the tool refuses: where (`:line:col: ` after the file's name) and what it says.
struct refusal {
  std::string toml, at, what;
};

/// Each of `cases` is refused with the file, line and column, and its words.
void expect_refused_at(const std::vector<refusal>& cases) {
  for (const refusal& r : cases) {
    tool_app app;
    const std::string error = app.parse(r.toml, {"stats"});
    BOOST_TEST(contains(error, app.file() + r.at), r.toml << " -> " << error);
    BOOST_TEST(contains(error, r.what), r.toml << " -> " << error);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(quoted_values_keep_hashes_quotes_equals_and_non_ascii) {
  tool_app app;
  const std::string error = app.parse(
      "# the relay\n"
      "[relay]  # its options\n"
      "store = \"postgresql://outbox:Pw#Secret42@db:5432/orders\"  # the password has a '#'\n"
      "transport = \"kafka://k:9092?topic_pattern=outbox.#.{aggregate_type}"
      "&sasl.password=a#b\\\"c'd=e\\u00e9\xe2\x82\xac\"\n"
      "batch-size = 1_000\n",
      {"relay"});
  BOOST_TEST_REQUIRE(error.empty(), error);
  BOOST_TEST(app.got().relay_store == "postgresql://outbox:Pw#Secret42@db:5432/orders");
  BOOST_TEST(app.got().transport ==
             "kafka://k:9092?topic_pattern=outbox.#.{aggregate_type}"
             "&sasl.password=a#b\"c'd=e\xc3\xa9\xe2\x82\xac");
  BOOST_TEST(app.got().batch_size == 1000u);
}

BOOST_AUTO_TEST_CASE(literal_and_multiline_strings_are_read_as_toml_says) {
  tool_app app;
  const std::string error = app.parse(
      "[stats]\n"
      "store = 'mysql://u:p#\\\"w@h/db'  # a literal string: no escapes\n"
      "json = true\n",
      {"stats"});
  BOOST_TEST_REQUIRE(error.empty(), error);
  BOOST_TEST(app.got().stats_store == "mysql://u:p#\\\"w@h/db");
  BOOST_TEST(app.got().json);
  tool_app multi;
  const std::string multi_error = multi.parse(
      "[stats]\n"
      "store = \"\"\"\\\n"
      "  sqlite:///var/lib/#app/\\\n"
      "  orders.db\"\"\"\n",
      {"stats"});
  BOOST_TEST_REQUIRE(multi_error.empty(), multi_error);
  BOOST_TEST(multi.got().stats_store == "sqlite:///var/lib/#app/orders.db");
  BOOST_TEST(!multi.got().json);
}

BOOST_AUTO_TEST_CASE(an_array_gives_a_repeated_option_its_values) {
  tool_app app;
  const std::string error = app.parse(
      "[requeue]\n"
      "ids = [\n"
      "  \"0190a1b2-0000-7000-8000-000000000001\",  # the first\n"
      "  '0190a1b2-0000-7000-8000-000000000002',\n"
      "]\n"
      "event-type = \"order#placed=\"\n",
      {"requeue"});
  BOOST_TEST_REQUIRE(error.empty(), error);
  BOOST_TEST(app.got().ids == (std::vector<std::string>{"0190a1b2-0000-7000-8000-000000000001",
                                                        "0190a1b2-0000-7000-8000-000000000002"}),
             boost::test_tools::per_element());
  BOOST_TEST(app.got().event_type == "order#placed=");
  // An option that takes one value is refused an array, as on the command line.
  tool_app one;
  const std::string two_types =
      one.parse("[requeue]\nevent-type = [\"order_placed\", \"order_paid\"]\n", {"requeue"});
  BOOST_TEST(contains(two_types, "--event-type"), two_types);
}

BOOST_AUTO_TEST_CASE(dotted_keys_inline_and_nested_tables_name_subcommands) {
  tool_app app;
  const std::string error = app.parse(
      "relay.store = \"sqlite:///a#b.db\"\n"
      "relay = { transport = \"zmq+tcp://127.0.0.1:5557\" }\n",
      {"relay"});
  // TOML: a table defined by dotted keys cannot be defined again inline.
  BOOST_TEST(contains(error, app.file() + ":2:"), error);
  tool_app dotted;
  const std::string dotted_error = dotted.parse(
      "relay.store = \"sqlite:///a#b.db\"\n"
      "relay.transport = \"zmq+tcp://127.0.0.1:5557\"\n"
      "stats = { json = true }\n"
      "[dead-letters.list]\n"
      "limit = 7\n",
      {"relay"});
  BOOST_TEST_REQUIRE(dotted_error.empty(), dotted_error);
  BOOST_TEST(dotted.got().relay_store == "sqlite:///a#b.db");
  BOOST_TEST(dotted.got().transport == "zmq+tcp://127.0.0.1:5557");
  BOOST_TEST(dotted.got().json);
  BOOST_TEST(dotted.got().limit == 7u);
}

BOOST_AUTO_TEST_CASE(the_command_line_wins) {
  tool_app app;
  const std::string error =
      app.parse("[relay]\nstore = \"sqlite:///file.db\"\ntransport = \"zmq+ipc:///x\"\n",
                {"relay", "--store", "sqlite:///line.db"});
  BOOST_TEST_REQUIRE(error.empty(), error);
  BOOST_TEST(app.got().relay_store == "sqlite:///line.db");
  BOOST_TEST(app.got().transport == "zmq+ipc:///x");
}

BOOST_AUTO_TEST_CASE(a_key_or_section_that_names_no_option_is_refused_at_its_place) {
  expect_refused_at({
      // Misspelt.
      {"[relay]\nstore = \"s\"\ntransport = \"t\"\nbatch_sise = 3\n",
       ":4:1: ", "'relay.batch_sise' names no option of 'relay'"},
      // No such option.
      {"\n  verbose = true\n", ":2:3: ", "'verbose' names no option"},
      // No such subcommand, with keys or without.
      {"[relya]\nstore = \"s\"\n", ":1:2: ", "[relya] names no subcommand"},
      {"[relya]\n", ":1:2: ", "[relya] names no subcommand"},
      // Nor a nested one.
      {"[relay.tuning]\nbatch-size = 3\n", ":1:8: ", "[relay.tuning] names no subcommand"},
      // A dotted key and an inline table.
      {"relay.stor = \"s\"\n", ":1:7: ", "'relay.stor' names no option of 'relay'"},
      {"stats = { json = true, jsn = 1 }\n", ":1:24: ", "'stats.jsn'"},
  });
}

BOOST_AUTO_TEST_CASE(a_syntax_error_names_the_file_line_and_column) {
  expect_refused_at({
      // An unquoted URL: TOML has no bare strings.
      {"# the relay\n[stats]\nstore = sqlite:///x.db\n", ":3:9: ", "value"},
      // A quote inside a basic string, not escaped.
      {"[stats]\nstore = \"mysql://u:p\"w@h/db\"\n", ":2:22: ", "'w'"},
      // An unknown escape.
      {"[stats]\nstore = \"a\\qb\"\n", ":2:", "escape"},
      // An unterminated string.
      {"[stats]\nstore = \"sqlite:///x.db\n", ":2:", "string"},
      // A key given twice.
      {"[stats]\njson = true\njson = false\n", ":3:", "json"},
      // A flag without a value (CLI11's INI reader took it as true).
      {"[stats]\njson\n", ":2:", ""},
      // Not UTF-8.
      {"[stats]\nstore = \"\xff\"\n", ":2:", "utf-8"},
      // An array of tables: not an option's values.
      {"[[relay]]\nstore = \"a\"\n", ":1:", "relay"},
      // An array of arrays.
      {"[requeue]\nids = [[\"a\"]]\n", ":2:", "requeue.ids"},
  });
}

BOOST_AUTO_TEST_CASE(numbers_booleans_and_dates_come_as_on_the_command_line) {
  tool_app app;
  const std::string error = app.parse(
      "[stats]\njson = false\n[relay]\nbatch-size = 0x10\n[dead-letters.list]\nlimit = +25\n",
      {"stats"});
  BOOST_TEST_REQUIRE(error.empty(), error);
  BOOST_TEST(!app.got().json);
  BOOST_TEST(app.got().batch_size == 16u);
  BOOST_TEST(app.got().limit == 25u);
  tool_app typed;
  const std::string wrong_type = typed.parse("[dead-letters.list]\nlimit = \"many\"\n", {"stats"});
  BOOST_TEST(contains(wrong_type, "many"), wrong_type);
}

BOOST_AUTO_TEST_CASE(one_config_file_at_most) {
  tool_app app;
  const std::string error =
      app.parse("[stats]\njson = true\n", {"--config", "other.toml", "stats"});
  BOOST_TEST(contains(error, "--config: At Most 1"), error);
}
