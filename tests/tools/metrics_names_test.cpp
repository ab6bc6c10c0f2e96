// `outbox relay`'s /metrics keeps its metric names, types, HELP texts and label names: the page,
// rendered with every family it can show (a backlog sample, a log-tailing store, aggregate
// types), is compared with metrics_names.txt, written from the page as the tool rendered it
// before it moved to prometheus-cpp (issue 34). A name that changes breaks dashboards and alert
// rules: it changes here on purpose or not at all. And the page is Prometheus text: `promtool
// check metrics` reads it without a finding (when PROMTOOL names promtool).
#define BOOST_TEST_MODULE outbox relay metric names
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../../tools/relay/metrics_page.hpp"

namespace {

using namespace std::chrono_literals;

/// What the page says of each family: "name type labels help", one a line, sorted. The labels
/// are those of the family's samples (a histogram's `le` included), comma-separated, "-" none.
std::vector<std::string> families(const std::string& page) {
  std::map<std::string, std::string> type, help;
  std::map<std::string, std::set<std::string>> labels;
  std::istringstream in(page);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# HELP ", 0) == 0) {
      const auto rest = line.substr(7);
      const auto sp = rest.find(' ');
      help[rest.substr(0, sp)] = rest.substr(sp + 1);
    } else if (line.rfind("# TYPE ", 0) == 0) {
      const auto rest = line.substr(7);
      const auto sp = rest.find(' ');
      type[rest.substr(0, sp)] = rest.substr(sp + 1);
    } else if (!line.empty() && line[0] != '#') {
      std::string name = line.substr(0, line.find_first_of("{ "));
      for (const char* suffix : {"_bucket", "_sum", "_count"})
        if (!type.count(name) && name.ends_with(suffix) &&
            type.count(name.substr(0, name.size() - std::string(suffix).size())))
          name.resize(name.size() - std::string(suffix).size());
      auto& set = labels[name];
      if (const auto open = line.find('{'); open != std::string::npos) {
        const auto close = line.find('}', open);
        std::istringstream pairs(line.substr(open + 1, close - open - 1));
        for (std::string pair; std::getline(pairs, pair, ',');)
          if (const auto eq = pair.find('='); eq != std::string::npos)
            set.insert(pair.substr(0, eq));
      }
    }
  }
  std::vector<std::string> out;
  for (const auto& [name, t] : type) {
    std::string l;
    for (const auto& k : labels[name]) l += (l.empty() ? "" : ",") + k;
    out.push_back(name + " " + t + " " + (l.empty() ? "-" : l) + " " + help[name]);
  }
  return out;
}

/// The page with every family: a backlog sample of a log-tailing store, two aggregate types.
std::string full_page() {
  outbox_tool::relay_service::relay_view v{
      .totals = {.batches = 2, .published = 5, .retried = 1, .dead_lettered = 1},
      .running = 1,
      .renders = 1,
      .max_types = 100,
      .tails_the_log = true,
      .slot_at_risk = false,
      .stranded = 0};
  outbox_tool::relay_service::shared_metrics m;
  outbox::backlog_stats b;
  b.pending = 3;
  b.dead = 1;
  b.oldest_pending_age = 2s;
  m.backlog = b;
  m.by_type = {{"order", b}, {"invoice", b}};
  m.backlog_at = 1.8e9;
  return outbox_tool::relay_service::render_metrics(v, m);
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_page_keeps_its_names_types_labels_and_help) {
  const auto actual = families(full_page());
  std::vector<std::string> expected;
  const char* path = boost::unit_test::framework::master_test_suite().argv[1];
  std::ifstream in(path);
  BOOST_TEST_REQUIRE(in.good(), "cannot read " << path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') expected.push_back(line);
  std::ostringstream all;
  for (const auto& f : actual) all << f << "\n";
  BOOST_TEST(actual == expected, "the page's families now:\n" << all.str());
}

BOOST_AUTO_TEST_CASE(the_page_is_prometheus_text) {
  const char* promtool = std::getenv("PROMTOOL");
  if (promtool == nullptr || *promtool == '\0') {
    BOOST_TEST_MESSAGE("PROMTOOL not set: the page is not checked with promtool");
    return;
  }
  const std::string page = full_page();
  const auto file = std::filesystem::temp_directory_path() /
                    ("outbox-metrics-page-" + std::to_string(::getpid()) + ".txt");
  std::ofstream(file) << page;
  const std::string command = std::string(promtool) + " check metrics < " + file.string() + " 2>&1";
  FILE* p = ::popen(command.c_str(), "r");
  BOOST_TEST_REQUIRE(p != nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  const int status = ::pclose(p);
  std::filesystem::remove(file);
  BOOST_TEST(status == 0, "promtool: " << out << "\non\n" << page);
}
