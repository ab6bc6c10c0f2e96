#pragma once
/// @file
/// The memory store's dead-letter triage and replay (`concepts::triage_store`,
/// `concepts::replay_store`), over the database's rows under its mutex: what the SQL stores'
/// statements do (`sql/DIALECT/dead_groups.sql`, `discard.sql`, `replay.sql`, ...).

#include <algorithm>
#include <cstddef>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <outbox/testing/memory_database.hpp>
#include <outbox/triage.hpp>

namespace outbox::testing {

/// The triage operations of `memory_store` (a friend of `memory_database`).
struct memory_triage {
  /// See `concepts::triage_store`.
  static std::vector<dead_letter_group> groups(memory_database& db, std::size_t n) {
    std::map<std::string, dead_letter_group> by_cause;
    std::map<std::string, std::set<std::string>> types;
    std::lock_guard lock(db.mutex_);
    db.check_fault(memory_operation::operations, "dead_letter_groups");
    for (const auto& [seq, row] : db.rows_) {
      if (row.state != memory_row::state_type::dead) continue;
      auto [it, fresh] = by_cause.try_emplace(row.dead_cause);
      auto& g = it->second;
      const auto at = row.dead_at.value_or(time_point{});
      if (fresh) {
        g.cause = row.dead_cause;
        g.sample = row.id;  // rows_ is in seq order: the oldest
        g.first_dead_at = g.last_dead_at = at;
      }
      ++g.count;
      g.first_dead_at = std::min(g.first_dead_at, at);
      g.last_dead_at = std::max(g.last_dead_at, at);
      types[row.dead_cause].insert(row.event_type);
    }
    std::vector<std::pair<std::int64_t, dead_letter_group>> order;  // (oldest seq, group)
    for (auto& [cause, g] : by_cause) {
      g.event_types.assign(types[cause].begin(), types[cause].end());
      order.emplace_back(db.by_id_.at(g.sample), std::move(g));
    }
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
      return a.second.count != b.second.count ? a.second.count > b.second.count : a.first < b.first;
    });
    std::vector<dead_letter_group> out;
    for (auto& [seq, g] : order) {
      if (out.size() >= n) break;
      out.push_back(std::move(g));
    }
    return out;
  }

  /// See `concepts::triage_store`.
  static std::size_t requeue_group(memory_database& db, const std::string& key, time_point now,
                                   std::size_t n) {
    std::size_t done = 0;
    {
      std::lock_guard lock(db.mutex_);
      db.check_fault(memory_operation::operations, "requeue_group");
      for (auto& [seq, row] : db.rows_) {
        if (done >= n) break;
        if (row.state != memory_row::state_type::dead || row.dead_cause != key) continue;
        make_pending(row, now);
        row.dead_at.reset();
        ++done;
      }
      if (done > 0) ++db.appended_;
    }
    db.cv_.notify_all();
    return done;
  }

  /// See `concepts::triage_store`.
  static std::size_t discard(memory_database& db, const dead_letter_filter& f, time_point now,
                             std::size_t n) {
    std::lock_guard lock(db.mutex_);
    db.check_fault(memory_operation::operations, "discard");
    std::size_t done = 0;
    for (auto it = db.rows_.begin(); it != db.rows_.end() && done < n;) {
      const auto& row = it->second;
      const bool take = row.state == memory_row::state_type::dead &&
                        (!f.cause || row.dead_cause == *f.cause) &&
                        (!f.event_type || row.event_type == *f.event_type) &&
                        (!f.dead_since || row.dead_at.value_or(time_point{}) >= *f.dead_since) &&
                        (!f.id || row.id == *f.id);
      if (!take) {
        ++it;
        continue;
      }
      db.by_id_.erase(row.id);
      db.archive_.insert_or_assign(it->first, memory_archived_row{row, now});
      it = db.rows_.erase(it);
      ++done;
    }
    return done;
  }

  /// See `concepts::triage_store`.
  static std::size_t purge_archive(memory_database& db, time_point before, std::size_t n) {
    std::lock_guard lock(db.mutex_);
    db.check_fault(memory_operation::operations, "purge_archive");
    std::vector<std::pair<time_point, std::int64_t>> old;
    for (const auto& [seq, a] : db.archive_)
      if (a.archived_at < before) old.emplace_back(a.archived_at, seq);
    std::sort(old.begin(), old.end());
    if (old.size() > n) old.resize(n);
    for (const auto& [at, seq] : old) db.archive_.erase(seq);
    return old.size();
  }

  /// The archived dead letters, by seq (for tests).
  static std::vector<memory_archived_row> archive(memory_database& db) {
    std::lock_guard lock(db.mutex_);
    std::vector<memory_archived_row> out;
    for (const auto& [seq, a] : db.archive_) out.push_back(a);
    return out;
  }

  /// See `concepts::replay_store`.
  static replay_estimate replay_count(memory_database& db, const replay_filter& f) {
    std::lock_guard lock(db.mutex_);
    db.check_fault(memory_operation::operations, "replay_count");
    replay_estimate e;
    for (const auto& [seq, row] : db.rows_) {
      if (row.state != memory_row::state_type::published) continue;
      e.any_kept = true;
      if (matches(row, f)) ++e.matching;
    }
    return e;
  }

  /// See `concepts::replay_store`.
  static std::size_t replay(memory_database& db, const replay_filter& f, time_point now,
                            std::size_t n) {
    std::size_t done = 0;
    {
      std::lock_guard lock(db.mutex_);
      db.check_fault(memory_operation::operations, "replay");
      for (auto& [seq, row] : db.rows_) {
        if (done >= n) break;
        if (row.state != memory_row::state_type::published || !matches(row, f)) continue;
        make_pending(row, now);
        row.published_at.reset();
        row.last_error.clear();
        ++done;
      }
      if (done > 0) ++db.appended_;
    }
    db.cv_.notify_all();
    return done;
  }

 private:
  static bool matches(const memory_row& row, const replay_filter& f) {
    return row.created_at >= f.since && row.created_at < f.until &&
           (!f.event_type || row.event_type == *f.event_type) &&
           (!f.aggregate_type || row.aggregate_type == *f.aggregate_type) &&
           (!f.aggregate_id || row.aggregate_id == *f.aggregate_id);
  }
  static void make_pending(memory_row& row, time_point now) {
    row.state = memory_row::state_type::pending;
    row.attempts = 0;
    row.available_at = time_point{};
    row.lease_owner.clear();
    row.lease_token.reset();
    ++row.replays;
    row.replayed_at = now;
  }
};

}  // namespace outbox::testing
