#pragma once
// The pristine SQLite outbox the SQLite-backed benchmarks start every run from (through
// outbox::bench::fresh_copy).

#include <filesystem>
#include <vector>

#include <soci/soci.h>

#include <outbox/sqlite/store.hpp>
#include <outbox/writer.hpp>

#include "bench_common.hpp"

namespace outbox::bench {

/// Writes `rows` pending sample events (see sample_event; `aggregates` as there) into a new
/// database at `path`, 500 per enqueue, then checkpoints the WAL so a file copy is complete.
inline void build_sqlite_pristine(const std::filesystem::path& path, long rows,
                                  long aggregates = 0) {
  remove_sqlite_db(path);
  soci::session sql(soci::sqlite3, "db=" + path.string());
  outbox::sqlite::store::configure(sql);
  outbox::sqlite::store::migrate(sql);
  outbox::writer<outbox::sqlite::store> w;
  std::vector<outbox::event> chunk;
  soci::transaction tx(sql);
  for (long i = 0; i < rows;) {
    chunk.clear();
    for (int k = 0; k < 500 && i < rows; ++k, ++i) chunk.push_back(sample_event(i, aggregates));
    w.enqueue(sql, chunk);
  }
  tx.commit();
  sql << "PRAGMA wal_checkpoint(TRUNCATE)";
}

}  // namespace outbox::bench
