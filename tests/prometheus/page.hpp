#pragma once
// A registry's page as a scrape sees it (prometheus::TextSerializer), read back: its samples by
// series, and `promtool check metrics` over it when PROMTOOL names promtool (tests/meson.build
// passes it when found).

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <boost/test/unit_test.hpp>

namespace outbox::test {

/// The serialized page of a registry, and its samples.
struct page {
  std::string text;
  std::map<std::string, double> samples;  ///< "name" or "name{labels}" as written, to its value.

  explicit page(const ::prometheus::Registry& r)
      : text(::prometheus::TextSerializer().Serialize(r.Collect())) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      const auto sp = line.rfind(' ');
      samples[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
    }
  }

  /// The value of `name`'s series whose labels contain `labels` ("" for the series without
  /// labels); -1 (and a failed check) when there is none.
  double value(const std::string& name, const std::string& labels = "") const {
    for (const auto& [series, v] : samples) {
      if (labels.empty()
              ? series == name
              : series.rfind(name + "{", 0) == 0 && series.find(labels) != std::string::npos)
        return v;
    }
    BOOST_ERROR("no series " << name << "{" << labels << "} in\n" << text);
    return -1;
  }

  /// `name`'s series by the value of their label `label` (as written, escaped).
  std::map<std::string, double> by_label(const std::string& name, const std::string& label) const {
    std::map<std::string, double> out;
    const std::string key = label + "=\"";
    for (const auto& [series, v] : samples) {
      if (series.rfind(name + "{", 0) != 0) continue;
      const auto at = series.find(key);
      if (at == std::string::npos) continue;
      const auto begin = at + key.size();
      auto end = begin;
      while (end < series.size() && series[end] != '"') end += series[end] == '\\' ? 2 : 1;
      out[series.substr(begin, end - begin)] = v;
    }
    return out;
  }

  /// How many `# HELP` lines name `name` (a page with two fails the scrape).
  int help_lines(const std::string& name) const {
    int n = 0;
    for (std::size_t at = 0; (at = text.find("# HELP " + name + " ", at)) != std::string::npos;
         ++at)
      ++n;
    return n;
  }

  /// `promtool check metrics` reads the page without an error or a lint finding (exit 0);
  /// true when PROMTOOL is not set.
  bool check_with_promtool() const {
    const char* promtool = std::getenv("PROMTOOL");
    if (promtool == nullptr || *promtool == '\0') {
      BOOST_TEST_MESSAGE("PROMTOOL not set: the page is not checked with promtool");
      return true;
    }
    const auto file = std::filesystem::temp_directory_path() /
                      ("outbox-prometheus-page-" + std::to_string(::getpid()) + ".txt");
    std::ofstream(file) << text;
    const std::string command =
        std::string(promtool) + " check metrics < " + file.string() + " 2>&1";
    std::string out;
    FILE* p = ::popen(command.c_str(), "r");
    BOOST_TEST_REQUIRE(p != nullptr);
    char buf[512];
    while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
    const int status = ::pclose(p);
    std::filesystem::remove(file);
    const bool parsed = status == 0;
    BOOST_TEST(parsed, "promtool (status " << status << "): " << out << "\non\n" << text);
    return parsed;
  }
};

}  // namespace outbox::test
