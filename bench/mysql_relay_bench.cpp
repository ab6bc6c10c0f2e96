// Relay throughput on MySQL (MariaDB here), for each claim policy x retention mode, on the same
// rows in one run:
//   relay    outbox::relay with the in-memory transport at a simulated confirm round trip;
//   bare     the same claim and settle statements (sql/mysql/) on the client handle, values
//            written into the text, results read with mysql_store_result: no SOCI, no
//            transport, no C++ objects (what SOCI costs the relay is relay vs bare);
//   naive    the relay of the seed articles: BEGIN; SELECT 100 ... FOR UPDATE SKIP LOCKED; per
//            row publish one, wait for its confirm, UPDATE that row; COMMIT.
// Every run starts from the same pending rows (copied back from a pristine table); relay and
// bare run twice each, in ABBA order, and the best of each is compared.
//
// Usage: mysql_relay_bench [--rows N] [--batch N] [--latency-us N] [--smoke]
// Server: OUTBOX_TEST_MYSQL (SOCI mysql connect string). Uses (and drops) the database
// outbox_bench_mysql.

#include <sys/prctl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <soci/soci.h>

#include <outbox/mysql/store.hpp>
#include <outbox/outbox.hpp>

#include <outbox/testing/memory_transport.hpp>
#include "bench_common.hpp"

using namespace std::chrono_literals;
namespace my = outbox::mysql;
namespace md = outbox::mysql::detail;

namespace {

constexpr const char* database = "outbox_bench_mysql";

struct args {
  long rows = 100'000;
  long batch = 500;
  long latency_us = 100;
};

/// OUTBOX_TEST_MYSQL with its db= replaced by `db` (empty: none).
std::string connect_string(const std::string& db) {
  return outbox::bench::mysql_connect_string("mysql_relay_bench", db);
}

using outbox::bench::result;

result timed(soci::session& sql, long rows, const std::function<void()>& body) {
  const auto t0 = std::chrono::steady_clock::now();
  body();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  long long left = 0;
  sql << "SELECT count(*) FROM outbox WHERE state = 0", soci::into(left);
  if (left != 0) {
    std::cerr << "bench: " << left << " rows left pending: the run is invalid\n";
    std::exit(1);
  }
  return {s, rows};
}

outbox::testing::memory_transport_options sink(const args& a) {
  return {.confirm_latency = std::chrono::microseconds(a.latency_us),
          .deliver = false,
          .record = false};
}

void reset(soci::session& sql) {
  sql << "TRUNCATE TABLE outbox";
  sql << "INSERT INTO outbox SELECT * FROM outbox_pristine";
  sql << "ANALYZE TABLE outbox";
}

result run_relay(soci::session& check, const args& a, outbox::claim_policy p, outbox::retention r) {
  soci::session sql("mysql", connect_string(database));
  my::store st(sql, {.policy = p, .retention = r});
  outbox::testing::memory_transport t(sink(a));
  outbox::relay relay(st, t, {.batch_size = static_cast<std::size_t>(a.batch)});
  return timed(check, a.rows, [&] {
    while (relay.run_once() > 0) {
    }
  });
}

/// `text` with each `:name` replaced by its literal (the bare baseline writes integers and
/// JSON lists of integers it made itself; nothing from outside).
std::string literal(std::string_view text, const std::map<std::string, std::string>& values) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ':' || i + 1 >= text.size() ||
        !std::isalpha(static_cast<unsigned char>(text[i + 1]))) {
      out += text[i];
      continue;
    }
    std::size_t j = i + 1;
    while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_'))
      ++j;
    const auto v = values.find(std::string(text.substr(i + 1, j - i - 1)));
    if (v == values.end()) {
      out += text[i];
      continue;
    }
    out += v->second;
    i = j - 1;
  }
  return out;
}

void run(MYSQL* c, const std::string& q) {
  if (mysql_real_query(c, q.data(), static_cast<unsigned long>(q.size())) != 0)
    md::throw_native(c, "bench");
  if (MYSQL_RES* res = mysql_store_result(c)) mysql_free_result(res);
}

result run_bare(soci::session& check, const args& a, outbox::claim_policy p, outbox::retention r) {
  soci::session sql("mysql", connect_string(database));
  my::store::configure(sql);
  MYSQL* c = md::handle(sql);
  const bool locking = p == outbox::claim_policy::locking;
  return timed(check, a.rows, [&] {
    for (long long token = 1;; ++token) {
      const auto now = std::to_string(md::to_us(std::chrono::system_clock::now()));
      run(c, "START TRANSACTION");
      std::string q = literal(my::statements::claim, {{"after", "0"},
                                                      {"bound", "9223372036854775807"},
                                                      {"now", now},
                                                      {"blocked", "''"},
                                                      {"limit", std::to_string(a.batch)}});
      if (mysql_real_query(c, q.data(), static_cast<unsigned long>(q.size())) != 0)
        md::throw_native(c, "claim");
      std::vector<std::int64_t> seqs;
      std::size_t bytes = 0;
      MYSQL_RES* res = mysql_store_result(c);
      while (MYSQL_ROW row = mysql_fetch_row(res)) {
        seqs.push_back(std::atoll(row[0]));
        bytes += mysql_fetch_lengths(res)[5];  // a relay must read the payload
      }
      mysql_free_result(res);
      if (seqs.empty()) {
        run(c, "ROLLBACK");
        break;
      }
      if (bytes == 0) std::abort();
      const std::string list = "'" + outbox::sql::json_integer_array(seqs) + "'";
      run(c, literal(my::statements::claim_previous, {{"seqs", list}}));
      const std::map<std::string, std::string> settle{{"now", now},
                                                      {"seqs", list},
                                                      {"locking", locking ? "1" : "0"},
                                                      {"token", std::to_string(token)}};
      const auto& settle_sql = r == outbox::retention::delete_on_publish
                                   ? my::statements::settle_published_delete
                                   : my::statements::settle_published_keep;
      if (!locking) {
        run(c, literal(my::statements::claim_stamp, {{"until", now + "0"},
                                                     {"owner", "'bare'"},
                                                     {"token", std::to_string(token)},
                                                     {"seqs", list}}));
        run(c, "COMMIT");
        run(c, literal(settle_sql, settle));
      } else {
        run(c, literal(settle_sql, settle));
        run(c, "COMMIT");
      }
    }
  });
}

result run_naive(soci::session& check, const args& a) {
  soci::session sql("mysql", connect_string(database));
  my::store::configure(sql);
  MYSQL* c = md::handle(sql);
  outbox::testing::memory_transport t(sink(a));
  const std::string select =
      "SELECT seq, event_id, aggregate_type, aggregate_id, event_type, payload FROM outbox "
      "WHERE state = 0 ORDER BY seq LIMIT 100 FOR UPDATE SKIP LOCKED";
  return timed(check, a.rows, [&] {
    for (;;) {
      run(c, "START TRANSACTION");
      if (mysql_real_query(c, select.data(), static_cast<unsigned long>(select.size())) != 0)
        md::throw_native(c, "select");
      MYSQL_RES* res = mysql_store_result(c);
      std::vector<outbox::message> batch;
      while (MYSQL_ROW row = mysql_fetch_row(res)) {
        const unsigned long* len = mysql_fetch_lengths(res);
        outbox::message m;
        m.sequence = std::atoll(row[0]);
        m.id = outbox::uuid::parse(row[1]).value();
        m.aggregate_type = row[2];
        m.aggregate_id = row[3];
        m.event_type = row[4];
        m.payload.assign(row[5], len[5]);
        batch.push_back(std::move(m));
      }
      mysql_free_result(res);
      if (batch.empty()) {
        run(c, "ROLLBACK");
        break;
      }
      for (const auto& m : batch) {
        const auto r = t.publish(std::span(&m, 1), std::chrono::steady_clock::now() + 10s);
        if (r.size() != 1 || !r[0].confirmed) std::abort();
        run(c, "UPDATE outbox SET state = 1, published_at = 1 WHERE seq = " +
                   std::to_string(m.sequence));
      }
      run(c, "COMMIT");
    }
  });
}

}  // namespace

int main(int argc, char** argv) try {
  args a;
  outbox::bench::flags("mysql_relay_bench [--rows N] [--batch N] [--latency-us N]")
      .on("--rows", a.rows)
      .on("--batch", a.batch)
      .on("--latency-us", a.latency_us)
      .on_smoke([&a] {
        a.rows = 300;
        a.batch = 100;
      })
      .parse(argc, argv);
  ::prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // keep simulated round trips honest
  {
    soci::session admin("mysql", connect_string(""));
    admin << "DROP DATABASE IF EXISTS " + std::string(database);
    admin << "CREATE DATABASE " + std::string(database) +
                 " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin";
  }
  soci::session sql("mysql", connect_string(database));
  my::store::migrate(sql);
  std::string version, flush;
  sql << "SELECT VERSION(), @@innodb_flush_log_at_trx_commit", soci::into(version),
      soci::into(flush);
  std::cout << "mysql relay benchmark: " << a.rows << " rows, batch " << a.batch
            << ", simulated confirm " << a.latency_us << " us, server " << version
            << " innodb_flush_log_at_trx_commit=" << flush << "\n";
  {
    outbox::writer<my::store> w;
    std::vector<outbox::event> chunk;
    for (long i = 0; i < a.rows;) {
      soci::transaction tx(sql);
      chunk.clear();
      for (int k = 0; k < 1000 && i < a.rows; ++k, ++i)
        chunk.push_back(outbox::bench::sample_event(i));
      w.enqueue(sql, chunk);
      tx.commit();
    }
    sql << "CREATE TABLE outbox_pristine AS SELECT * FROM outbox";
  }
  const auto line = [](const std::string& name, const result& r) {
    std::printf("%-34s %10.0f events/s  (%.2f s)\n", name.c_str(), r.rate(), r.seconds);
  };
  reset(sql);
  const result naive = run_naive(sql, a);
  line("naive (select 100, publish+update one)", naive);

  for (auto p : {outbox::claim_policy::locking, outbox::claim_policy::leasing}) {
    for (auto r : {outbox::retention::keep, outbox::retention::delete_on_publish}) {
      const std::string name =
          std::string(p == outbox::claim_policy::locking ? "locking" : "leasing") + "/" +
          (r == outbox::retention::keep ? "keep" : "delete");
      const auto best = [](const result& x, const result& y) {
        return x.rate() >= y.rate() ? x : y;
      };
      reset(sql);
      result relay = run_relay(sql, a, p, r);
      reset(sql);
      result bare = run_bare(sql, a, p, r);
      reset(sql);
      bare = best(bare, run_bare(sql, a, p, r));
      reset(sql);
      relay = best(relay, run_relay(sql, a, p, r));
      line(name + " relay", relay);
      line(name + " bare SQL", bare);
      std::printf("ratio %s relay/bare-sql %.2f\n", name.c_str(), relay.rate() / bare.rate());
      std::printf("ratio %s relay/naive %.2f\n", name.c_str(), relay.rate() / naive.rate());
    }
  }
  sql << "DROP DATABASE " + std::string(database);
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench: " << e.what() << "\n";
  return 1;
}
