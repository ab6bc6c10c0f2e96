#pragma once
// The ledger: the outcome of a run, read from the database alone (lost, applied twice, out of
// order, rolled back yet seen, dead letters where they belong); --role check runs it alone.

#include <algorithm>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <soci/soci.h>

#include "args.hpp"
#include "basics.hpp"
#include "database.hpp"
#include "run_files.hpp"

namespace fault_harness {

struct ledger {
  long long committed = 0;         ///< Business rows: events of committed transactions.
  long long rolled_back = 0;       ///< Events of rolled-back transactions.
  long long rolled_back_seen = 0;  ///< ... found in the outbox, inbox, effects or business rows.
  long long outside = 0;           ///< Outbox rows without a business row.
  long long applied = 0;           ///< Distinct events with an effect row.
  long long applied_twice = 0;     ///< Effect rows beyond the first per event.
  long long lost = 0;              ///< Committed, neither applied nor dead-lettered.
  long long order_violations = 0;
  long long dead = 0;             ///< Outbox dead letters plus inbox dead letters.
  long long expected_dead = 0;    ///< Poison and uncarriable events (harness_expected_dead).
  long long dead_unexpected = 0;  ///< Dead letters of other events, or in the wrong place.
  long long dead_missing = 0;     ///< Poison or uncarriable events not dead where they must be.
  long long pending = 0;          ///< Outbox rows not settled.
  /// Aggregates whose business rows are not exactly the sequence 1..n: an event the writer
  /// counted as committed that left no business row (and so no way for `lost` to see it).
  long long writer_gaps = 0;
  /// Orchestrator only: committed events (poison and uncarriable ones aside) other than the
  /// writer's --events, once it finished (-1: not judged).
  long long writer_shortfall = -1;
  /// Effect rows that are not what the writer committed under their event id (another
  /// aggregate or sequence: a payload delivered under the wrong id), or of no committed event.
  long long effect_mismatch = 0;

  [[nodiscard]] bool holds() const {
    return rolled_back_seen == 0 && outside == 0 && applied_twice == 0 && lost == 0 &&
           effect_mismatch == 0 && order_violations == 0 && dead_unexpected == 0 &&
           dead_missing == 0 && writer_gaps == 0 && writer_shortfall <= 0;
  }
};

/// A business row `b` whose event was neither applied nor dead-lettered (a WHERE condition).
inline constexpr const char* lost_event =
    "NOT EXISTS (SELECT 1 FROM harness_effect f WHERE f.event_id = b.event_id) AND "
    "NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = b.event_id AND o.state = 2) AND "
    "NOT EXISTS (SELECT 1 FROM outbox_inbox_dead d WHERE d.event_id = b.event_id)";

inline ledger read_ledger(soci::session& sql) {
  ledger l;
  l.committed = scalar(sql, "SELECT count(*) FROM harness_business");
  l.rolled_back = scalar(sql, "SELECT count(*) FROM harness_rolled_back");
  l.rolled_back_seen =
      scalar(sql,
             "SELECT count(*) FROM harness_rolled_back r WHERE "
             "EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = r.event_id) OR "
             "EXISTS (SELECT 1 FROM outbox_inbox i WHERE i.event_id = r.event_id) OR "
             "EXISTS (SELECT 1 FROM outbox_inbox_dead d WHERE d.event_id = r.event_id) OR "
             "EXISTS (SELECT 1 FROM harness_effect f WHERE f.event_id = r.event_id) OR "
             "EXISTS (SELECT 1 FROM harness_business b WHERE b.event_id = r.event_id)");
  l.outside = scalar(sql,
                     "SELECT count(*) FROM outbox o WHERE NOT EXISTS "
                     "(SELECT 1 FROM harness_business b WHERE b.event_id = o.event_id)");
  l.applied = scalar(sql, "SELECT count(DISTINCT event_id) FROM harness_effect");
  l.applied_twice = scalar(sql, "SELECT count(*) FROM harness_effect") - l.applied;
  l.effect_mismatch = scalar(sql,
                             "SELECT count(*) FROM harness_effect f WHERE NOT EXISTS (SELECT 1 "
                             "FROM harness_business b WHERE b.event_id = f.event_id AND "
                             "b.aggregate = f.aggregate AND b.seq = f.seq)");
  l.dead = scalar(sql, "SELECT count(*) FROM outbox WHERE state = 2") +
           scalar(sql, "SELECT count(*) FROM outbox_inbox_dead");
  // A poison event belongs in the inbox's dead letters (the handler failed every attempt), an
  // uncarriable one in the outbox's (the transport refused it); nothing else anywhere.
  l.expected_dead = scalar(sql, "SELECT count(*) FROM harness_expected_dead");
  l.dead_unexpected =
      scalar(sql,
             "SELECT count(*) FROM outbox o WHERE o.state = 2 AND NOT EXISTS (SELECT 1 FROM "
             "harness_expected_dead x WHERE x.event_id = o.event_id AND x.place = 'outbox')") +
      scalar(sql,
             "SELECT count(*) FROM outbox_inbox_dead d WHERE NOT EXISTS (SELECT 1 FROM "
             "harness_expected_dead x WHERE x.event_id = d.event_id AND x.place = 'inbox')");
  l.dead_missing = scalar(
      sql,
      "SELECT count(*) FROM harness_expected_dead x WHERE NOT ("
      "(x.place = 'outbox' AND EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = x.event_id AND "
      "o.state = 2)) OR "
      "(x.place = 'inbox' AND EXISTS (SELECT 1 FROM outbox_inbox_dead d WHERE d.event_id = "
      "x.event_id)))");
  l.lost = scalar(sql, std::string("SELECT count(*) FROM harness_business b WHERE ") + lost_event);
  l.pending = scalar(sql, "SELECT count(*) FROM outbox WHERE state = 0");
  l.writer_gaps = scalar(sql,
                         "SELECT count(*) FROM (SELECT aggregate FROM harness_business GROUP BY "
                         "aggregate HAVING min(seq) <> 1 OR max(seq) <> count(*) OR "
                         "count(DISTINCT seq) <> count(*)) g");
  // Per aggregate, the sequence numbers in the order the effects were applied must rise.
  std::map<std::string, long long> last;
  std::vector<std::string> aggs(1000);
  std::vector<long long> seqs(1000);
  soci::statement st = (sql.prepare << "SELECT aggregate, seq FROM harness_effect ORDER BY "
                                       "apply_order",
                        soci::into(aggs), soci::into(seqs));
  st.execute();
  while (st.fetch()) {
    for (std::size_t i = 0; i < aggs.size(); ++i) {
      auto [it, fresh] = last.try_emplace(aggs[i], seqs[i]);
      if (!fresh) {
        if (seqs[i] <= it->second) ++l.order_violations;
        it->second = std::max(it->second, seqs[i]);
      }
    }
    aggs.resize(1000);
    seqs.resize(1000);
  }
  return l;
}

/// For lost events, where they stopped: their outbox state (a pending row was never settled; a
/// published one had the broker's confirm; none: a tailing relay deletes what it published),
/// whether the inbox holds a record without the effect or a consumer absorbed a copy, and per
/// aggregate which sequence numbers (a tail: the consumers stopped; scattered: a hole).
inline void explain_lost(soci::session& sql) {
  const std::string lost = std::string("FROM harness_business b WHERE ") + lost_event;
  const auto count = [&](const char* also) {
    return scalar(sql, "SELECT count(*) " + lost + also);
  };
  std::cout << "lost: outbox pending "
            << count(
                   " AND EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = b.event_id AND "
                   "o.state = 0)")
            << ", published "
            << count(
                   " AND EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = b.event_id AND "
                   "o.state = 1)")
            << ", no row "
            << count(" AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = b.event_id)")
            << "; inbox record without effect "
            << count(" AND EXISTS (SELECT 1 FROM outbox_inbox i WHERE i.event_id = b.event_id)")
            << "; a copy absorbed at its wire position (Kafka) "
            << count(" AND EXISTS (SELECT 1 FROM harness_seen s WHERE s.event_id = b.event_id)")
            << '\n';
  std::vector<std::string> aggs(32);
  std::vector<long long> lo(32), hi(32), n(32), last(32);
  sql << "SELECT b.aggregate, min(b.seq), max(b.seq), count(*), (SELECT max(c.seq) FROM "
         "harness_business c WHERE c.aggregate = b.aggregate) " +
             lost + " GROUP BY b.aggregate ORDER BY b.aggregate",
      soci::into(aggs), soci::into(lo), soci::into(hi), soci::into(n), soci::into(last);
  std::cout << "lost by aggregate (seq first-last, count, of"
            << (aggs.size() == 32 ? "; the first 32 aggregates" : "") << "):";
  for (std::size_t i = 0; i < aggs.size(); ++i)
    std::cout << ' ' << aggs[i] << ' ' << lo[i] << '-' << hi[i] << " (" << n[i] << " of " << last[i]
              << ')';
  std::cout << '\n';
}

/// For an effect applied twice, what a reader needs to tell a late duplicate (one that came
/// after the consumer's dedup window had purged its record) from a hole in the inbox: each
/// application's order and time (ms after the first), and whether the inbox still holds the
/// event's record. At most 10 events.
inline void explain_applied_twice(soci::session& sql) {
  std::vector<long long> firsts(10);
  sql << "SELECT min(apply_order) FROM harness_effect GROUP BY event_id HAVING count(*) > 1",
      soci::into(firsts);
  for (const long long first : firsts) {
    std::vector<long long> order(16), at(16);
    sql << "SELECT f.apply_order, f.applied_ms FROM harness_effect f JOIN harness_effect g ON "
           "f.event_id = g.event_id WHERE g.apply_order = :o ORDER BY f.apply_order",
        soci::use(first), soci::into(order), soci::into(at);
    std::string agg;
    long long seq = 0, kept = 0;
    sql << "SELECT aggregate, seq FROM harness_effect WHERE apply_order = :o", soci::use(first),
        soci::into(agg), soci::into(seq);
    sql << "SELECT count(*) FROM outbox_inbox i JOIN harness_effect g ON i.event_id = g.event_id "
           "WHERE g.apply_order = :o",
        soci::use(first), soci::into(kept);
    std::cout << "applied twice: " << agg << " seq " << seq << ":";
    for (std::size_t i = 0; i < order.size(); ++i)
      std::cout << " #" << order[i] << " at +" << (at[i] - at[0]) << " ms";
    std::cout << (kept > 0 ? "; its inbox record is there"
                           : "; no inbox record (never made, or purged)")
              << '\n';
  }
}

/// For an order violation, what a reader needs to tell which side made it (a relay that
/// published a later event first, or two consumers applying one partition at once): the
/// aggregate's applications around it, each with its sequence, time (ms after the first shown)
/// and the consumer process that applied it. At most 5 violations.
inline void explain_order_violations(soci::session& sql) {
  std::vector<std::string> aggs(1000);
  std::vector<long long> seqs(1000), orders(1000);
  std::map<std::string, std::pair<long long, long long>> last;  // aggregate: seq, apply order
  std::vector<std::pair<std::string, long long>> found;         // aggregate, apply order
  soci::statement st = (sql.prepare << "SELECT aggregate, seq, apply_order FROM harness_effect "
                                       "ORDER BY apply_order",
                        soci::into(aggs), soci::into(seqs), soci::into(orders));
  st.execute();
  while (st.fetch() && found.size() < 5) {
    for (std::size_t i = 0; i < aggs.size() && found.size() < 5; ++i) {
      auto [it, fresh] = last.try_emplace(aggs[i], seqs[i], orders[i]);
      if (fresh) continue;
      if (seqs[i] <= it->second.first) found.emplace_back(aggs[i], orders[i]);
      if (seqs[i] > it->second.first) it->second = {seqs[i], orders[i]};
    }
    aggs.resize(1000);
    seqs.resize(1000);
    orders.resize(1000);
  }
  for (const auto& [agg, at_order] : found) {
    std::vector<long long> order(12), seq(12), at(12), by(12);
    sql << "SELECT apply_order, seq, applied_ms, applied_by FROM (SELECT apply_order, seq, "
           "applied_ms, applied_by FROM harness_effect WHERE aggregate = :a AND apply_order <= :o "
           "ORDER BY apply_order DESC LIMIT 8) x ORDER BY apply_order",
        soci::use(agg), soci::use(at_order), soci::into(order), soci::into(seq), soci::into(at),
        soci::into(by);
    std::cout << "order violation: " << agg << ":";
    for (std::size_t i = 0; i < order.size(); ++i)
      std::cout << " seq " << seq[i] << " (#" << order[i] << " +" << (at[i] - at[0]) << " ms by "
                << by[i] << ")";
    std::cout << '\n';
  }
}

inline void print_ledger(const ledger& l, long long wire_duplicates, long long storm_copies,
                         long long redelivered) {
  std::cout << "committed=" << l.committed << " rolled_back=" << l.rolled_back
            << " rolled_back_seen=" << l.rolled_back_seen << " outside_business=" << l.outside
            << " applied=" << l.applied << " applied_twice=" << l.applied_twice
            << " effect_mismatch=" << l.effect_mismatch << " lost=" << l.lost
            << " order_violations=" << l.order_violations << " dead_lettered=" << l.dead
            << " expected_dead=" << l.expected_dead << " dead_unexpected=" << l.dead_unexpected
            << " dead_missing=" << l.dead_missing << " pending=" << l.pending
            << " writer_gaps=" << l.writer_gaps << " writer_shortfall=" << l.writer_shortfall
            << " wire_duplicates=" << wire_duplicates << " storm_copies_absorbed=" << storm_copies
            << " redelivered=" << redelivered << std::endl;
}

template <class S>
int run_check(const args& a) {
  database<S> db(a);
  soci::session& sql = db.sql;
  const ledger l = read_ledger(sql);
  print_ledger(l, count_lines_with(duplicates_log(a), "d"),
               count_lines_with(duplicates_log(a), "s"), count_lines_with(duplicates_log(a), "r"));
  if (l.applied_twice > 0) explain_applied_twice(sql);
  if (l.order_violations > 0) explain_order_violations(sql);
  return l.holds() ? exit_ok : exit_ledger;
}

}  // namespace fault_harness
