#pragma once
// The run's directory: the files the parts leave there for the orchestrator and the ledger.

#include <cstdio>
#include <string>

#include "args.hpp"

namespace fault_harness {

inline std::string duplicates_log(const args& a) { return a.dir + "/duplicates.log"; }
/// The writer's retries: a line `retry` per failed attempt retried, `landed` per failed attempt
/// that had committed after all (found by its business rows; not retried).
inline std::string writer_log(const args& a) { return a.dir + "/writer.log"; }
/// How much longer than planned the servers were away so far (ms, a number; absent: none): the
/// consumers keep their inbox records that much longer (see server_fault_driver::overrun).
inline std::string window_extra_file(const args& a) { return a.dir + "/window-extra-ms"; }

inline long long count_lines_with(const std::string& path, const std::string& word) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return 0;
  long long n = 0;
  char line[64];
  while (std::fgets(line, sizeof line, f) != nullptr) n += std::string(line) == word + "\n";
  std::fclose(f);
  return n;
}

}  // namespace fault_harness
