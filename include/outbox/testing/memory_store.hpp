#pragma once
/// @file
/// The in-memory store: the reference implementation of every store concept, for unit tests of
/// a service (writer, relay and consumer with no database) and for the library's own core-only
/// tests. Its semantics are those of the concept tables, with the SQLite store's *leasing*
/// claim policy:
///
/// - `claim` stamps owner, expiry (`now + lease`) and a fencing token (never reused) on at most
///   `limit` committed pending rows whose time has come, oldest first, and counts an attempt on
///   each; a pending row is not claimed while an earlier pending row of its aggregate is held
///   by a lease or waiting for a retry (dead letters do not hold their aggregate back). A row
///   that cannot be read (headers, names or content type another program wrote) is
///   dead-lettered with the reason and counted in `claimed_batch::unreadable`.
/// - `settle` touches only rows still held under the batch's token (`fenced` counts the rest):
///   published (kept with `published_at`, or deleted, by `retention`), retried (claimable at
///   `retry_at`, the error kept), dead (kept with the error and `dead_at`), released (back to
///   pending, the attempt given back; claimable at once, or at `retry_at` when set: deferred,
///   a row with no last error then getting `settlement::deferral_error()`).
/// - the inbox and the business effect commit together in the session's transaction
///   (`memory_session`), a duplicate is `false` and never aborts the transaction.
/// - `wait_for_work` sleeps on a condition variable until a commit adds outbox rows, a dead
///   letter is requeued, or `interrupt` is called (from any thread).
///
/// Times: the ones passed in (`claim_request::now`, `record_delivery`'s `now`, ...); `settle`
/// stamps `published_at` and `dead_at` with the relay's time (`settle(b, f, now)`; the two-argument
/// `settle` a test calls by hand uses the store's `Clock`), so a test on a manual clock
/// controls them too.
///
/// ```cpp
/// outbox::testing::memory_database db;
/// outbox::testing::memory_session app(db), relay_sql(db);
/// outbox::testing::memory_store app_store(app), relay_store(relay_sql);
/// outbox::writer writer(app_store);
/// {
///   outbox::testing::memory_session::transaction tx(app);
///   app.insert("orders", "42", "1999");                  // the business row
///   writer.enqueue(app, {.aggregate_type = "order", .aggregate_id = "42",
///                        .event_type = "order_placed", .payload = R"({"total":1999})"});
///   tx.commit();                                         // both, or neither
/// }
/// ```

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include <outbox/cause.hpp>
#include <outbox/concepts/store.hpp>
#include <outbox/concepts/triage.hpp>
#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/retry.hpp>
#include <outbox/sql/row.hpp>
#include <outbox/store_options.hpp>
#include <outbox/testing/memory_database.hpp>
#include <outbox/testing/memory_triage.hpp>
#include <outbox/validate.hpp>

namespace outbox::testing {

/// What becomes of a row once its publish is confirmed: the type every store shares.
using outbox::retention;

/// Options of a memory store.
struct memory_store_options {
  /// What becomes of a row once its publish is confirmed.
  enum retention retention = retention::keep;
};

/// A store over a `memory_database`, viewed through one `memory_session` (the relay's or the
/// consumer's own connection; the writer's `append` runs on whatever session the application
/// passes it). Like a SQL store it is used by one thread at a time, except `interrupt`.
///
/// @tparam Clock a `concepts::clock`: the time `settle` stamps (`published_at`, `dead_at`).
template <concepts::clock Clock = system_clock>
class memory_store {
 public:
  using session_type = memory_session;              ///< The connection type.
  using transaction = memory_session::transaction;  ///< What `begin` returns.

  /// @param session the store's own session; it (and its database) must outlive the store.
  /// @param options how published rows are kept.
  /// @param clock the time the two-argument `settle` stamps.
  explicit memory_store(memory_session& session, memory_store_options options = {},
                        Clock clock = {})
      : session_(&session), db_(&session.database()), options_(options), clock_(std::move(clock)) {
    std::lock_guard lock(db_->mutex_);
    seen_ = db_->appended_;
  }
  memory_store(const memory_store&) = delete;
  memory_store& operator=(const memory_store&) = delete;

  /// The session the store was built on.
  [[nodiscard]] session_type& session() noexcept { return *session_; }
  /// The database behind that session.
  [[nodiscard]] memory_database& database() noexcept { return *db_; }
  /// The options the store was built with.
  [[nodiscard]] const memory_store_options& options() const noexcept { return options_; }

  // ---- appending ------------------------------------------------------------------------------

  /// Appends `rows` in `sql`'s open transaction (or commits them at once without one).
  /// @throws outbox::error `misconfigured` for a session of another database, `duplicate` for an
  ///         event id that exists, `permanent` in an aborted transaction, or an injected fault.
  void append(session_type& sql, std::span<const outgoing> rows) {
    if (&sql.database() != db_)
      throw error(errc::misconfigured, "memory", {},
                  "append: the session belongs to another memory_database");
    sql.run<false>(memory_operation::append, "append", [&] {
      for (const auto& r : rows) {
        const bool taken = db_->by_id_.contains(r.id) ||
                           std::any_of(sql.appended_.begin(), sql.appended_.end(),
                                       [&](const memory_row& mine) { return mine.id == r.id; });
        if (taken)
          throw error(errc::duplicate, "memory", "duplicate_key",
                      "append: event id " + r.id.to_string() + " exists");
      }
      for (const auto& r : rows) {
        memory_row row;
        row.id = r.id;
        row.aggregate_type = r.source->aggregate_type;
        row.aggregate_id = r.source->aggregate_id;
        row.event_type = r.source->event_type;
        row.payload = r.source->payload;
        row.headers_json = r.headers_json;
        row.content_type = r.source->content_type;
        row.created_at = r.created_at;
        row.available_at = r.available_at;
        sql.appended_.push_back(std::move(row));
      }
    });
  }

  /// `append`, then the session's commit (`writer::transaction::commit`); on an error the
  /// transaction is rolled back.
  /// @throws outbox::error as `append` or the session's commit; `permanent`, nothing written,
  ///         when no transaction is open on `sql` (`detail::throw_no_transaction`).
  void commit(session_type& sql, std::span<const outgoing> rows) {
    if (!sql.in_transaction()) outbox::detail::throw_no_transaction("memory");
    try {
      if (!rows.empty()) append(sql, rows);
      sql.commit();
    } catch (...) {
      sql.rollback();
      throw;
    }
  }

  // ---- claiming -------------------------------------------------------------------------------

  /// Always (leasing), so a relay pipelines on one store (`concepts::overlapping_claims_store`).
  [[nodiscard]] static constexpr bool claims_overlap() noexcept { return true; }

  /// Claims at most `req.limit` rows under a new token, as the file comment says
  /// (`concepts::claiming_store`). @throws outbox::error an injected fault (`claim`).
  claimed_batch claim(const claim_request& req) {
    claimed_batch batch;
    std::lock_guard lock(db_->mutex_);
    db_->check_fault(memory_operation::claim, "claim");
    batch.token = db_->next_token_++;
    batch.lease_until = req.now + req.lease;
    // Aggregates with a pending row that is held (lease) or waiting (retry_at): their later
    // rows wait. Rows are visited in store order, so only earlier rows hold a row back.
    // A scan limit: only that many of the oldest claimable rows are looked at.
    std::unordered_set<std::string> waiting;
    std::size_t taken = 0;
    std::size_t scanned = 0;
    for (auto& [seq, row] : db_->rows_) {
      if (taken >= req.limit) break;
      if (row.state != memory_row::state_type::pending) continue;
      auto key = aggregate_key(row);
      if (row.available_at > req.now) {
        waiting.insert(std::move(key));
        continue;
      }
      if (req.scan_limit > 0 && scanned++ >= req.scan_limit) break;
      if (waiting.contains(key)) continue;
      ++taken;
      row.attempts = row.attempts == std::numeric_limits<std::int64_t>::max() ? row.attempts
                                                                              : row.attempts + 1;
      row.available_at = batch.lease_until;
      row.lease_owner = std::string(req.owner);
      row.lease_token = batch.token;
      std::string why;
      message m = read_message(row, why);
      if (why.empty()) {
        batch.messages.push_back(std::move(m));
        continue;
      }
      // Unreadable: dead-lettered with the reason; the rest of the batch flows.
      row.state = memory_row::state_type::dead;
      row.dead_at = req.now;
      row.last_error = outbox::sql::storable_text("unreadable row: " + why);
      row.dead_cause = cause_key("unreadable", why);
      clear_lease(row);
      ++batch.unreadable;
    }
    return batch;
  }

  /// Stamped with the store's clock (for tests that settle by hand).
  settle_result settle(const claimed_batch& batch, std::span<const settlement> fates) {
    return settle(batch, fates, clock_.now());
  }

  /// @param batch a batch this store claimed.
  /// @param fates one per message of `batch`, in its order (else `misconfigured`).
  /// @param now stamps published_at and dead_at (the relay passes its clock's time).
  settle_result settle(const claimed_batch& batch, std::span<const settlement> fates,
                       time_point now) {
    batch.require_one_fate_each(fates.size(), "memory");
    settle_result r;
    std::lock_guard lock(db_->mutex_);
    db_->check_fault(memory_operation::settle, "settle");
    for (std::size_t i = 0; i < fates.size(); ++i) {
      const auto it = db_->rows_.find(batch.messages[i].sequence);
      if (it == db_->rows_.end() || it->second.state != memory_row::state_type::pending ||
          it->second.lease_token != batch.token) {
        ++r.fenced;
        continue;
      }
      auto& row = it->second;
      const auto& f = fates[i];
      switch (f.what) {
        case settlement::kind::published:
          ++r.published;
          if (options_.retention == retention::delete_on_publish) {
            db_->by_id_.erase(row.id);
            db_->rows_.erase(it);
            continue;
          }
          row.state = memory_row::state_type::published;
          row.published_at = now;
          break;
        case settlement::kind::retry:
          ++r.retried;
          row.available_at = f.retry_at;
          row.last_error = outbox::sql::storable_text(f.error);
          break;
        case settlement::kind::dead:
          ++r.dead;
          row.state = memory_row::state_type::dead;
          row.dead_at = now;
          row.last_error = outbox::sql::storable_text(f.error);
          row.dead_cause =
              f.cause.empty() ? cause_key("unknown", f.error) : outbox::sql::storable_text(f.cause);
          break;
        case settlement::kind::release:  // at once, or deferred until retry_at
          ++r.released;
          row.available_at = f.retry_at > time_point{} ? f.retry_at : time_point{};
          if (row.attempts > 0) --row.attempts;
          // A deferred row's mark for the stats (a scheduled event has no last error).
          if (f.retry_at > time_point{} && row.last_error.empty())
            row.last_error = outbox::sql::storable_text(f.deferral_error());
          break;
      }
      clear_lease(row);
    }
    return r;
  }

  /// Returns the rows of `batch` still held under its token to pending, their attempt given
  /// back (a settle with every fate `release`).
  void release(const claimed_batch& batch) {
    std::vector<settlement> fates(batch.size());
    settle(batch, fates);
  }

  // ---- inbox ----------------------------------------------------------------------------------

  /// A transaction on `session()`.
  [[nodiscard]] transaction begin() { return transaction(*session_); }

  /// The class of a `memory_statement_error` (a handler's own statement on the session), else
  /// `nullopt` (`concepts::classifying_store`).
  [[nodiscard]] std::optional<errc> classify(const std::exception& e) const noexcept {
    if (const auto* s = dynamic_cast<const memory_statement_error*>(&e)) return s->kind();
    return std::nullopt;
  }

  /// Records (`consumer`, `id`) in the open transaction of `session()` (on its own without
  /// one): true the first time, false for a duplicate, which does not abort the transaction.
  bool record_delivery(std::string_view consumer, const uuid& id, time_point now) {
    bool fresh = false;
    auto& sql = *session_;
    sql.run<false>(memory_operation::record_delivery, "record_delivery", [&] {
      const auto mine = [&](const memory_inbox_record& r) {
        return r.consumer == consumer && r.id == id;
      };
      fresh = !db_->inbox_.contains({std::string(consumer), id}) &&
              std::none_of(sql.delivered_.begin(), sql.delivered_.end(), mine);
      if (fresh) sql.delivered_.push_back({std::string(consumer), id, now});
    });
    return fresh;
  }

  /// Whether `consumer` recorded `id`: committed, or by the open transaction
  /// (`concepts::inbox_lookup_store`). Fails as `record_delivery` does.
  bool recorded(std::string_view consumer, const uuid& id) {
    bool found = false;
    auto& sql = *session_;
    sql.run<false>(memory_operation::record_delivery, "recorded", [&] {
      found = db_->inbox_.contains({std::string(consumer), id}) ||
              std::any_of(sql.delivered_.begin(), sql.delivered_.end(),
                          [&](const memory_inbox_record& r) {
                            return r.consumer == consumer && r.id == id;
                          });
    });
    return found;
  }

  /// In its own transaction (whatever is open on the session): keeps the delivery and the
  /// reason, and records (consumer, id) in the inbox so that redeliveries are skipped.
  void dead_letter_delivery(std::string_view consumer, const message& m, std::string_view why,
                            time_point now) {
    std::lock_guard lock(db_->mutex_);
    db_->check_fault(memory_operation::dead_letter_delivery, "dead_letter_delivery");
    std::pair<std::string, uuid> key{std::string(consumer), m.id};
    db_->inbox_dead_.insert_or_assign(
        key, memory_inbox_dead_record{key.first, m, outbox::sql::storable_text(why), now});
    db_->inbox_.try_emplace(std::move(key), now);
  }

  // ---- operations -----------------------------------------------------------------------------

  /// The backlog at `now`, counted over the committed rows (`concepts::operable_store`).
  backlog_stats stats(time_point now) {
    backlog_tally all;
    std::lock_guard lock(db_->mutex_);
    db_->check_fault(memory_operation::operations, "stats");
    for (const auto& [seq, row] : db_->rows_) all.add(row, now);
    return all.finish(now);
  }

  /// The backlog per aggregate type (`concepts::aggregate_stats_store`): what `stats` counts,
  /// over each type's rows.
  std::vector<aggregate_type_stats> stats_by_aggregate_type(time_point now) {
    std::map<std::string, backlog_tally, std::less<>> by_type;  // byte order, as the SQL stores
    std::lock_guard lock(db_->mutex_);
    db_->check_fault(memory_operation::operations, "stats_by_aggregate_type");
    for (const auto& [seq, row] : db_->rows_)
      if (row.state != memory_row::state_type::published) by_type[row.aggregate_type].add(row, now);
    std::vector<aggregate_type_stats> out;
    out.reserve(by_type.size());
    for (const auto& [type, tally] : by_type) out.push_back({type, tally.finish(now)});
    return out;
  }

  /// At most `limit` dead letters, in store order (oldest first).
  std::vector<dead_letter> dead_letters(std::size_t limit) {
    std::vector<dead_letter> out;
    std::lock_guard lock(db_->mutex_);
    db_->check_fault(memory_operation::operations, "dead_letters");
    for (const auto& [seq, row] : db_->rows_) {
      if (out.size() >= limit) break;
      if (row.state != memory_row::state_type::dead) continue;
      dead_letter d;
      std::string why;  // listed as far as it can be read; the claim kept the reason
      d.msg = read_message(row, why);
      d.last_error = row.last_error;
      d.dead_at = row.dead_at.value_or(time_point{});
      d.cause = row.dead_cause;
      d.replays = row.replays;
      d.replayed_at = row.replayed_at.value_or(time_point{});
      out.push_back(std::move(d));
    }
    return out;
  }

  /// Makes the dead letter `id` pending again, its attempts reset; false when `id` is not a
  /// dead letter.
  bool requeue(const uuid& id) {
    {
      std::lock_guard lock(db_->mutex_);
      db_->check_fault(memory_operation::operations, "requeue");
      const auto at = db_->by_id_.find(id);
      if (at == db_->by_id_.end()) return false;
      auto& row = db_->rows_.at(at->second);
      if (row.state != memory_row::state_type::dead) return false;
      row.state = memory_row::state_type::pending;
      row.attempts = 0;
      row.available_at = time_point{};
      row.dead_at.reset();
      ++row.replays;
      row.replayed_at = clock_.now();
      clear_lease(row);
      ++db_->appended_;
    }
    db_->cv_.notify_all();
    return true;
  }

  /// Deletes at most `limit` rows published before `before`, in store order.
  /// @returns how many (call again while it returns `limit`).
  std::size_t purge_published(time_point before, std::size_t limit) {
    std::size_t n = 0;
    std::lock_guard lock(db_->mutex_);
    db_->check_fault(memory_operation::operations, "purge_published");
    for (auto it = db_->rows_.begin(); it != db_->rows_.end() && n < limit;) {
      const auto& row = it->second;
      if (row.state == memory_row::state_type::published && row.published_at &&
          *row.published_at < before) {
        db_->by_id_.erase(row.id);
        it = db_->rows_.erase(it);
        ++n;
      } else {
        ++it;
      }
    }
    return n;
  }

  /// Deletes at most `limit` inbox records processed before `before`, oldest first.
  /// @returns how many (call again while it returns `limit`).
  std::size_t purge_inbox(time_point before, std::size_t limit) {
    std::lock_guard lock(db_->mutex_);
    db_->check_fault(memory_operation::operations, "purge_inbox");
    std::vector<memory_database::inbox_map::iterator> old;
    for (auto it = db_->inbox_.begin(); it != db_->inbox_.end(); ++it)
      if (it->second < before) old.push_back(it);
    std::sort(old.begin(), old.end(),
              [](const auto& a, const auto& b) { return a->second < b->second; });
    if (old.size() > limit) old.resize(limit);
    for (const auto& it : old) db_->inbox_.erase(it);
    return old.size();
  }

  /// Dead-letter triage and replay (`concepts::triage_store`, `concepts::replay_store`).
  std::vector<dead_letter_group> dead_letter_groups(std::size_t n) {
    return memory_triage::groups(*db_, n);
  }
  /// See `concepts::triage_store`.
  std::size_t requeue_group(const std::string& key, time_point now, std::size_t n) {
    return memory_triage::requeue_group(*db_, key, now, n);
  }
  /// See `concepts::triage_store`.
  std::size_t discard(const dead_letter_filter& f, time_point now, std::size_t n) {
    return memory_triage::discard(*db_, f, now, n);
  }
  /// See `concepts::triage_store`.
  std::size_t purge_archive(time_point before, std::size_t n) {
    return memory_triage::purge_archive(*db_, before, n);
  }
  /// See `concepts::replay_store`.
  replay_estimate replay_count(const replay_filter& f) {
    return memory_triage::replay_count(*db_, f);
  }
  /// See `concepts::replay_store`.
  std::size_t replay(const replay_filter& f, time_point now, std::size_t n) {
    return memory_triage::replay(*db_, f, now, n);
  }

  /// The earliest `available_at` after `now` of a pending row held by no claim (a scheduled
  /// event, a retry), `concepts::due_telling_store`. @throws outbox::error an injected fault
  /// (`operations`).
  std::optional<time_point> next_due(time_point now) {
    std::lock_guard lock(db_->mutex_);
    db_->check_fault(memory_operation::operations, "next_due");
    std::optional<time_point> due;
    for (const auto& [seq, row] : db_->rows_)
      if (row.state == memory_row::state_type::pending && !row.lease_token &&
          row.available_at > now && (!due || row.available_at < *due))
        due = row.available_at;
    return due;
  }

  // ---- waking ---------------------------------------------------------------------------------

  /// Waits up to `d` for a commit that adds outbox rows (or a requeue) since the last call, or
  /// for `interrupt`. @returns true when woken so, false on timeout. Never throws.
  bool wait_for_work(std::chrono::milliseconds d) noexcept {
    try {
      std::unique_lock lock(db_->mutex_);
      const bool woken =
          db_->cv_.wait_for(lock, d, [&] { return interrupted_ || db_->appended_ != seen_; });
      interrupted_ = false;
      seen_ = db_->appended_;
      return woken;
    } catch (...) {
      return false;
    }
  }

  /// Ends a `wait_for_work` in progress, or the next one. Callable from any thread.
  void interrupt() {
    {
      std::lock_guard lock(db_->mutex_);
      interrupted_ = true;
    }
    db_->cv_.notify_all();
  }

 private:
  /// A backlog being counted, row by row (`stats`, `stats_by_aggregate_type`).
  struct backlog_tally {
    backlog_stats counts{};
    std::optional<time_point> oldest{};

    void add(const memory_row& row, time_point now) {
      if (row.state == memory_row::state_type::dead) {
        ++counts.dead;
        return;
      }
      if (row.state != memory_row::state_type::pending) return;
      if (row.lease_token && row.available_at > now) {
        ++counts.in_flight;
      } else if (!row.lease_token && row.available_at > now && row.attempts == 0 &&
                 row.last_error.empty()) {  // as the writer appended it: a scheduled event
        ++counts.scheduled;
        return;
      } else {
        ++counts.pending;
        if (!row.lease_token && row.available_at > now) ++counts.waiting_retry;
      }
      if (!oldest || row.created_at < *oldest) oldest = row.created_at;
    }
    [[nodiscard]] backlog_stats finish(time_point now) const {
      backlog_stats s = counts;
      if (oldest && now > *oldest)
        s.oldest_pending_age = std::chrono::duration_cast<std::chrono::milliseconds>(now - *oldest);
      return s;
    }
  };

  static std::string aggregate_key(const memory_row& row) {
    return outbox::detail::aggregate_key(row.aggregate_type, row.aggregate_id);
  }

  static void clear_lease(memory_row& row) noexcept {
    row.lease_owner.clear();
    row.lease_token.reset();
  }

  /// A row as a message. Never throws on content: what cannot be read is left empty and `why`
  /// says what it was (see `read_stored_headers`).
  static message read_message(const memory_row& row, std::string& why) {
    message m;
    m.id = row.id;
    m.aggregate_type = row.aggregate_type;
    m.aggregate_id = row.aggregate_id;
    m.event_type = row.event_type;
    m.payload = row.payload;
    m.content_type = row.content_type;
    m.attempts = clamp_attempts(row.attempts);
    m.created_at = row.created_at;
    m.sequence = row.sequence;
    why = read_stored_headers(m, row.headers_json);
    return m;
  }

  memory_session* session_;
  memory_database* db_;
  memory_store_options options_;
  Clock clock_;
  bool interrupted_ = false;  // guarded by the database's mutex
  std::uint64_t seen_ = 0;    // guarded by the database's mutex
};

static_assert(concepts::store<memory_store<>>);
static_assert(concepts::waking_store<memory_store<>>);
static_assert(concepts::classifying_store<memory_store<>>);
static_assert(concepts::inbox_lookup_store<memory_store<>>);
static_assert(concepts::aggregate_stats_store<memory_store<>>);
static_assert(concepts::triage_store<memory_store<>> && concepts::replay_store<memory_store<>>);

}  // namespace outbox::testing
