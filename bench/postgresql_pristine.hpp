#pragma once
// The pristine PostgreSQL outbox the PostgreSQL-backed relay benchmarks start every run from: a
// schema of its own, filled once, and a copy of its rows to refill the outbox between runs.

#include <string>
#include <vector>

#include <soci/soci.h>

#include <outbox/postgresql/store.hpp>
#include <outbox/writer.hpp>

#include "bench_common.hpp"

namespace outbox::bench {

/// Drops and creates `schema` (the session's search path must name it first, see
/// postgresql_connect_string), migrates it, writes `rows` pending sample events (see
/// sample_event; `aggregates` as there), 1,000 per transaction, and keeps a copy of them in the
/// table outbox_pristine.
inline void build_postgresql_pristine(soci::session& sql, const std::string& schema, long rows,
                                      long aggregates = 0) {
  sql << "DROP SCHEMA IF EXISTS " + schema + " CASCADE";
  sql << "CREATE SCHEMA " + schema;
  outbox::postgresql::store::migrate(sql);
  outbox::writer<outbox::postgresql::store> w;
  std::vector<outbox::event> chunk;
  for (long i = 0; i < rows;) {
    soci::transaction tx(sql);
    chunk.clear();
    for (int k = 0; k < 1000 && i < rows; ++k, ++i) chunk.push_back(sample_event(i, aggregates));
    w.enqueue(sql, chunk);
    tx.commit();
  }
  sql << "CREATE TABLE outbox_pristine AS SELECT * FROM outbox";
}

/// Puts the outbox back to the pristine pending rows.
inline void reset_postgresql_outbox(soci::session& sql) {
  sql << "TRUNCATE outbox";
  sql << "INSERT INTO outbox OVERRIDING SYSTEM VALUE SELECT * FROM outbox_pristine";
  sql << "VACUUM ANALYZE outbox";
}

}  // namespace outbox::bench
