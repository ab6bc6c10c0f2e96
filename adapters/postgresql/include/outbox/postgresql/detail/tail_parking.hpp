#pragma once
/// @file
/// The log-tailing store's parking: stream events that cannot go now (a retry, a release, a dead
/// letter, an event behind its aggregate's pending rows) written to the outbox table, and the
/// aggregates known to have pending rows there.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <outbox/cause.hpp>
#include <outbox/message.hpp>
#include <outbox/postgresql/detail/connection.hpp>
#include <outbox/postgresql/detail/tail_ledger.hpp>
#include <outbox/postgresql/store.hpp>
#include <outbox/sql/row.hpp>
#include <outbox/sql/statements.hpp>
#include <outbox/uuid.hpp>

namespace outbox::postgresql::detail {

/// A stream event on its way to the outbox table.
struct parked_row {
  message m;
  std::uint64_t tx = 0;                      ///< Its transaction in the ledger.
  int state = 0;                             ///< 0 pending, 2 dead.
  std::optional<time_point> available_at{};  ///< None: claimable now.
  int attempts = 0;
  std::string error{};  ///< A dead letter's error, or a deferral's (pending: none else).
  std::string cause{};  ///< A dead letter's cause key (`outbox::cause_key`).
};

/// Writes parked rows through the table's store and knows which aggregates have pending rows in
/// the table: the stream's events of those wait behind them.
class tail_parking {
 public:
  explicit tail_parking(store& table) noexcept : table_(table) {}

  /// Whether the aggregate (`aggregate_key`) is known to have pending rows in the table.
  [[nodiscard]] bool holds(const std::string& key) const { return parked_.contains(key); }
  /// The aggregate has pending rows now (rows moved to the table by another path).
  void hold(std::string key) { parked_.insert(std::move(key)); }

  /// An event the stream cannot publish, as a dead letter with the reason (storable texts).
  [[nodiscard]] static parked_row unreadable(event_in_log ev) {
    const std::string why = "unreadable event in the WAL: " + ev.why;
    parked_row r{std::move(ev.m), ev.tx, 2, std::nullopt, 0, why, cause_key("unreadable", why)};
    if (r.m.id.is_nil()) r.m.id = make_uuid_v7();
    for (std::string* s :
         {&r.m.aggregate_type, &r.m.aggregate_id, &r.m.event_type, &r.m.content_type})
      *s = outbox::sql::storable_text(*s);
    return r;
  }

  /// Writes `rows` to the outbox table (one statement per 500) in stream order, one row per
  /// event id. Returns the transactions of the events now settled, one per row given.
  [[nodiscard]] std::vector<std::uint64_t> park(std::vector<parked_row>& rows, time_point now) {
    std::vector<std::uint64_t> settled;
    if (rows.empty()) return settled;
    // In stream (commit) order, whatever order the relay put the batch in: each row takes the
    // next seq, and the table claims an aggregate's rows by seq.
    std::stable_sort(rows.begin(), rows.end(), [](const parked_row& a, const parked_row& b) {
      return a.m.sequence < b.m.sequence;
    });
    // The relay's stamp is of this publish call, not of the event (the writer refuses it).
    for (auto& r : rows) r.m.headers.erase(std::string(predecessor_header));
    // One row per event id in a statement (ON CONFLICT DO UPDATE refuses a second): an event
    // emitted twice (not by our writer) is parked once; both count as settled.
    std::vector<parked_row> once;
    {
      std::unordered_set<uuid> seen;
      for (auto& r : rows) {
        if (seen.insert(r.m.id).second)
          once.push_back(std::move(r));
        else
          settled.push_back(r.tx);
      }
    }
    rows = std::move(once);
    table_.run("park", [&](PGconn* c) {
      outbox::sql::insert_in_chunks(statements::park, 14, std::span<const parked_row>(rows), 500,
                                    [&](const std::string& text, std::span<const parked_row> part) {
                                      params p;
                                      for (const parked_row& r : part) add_row(p, r, now);
                                      exec(c, text, p, "park events in the outbox table");
                                    });
      return 0;
    });
    for (const parked_row& r : rows) {
      if (r.state != 2)
        parked_.insert(outbox::detail::aggregate_key(r.m.aggregate_type, r.m.aggregate_id));
      settled.push_back(r.tx);
    }
    return settled;
  }

  /// Reads which aggregates have pending rows in the table: all of them (`of` empty), or which
  /// of `of`'s (the rest are no longer held).
  void load(const std::vector<const message*>& of) {
    table_.run("parked aggregates", [&](PGconn* c) {
      result r;
      if (of.empty()) {
        r = exec(c, std::string(statements::parked_aggregates_all), params(), "parked aggregates");
        parked_.clear();
      } else {
        array_literal types, ids;
        for (const message* m : of) {
          types.add_text(m->aggregate_type);
          ids.add_text(m->aggregate_id);
        }
        r = exec_prepared_once<parked_aggregates_statement>(
            c, statements::parked_aggregates, params().add(types.str()).add(ids.str()),
            "parked aggregates");
        for (const message* m : of)
          parked_.erase(outbox::detail::aggregate_key(m->aggregate_type, m->aggregate_id));
      }
      for (int i = 0; i < r.rows(); ++i)
        parked_.insert(outbox::detail::aggregate_key(r.text(i, 0), r.text(i, 1)));
      return 0;
    });
  }

  /// Learns which aggregates of `events` (readable, not known held) have pending rows in the
  /// table now (one prepared query, parked_aggregates.sql).
  void learn(const std::vector<event_in_log>& events) {
    std::unordered_set<std::string> asked;
    std::vector<const message*> of;
    for (const event_in_log& ev : events) {
      if (!ev.why.empty()) continue;
      auto key = outbox::detail::aggregate_key(ev.m.aggregate_type, ev.m.aggregate_id);
      if (parked_.contains(key) || !asked.insert(std::move(key)).second) continue;
      of.push_back(&ev.m);
    }
    if (!of.empty()) load(of);
  }

 private:
  /// park.sql's 14 parameters of one row.
  static void add_row(params& p, const parked_row& r, time_point now) {
    p.add(r.m.id.to_string())
        .add(r.m.aggregate_type)
        .add(r.m.aggregate_id)
        .add(r.m.event_type)
        .add_bytes(r.m.payload)
        .add(r.state == 2 && r.m.headers.empty() ? std::string("{}") : headers_to_json(r.m.headers))
        .add(to_us(r.m.created_at))
        .add(r.m.content_type)
        .add(std::int64_t{r.state});
    if (r.available_at)
      p.add(to_us(*r.available_at));
    else
      p.add_null();
    p.add(std::int64_t{r.attempts});
    if (r.state == 2)
      p.add(to_us(now))
          .add(outbox::sql::storable_text(r.error))
          .add(outbox::sql::storable_text(r.cause));
    else if (!r.error.empty())  // a deferral's: the stats count it as deferred, not scheduled
      p.add_null().add(outbox::sql::storable_text(r.error)).add_null();
    else
      p.add_null().add_null().add_null();
  }

  store& table_;
  // Aggregates with pending rows in the table, as far as this store knows: its own parks, the
  // table read as the stream opened and before each stream batch (learn).
  std::unordered_set<std::string> parked_;
};

}  // namespace outbox::postgresql::detail
