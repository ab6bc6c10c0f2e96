#pragma once
// The writer (--role writer): the application's side, committing events with their business
// rows in the same transaction, rolling some back, and retrying a failed transaction only once
// it knows the failed attempt did not commit.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <soci/soci.h>
#include <nlohmann/json.hpp>

#include <outbox/outbox.hpp>

#include "args.hpp"
#include "basics.hpp"
#include "concepts.hpp"
#include "database.hpp"
#include "run_files.hpp"
#include "signals.hpp"

namespace fault_harness {

/// After a failed attempt: a new connection in `owned` (the old one may be lost), then whether
/// the attempt that enqueued `ids` committed after all (its business rows are there; none to
/// look for: it did not). Tries for 30 s (a database server restarting is away for seconds),
/// then throws: without an answer the writer can neither retry nor move on.
template <class S>
bool committed_by_now(const args& a, std::unique_ptr<soci::session>& owned,
                      const std::vector<outbox::uuid>& ids) {
  const auto give_up = steady::now() + 30s;
  for (;;) {
    try {
      owned.reset();
      owned = S::open(a);
      long long n = 0;
      if (!ids.empty() && a.plant != "blind-retry") {
        const std::string eid = ids.front().to_string();
        *owned << "SELECT count(*) FROM harness_business WHERE event_id = :e", soci::use(eid),
            soci::into(n);
      }
      if (FILE* log = std::fopen(writer_log(a).c_str(), "a")) {
        std::fputs(n > 0 ? "landed\n" : "retry\n", log);
        std::fclose(log);
      }
      return n > 0;
    } catch (const std::exception&) {
      if (steady::now() > give_up) throw;
      std::this_thread::sleep_for(100ms);
    }
  }
}

/// Commits `events` events over `aggregates` aggregates, 1 to 4 per transaction, each with its
/// business row (event id, aggregate, per-aggregate sequence) in the same transaction; one
/// transaction in eight rolls back instead, and its event ids are recorded (committed, after
/// the rollback) in harness_rolled_back: they must appear nowhere.
///
/// `--poison` and `--uncarriable` events ride along in committed transactions spread over the run,
/// each in an aggregate of its own, with a row of harness_expected_dead (where it must end up:
/// the inbox's dead letters, the outbox's) in the same transaction.
///
/// A failed transaction is retried whole, as an application would, on a new connection (the old
/// one may be gone: a database kill). A failure can come after COMMIT was sent with no answer
/// (in doubt): the transaction may have landed. So before a retry the writer looks for the
/// attempt's business rows (the transaction wrote all of them or none): found, it did commit,
/// and a retry would enqueue the events twice; not found, it did not, and no retry would lose
/// them. (On a new session the outcome is final: a terminated backend finishes or aborts its
/// COMMIT before its connection closes.)
template <class S, class T>
int run_writer(const args& a) {
  become_part();
  auto owned = open_retrying<S>(a);
  outbox::writer<typename writer_store_of<S>::type> writer;
  std::mt19937_64 rng(a.seed ^ 0x5752495445520000ULL);
  std::vector<long> next_seq(static_cast<std::size_t>(a.aggregates), 1);
  // The special events, by the count of committed events they follow.
  std::vector<std::pair<long, std::string>> specials;
  for (int i = 0; i < a.poison; ++i)
    specials.emplace_back(a.events * (2 * i + 1) / (2 * a.poison + 1), "poison");
  for (int i = 0; i < a.uncarriable; ++i)
    specials.emplace_back(a.events * (2 * i + 2) / (2 * a.uncarriable + 2), "uncarriable");
  std::sort(specials.begin(), specials.end());
  std::size_t next_special = 0;
  long tx_count = 0;     // plant writer-drop: committed transactions so far
  bool dropped = false;  // plant writer-drop: done
  const auto started = steady::now();
  long committed = 0;
  while (committed < a.events && stop_requested == 0) {
    const long n = std::min<long>(1 + static_cast<long>(rng() % 4), a.events - committed);
    const bool roll_back = rng() % 8 == 0;
    std::vector<outbox::event> batch;
    std::vector<std::pair<std::string, long>> keys;
    std::map<std::size_t, long> taken;  // sequence numbers used in this transaction
    for (long i = 0; i < n; ++i) {
      const auto agg = static_cast<std::size_t>(rng() % static_cast<std::uint64_t>(a.aggregates));
      const long seq = next_seq[agg] + taken[agg]++;
      const std::string id = "a" + std::to_string(agg);
      keys.emplace_back(id, seq);
      batch.push_back({.aggregate_type = "harness",
                       .aggregate_id = id,
                       .event_type = roll_back ? "rolled_back" : "committed",
                       .payload = nlohmann::json{{"agg", id}, {"seq", seq}}.dump()});
    }
    // Where each special event must end up (its row of harness_expected_dead).
    std::vector<std::pair<std::size_t, std::string>> expected_dead;
    if (!roll_back && next_special < specials.size() && committed >= specials[next_special].first) {
      const std::string& kind = specials[next_special].second;
      const std::string id = kind + "-" + std::to_string(next_special);
      outbox::event e{.aggregate_type = "harness",
                      .aggregate_id = id,
                      .event_type = kind,
                      .payload = nlohmann::json{{"agg", id}, {"seq", 1}}.dump()};
      if (kind == "uncarriable") T::make_uncarriable(e);
      expected_dead.emplace_back(batch.size(), kind == "poison" ? "inbox" : "outbox");
      keys.emplace_back(id, 1);
      batch.push_back(std::move(e));
    }
    const bool single = rng() % 2 == 0;  // both enqueue forms
    for (int attempt = 1;; ++attempt) {
      std::vector<outbox::uuid> ids;
      try {
        soci::session& sql = *owned;
        soci::transaction tx(sql);
        if (single)
          for (const auto& e : batch) ids.push_back(writer.enqueue(sql, e));
        else
          ids = writer.enqueue(sql, std::span<const outbox::event>(batch));
        if (a.plant == "writer-drop" && !dropped && attempt == 1 && !roll_back &&
            ++tx_count >= 40 && ids.size() > 1 && expected_dead.empty()) {
          // The defect: the transaction's last event vanishes, its row and its id (an enqueue
          // that loses an event and says nothing).
          dropped = true;
          const std::string gone = ids.back().to_string();
          sql << "DELETE FROM outbox WHERE event_id = :e", soci::use(gone);
          ids.pop_back();
        }
        for (std::size_t i = 0; i < ids.size(); ++i) {
          const std::string eid = ids[i].to_string();
          sql << "INSERT INTO harness_business (event_id, aggregate, seq) VALUES (:e, :a, :s)",
              soci::use(eid), soci::use(keys[i].first), soci::use(keys[i].second);
        }
        for (const auto& [i, place] : expected_dead) {
          const std::string eid = ids[i].to_string();
          sql << "INSERT INTO harness_expected_dead (event_id, place) VALUES (:e, :p)",
              soci::use(eid), soci::use(place);
        }
        if (!roll_back) {
          if (armed_usr1 != 0) {  // a writer-commit database kill
            armed_usr1 = 0;
            S::commit_unanswered(sql);
          }
          tx.commit();
          break;
        }
        tx.rollback();
        soci::transaction note(sql);
        for (const auto& id : ids) {
          const std::string eid = id.to_string();
          sql << "INSERT INTO harness_rolled_back (event_id) VALUES (:e)", soci::use(eid);
        }
        note.commit();
        break;
      } catch (const std::exception& e) {  // busy, or the connection lost: rolled back or in doubt
        if (attempt == 20) throw;
        std::this_thread::sleep_for(20ms * attempt);
        if (committed_by_now<S>(a, owned, roll_back ? std::vector<outbox::uuid>{} : ids)) break;
      }
    }
    if (roll_back) continue;
    for (const auto& [agg, used] : taken) next_seq[agg] += used;
    committed += n;
    next_special += expected_dead.size();
    // Paced, so that the faults fall while events are being written.
    std::this_thread::sleep_until(started + std::chrono::duration_cast<steady::duration>(
                                                std::chrono::duration<double>(committed / a.rate)));
  }
  return stop_requested != 0 ? exit_failed : exit_ok;
}

}  // namespace fault_harness
