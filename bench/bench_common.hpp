#pragma once
// What the benchmarks share: the sample event, SQLite database copies, PostgreSQL addresses,
// and the timing record.

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <outbox/message.hpp>

namespace outbox::bench {

/// Event number `i`, about 240 bytes of JSON; `aggregates` > 0 spreads the events over that many
/// aggregates, 0 gives each event its own.
inline outbox::event sample_event(long i, long aggregates = 0) {
  return outbox::event{
      "order", std::to_string(aggregates > 0 ? i % aggregates : i), "order_placed",
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

/// The libpq conninfo of OUTBOX_TEST_POSTGRESQL with `schema` first on the search path; exits
/// with a usage message when the variable is unset.
inline std::string postgresql_connect_string(const char* program, const char* schema) {
  const char* base = std::getenv("OUTBOX_TEST_POSTGRESQL");
  if (!base || !*base) {
    std::cerr << program << ": set OUTBOX_TEST_POSTGRESQL (libpq conninfo)\n";
    std::exit(2);
  }
  return std::string(base) + " options='-c search_path=" + schema +
         " -c client_min_messages=warning'";
}

/// Rows done in a time.
struct result {
  double seconds = 0;
  long long rows = 0;
  [[nodiscard]] double rate() const { return static_cast<double>(rows) / seconds; }
};

}  // namespace outbox::bench
