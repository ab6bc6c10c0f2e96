#pragma once
// What the benchmarks share: the sample event, SQLite database copies, server addresses, the
// flags (with `--smoke`) and the timing record.

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <outbox/message.hpp>

namespace outbox::bench {

/// Event number `i`, about 240 bytes of JSON; `aggregates` > 0 spreads the events over that many
/// aggregates, 0 gives each event its own.
inline outbox::event sample_event(long i, long aggregates = 0) {
  return outbox::event{
      "order",
      std::to_string(aggregates > 0 ? i % aggregates : i),
      "order_placed",
      R"({"order_id":)" + std::to_string(i) +
          R"(,"customer":"customer-00042","currency":"EUR","total_cents":123456,)"
          R"("lines":[{"sku":"SKU-0001","qty":2,"price_cents":1999},)"
          R"({"sku":"SKU-0002","qty":1,"price_cents":8999}],"note":"leave at the door"})",
      {}};
}

/// Removes a SQLite database with its WAL and shared-memory files.
inline void remove_sqlite_db(const std::filesystem::path& p) {
  std::error_code ec;
  for (const char* s : {"", "-wal", "-shm"}) std::filesystem::remove(p.string() + s, ec);
}

/// A byte-identical copy of `pristine` beside it, so every run starts from the same rows.
inline std::filesystem::path fresh_copy(const std::filesystem::path& pristine,
                                        const std::string& name) {
  const auto run = pristine.parent_path() / (pristine.stem().string() + "-" + name + ".db");
  remove_sqlite_db(run);
  std::filesystem::copy_file(pristine, run);
  return run;
}

/// True when OUTBOX_REQUIRE_SERVICES=1 (CI): a server address that is missing fails the run.
inline bool services_required() {
  const char* v = std::getenv("OUTBOX_REQUIRE_SERVICES");
  return v && std::string_view(v) == "1";
}

/// The server address in the environment variable `var` (`what` says what it holds). Unset or
/// empty: exits 77 (Meson's SKIP), or 1 under OUTBOX_REQUIRE_SERVICES=1, as the tests do.
inline std::string service_address(const char* program, const char* var, const char* what) {
  const char* v = std::getenv(var);
  if (v && *v) return v;
  const bool required = services_required();
  std::cerr << program << ": set " << var << " (" << what
            << "): " << (required ? "FAIL (OUTBOX_REQUIRE_SERVICES=1)" : "SKIP") << "\n";
  std::exit(required ? 1 : 77);
}

/// The address in `var` of a server that only some parts of a benchmark use: empty when unset
/// (those parts do not run), except under OUTBOX_REQUIRE_SERVICES=1, where every part must run
/// (exits 1).
inline std::string optional_service_address(const char* program, const char* var,
                                            const char* what) {
  const char* v = std::getenv(var);
  if (v && *v) return v;
  if (services_required()) service_address(program, var, what);
  return {};
}

/// The libpq conninfo of OUTBOX_TEST_POSTGRESQL with `schema` first on the search path; exits
/// as service_address when the variable is unset.
inline std::string postgresql_connect_string(const char* program, const char* schema) {
  return service_address(program, "OUTBOX_TEST_POSTGRESQL", "libpq conninfo") +
         " options='-c search_path=" + schema + " -c client_min_messages=warning'";
}

/// OUTBOX_TEST_MYSQL (a SOCI mysql connect string) on the database `db` (empty: none) with
/// utf8mb4; exits as service_address when the variable is unset.
inline std::string mysql_connect_string(const char* program, const std::string& db) {
  const std::string base =
      service_address(program, "OUTBOX_TEST_MYSQL", "SOCI mysql connect string");
  std::string out;  // without its db= (SOCI takes the first value of a keyword)
  std::istringstream words(base);
  for (std::string w; words >> w;)
    if (w.rfind("db=", 0) != 0 && w.rfind("dbname=", 0) != 0 && w.rfind("charset=", 0) != 0)
      out += w + " ";
  return out + (db.empty() ? "" : "db=" + db + " ") + "charset=utf8mb4";
}

/// The `--name VALUE` flags of a benchmark, each bound to the variable it sets, and `--smoke`
/// (no value). `parse` prints `usage: <usage>` and exits 2 on an unknown flag; a number that
/// does not parse reads as 0 (strtol); a last flag without a value is ignored.
class flags {
 public:
  explicit flags(std::string usage) : usage_(std::move(usage)) {}

  flags& on(const std::string& name, long& v) {
    return on(name, [&v](const char* s) { v = std::strtol(s, nullptr, 10); });
  }
  flags& on(const std::string& name, double& v) {
    return on(name, [&v](const char* s) { v = std::strtod(s, nullptr); });
  }
  flags& on(const std::string& name, std::string& v) {
    return on(name, [&v](const char* s) { v = s; });
  }
  flags& on(const std::string& name, std::filesystem::path& v) {
    return on(name, [&v](const char* s) { v = s; });
  }

  /// `--smoke`, the smoke run of CI (bench/meson.build): `shrink` sets every size of the
  /// program so that it runs each of its parts in seconds, before the other flags are applied
  /// (`--smoke --rows 500` runs 500 rows). Its ratios are printed, and mean nothing.
  flags& on_smoke(std::function<void()> shrink) {
    shrink_ = std::move(shrink);
    return *this;
  }

  /// Applies the flags; returns whether this is a smoke run.
  bool parse(int argc, char** argv) const {
    bool smoke = false;
    for (int i = 1; i < argc; ++i) {
      if (std::string_view(argv[i]) != "--smoke") {
        ++i;  // its value
        continue;
      }
      if (!shrink_) usage();
      smoke = true;
    }
    if (smoke) {
      shrink_();
      std::cout << "smoke run (--smoke): small sizes, the ratios mean nothing\n";
    }
    for (int i = 1; i < argc; ++i) {
      if (std::string_view(argv[i]) == "--smoke") continue;
      if (i + 1 >= argc) break;
      const auto it = setters_.find(argv[i]);
      if (it == setters_.end()) usage();
      it->second(argv[++i]);
    }
    return smoke;
  }
  /// Prints the usage line and exits 2.
  [[noreturn]] void usage() const {
    std::cerr << "usage: " << usage_ << (shrink_ ? " [--smoke]" : "") << "\n";
    std::exit(2);
  }

 private:
  flags& on(const std::string& name, std::function<void(const char*)> set) {
    setters_[name] = std::move(set);
    return *this;
  }

  std::string usage_;
  std::map<std::string, std::function<void(const char*)>, std::less<>> setters_;
  std::function<void()> shrink_;
};

/// Rows done in a time.
struct result {
  double seconds = 0;
  long long rows = 0;
  [[nodiscard]] double rate() const { return static_cast<double>(rows) / seconds; }
};

/// The rates of one contender over the rounds of a benchmark.
struct rates {
  std::vector<double> v;
  void add(const result& r) { v.push_back(r.rate()); }
  [[nodiscard]] double best() const {
    return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
  }
  [[nodiscard]] double median() const {
    if (v.empty()) return 0;
    std::vector<double> s = v;
    std::sort(s.begin(), s.end());
    const std::size_t n = s.size();
    return n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
  }
  /// The median of the ratios of runs made side by side (`v[i]` / `other.v[i]`, each pair in
  /// one round): a host that is slower for a while slows both of a pair, so this ratio holds on
  /// a noisy machine where best-of and median of each contender drift apart.
  [[nodiscard]] double paired_median(const rates& other) const {
    rates r;
    for (std::size_t i = 0; i < std::min(v.size(), other.v.size()); ++i)
      if (other.v[i] > 0) r.v.push_back(v[i] / other.v[i]);
    return r.median();
  }
};

}  // namespace outbox::bench
