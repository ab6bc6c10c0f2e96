#pragma once
/// @file
/// The SQLite store: outbox, inbox and dead letters in one SQLite file, over SOCI sessions.
///
/// Claim policy: *leasing* only. SQLite has one writer at a time, so a claim transaction held
/// open while the broker is awaited would block the application's writers; instead the claim
/// stamps owner, expiry and a fencing token in one short BEGIN IMMEDIATE transaction, the batch is
/// published with no transaction open, and the settle transaction touches only rows still held
/// under that token. Several relays on one file serialize on the write lock (the busy timeout
/// makes them wait, not fail) and never share a row while its lease holds.

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <outbox/concepts/store.hpp>
#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/sqlite/detail/native.hpp>
#include <outbox/sqlite/schema.hpp>
#include <outbox/validate.hpp>

namespace outbox::sqlite {

/// What becomes of a row once its publish is confirmed.
enum class retention {
  keep,               ///< Marked published; removed later by `purge_published`, in batches.
  delete_on_publish,  ///< Deleted by the settle itself.
};

/// Connection settings applied by `configure`.
struct connection_options {
  std::chrono::milliseconds busy_timeout{5'000};  ///< How long a writer waits for the lock.
  bool wal = true;                                ///< journal_mode=WAL: readers never block.
  bool synchronous_full = true;  ///< FULL (durable at commit) or NORMAL (may lose the last
                                 ///< commits on power loss, never corrupts). FULL costs ~15%.
};

/// Options of a store.
struct store_options {
  enum retention retention = retention::keep;
  connection_options connection{};
  bool configure_session = true;  ///< Apply `connection` to the store's session at construction.
};

/// Sets WAL, busy timeout and synchronous on a session. Call it on the application's own
/// sessions too: every connection to the file needs a busy timeout.
/// @throws outbox::error `misconfigured` for a session of another backend.
inline void configure(::soci::session& sql, const connection_options& o = {}) {
  auto* db = detail::handle(sql);
  detail::sq::sqlite3_busy_timeout(db, static_cast<int>(o.busy_timeout.count()));
  if (o.wal) {
    detail::statement wal(db, "PRAGMA journal_mode=WAL");
    const std::string mode = wal.step() ? wal.column_text(0) : std::string();
    wal.reset();
    // An in-memory database answers "memory"; anything else means WAL could not be turned on
    // (e.g. inside a transaction), and readers would block writers.
    if (mode != "wal" && mode != "memory")
      throw error(errc::misconfigured, "sqlite", {},
                  "journal_mode=WAL refused, got '" + mode + "'");
  }
  detail::exec(db, o.synchronous_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL");
}

/// Applies the migrations of `sql/sqlite/` that the database does not have yet, in one
/// transaction, recording each in `outbox_schema_migrations`. Safe to call from several processes.
/// @returns the schema version after the call.
inline int migrate(::soci::session& sql) {
  auto* db = detail::handle(sql);
  detail::immediate_transaction tx(db);
  int current = 0;
  {
    detail::statement exists(db,
                             "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                             "name = 'outbox_schema_migrations'");
    exists.step();
    if (exists.column_int64(0) > 0) {
      detail::statement v(db, "SELECT coalesce(max(version), 0) FROM outbox_schema_migrations");
      v.step();
      current = static_cast<int>(v.column_int64(0));
    }
  }
  const auto now = detail::to_ms(std::chrono::system_clock::now());
  for (const auto& m : migrations) {
    if (m.version <= current) continue;
    detail::exec(db, std::string(m.sql).c_str());
    detail::statement rec(
        db, "INSERT INTO outbox_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)");
    rec.bind(1, std::int64_t{m.version}).bind(2, m.name).bind(3, now).run();
    current = m.version;
  }
  tx.commit();
  return current;
}

/// The SQLite store. A view over one `soci::session` (the relay's or the consumer's own
/// connection; not shared between threads); the writer's `append` runs on whatever session the
/// application passes it.
///
/// Per-aggregate order: a pending row is not claimed while an earlier pending row of its
/// aggregate is held by a lease or waiting for a retry. Dead letters do not hold back their
/// aggregate (its later events flow; a requeued dead letter is then out of order).
class store {
 public:
  using session_type = ::soci::session;

  /// A BEGIN IMMEDIATE transaction; rolls back on destruction unless committed.
  class transaction {
   public:
    explicit transaction(detail::sq::sqlite3* db) : tx_(db) {}
    void commit() { tx_.commit(); }

   private:
    detail::immediate_transaction tx_;
  };

  /// @param sql the store's own connection, connected with the sqlite3 backend; it must
  ///            outlive the store. Not migrated here: call `migrate` once.
  explicit store(::soci::session& sql, store_options options = {})
      : sql_(&sql), db_(detail::handle(sql)), options_(options), rng_(std::random_device{}()) {
    if (options_.configure_session) configure(sql, options_.connection);
  }
  store(const store&) = delete;
  store& operator=(const store&) = delete;

  [[nodiscard]] session_type& session() noexcept { return *sql_; }
  [[nodiscard]] const store_options& options() const noexcept { return options_; }

  // ---- appending ------------------------------------------------------------------------------

  /// Inserts `rows` on `sql` inside the caller's open transaction: one multi-row INSERT (chunked
  /// at 500 rows to stay under SQLite's parameter limit).
  void append(session_type& sql, std::span<const outgoing> rows) {
    auto* db = detail::handle(sql);
    constexpr std::size_t chunk = 500;
    for (std::size_t off = 0; off < rows.size(); off += chunk) {
      const std::size_t n = std::min(chunk, rows.size() - off);
      std::string text =
          "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, "
          "headers, created_at) VALUES ";
      for (std::size_t i = 0; i < n; ++i) text += i ? ",(?,?,?,?,?,?,?)" : "(?,?,?,?,?,?,?)";
      detail::statement st(db, text);
      std::vector<std::string> ids;
      ids.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        const outgoing& r = rows[off + i];
        const int b = static_cast<int>(i) * 7;
        ids.push_back(r.id.to_string());
        st.bind(b + 1, ids.back())
            .bind(b + 2, r.source->aggregate_type)
            .bind(b + 3, r.source->aggregate_id)
            .bind(b + 4, r.source->event_type)
            .bind(b + 5, r.source->payload)
            .bind(b + 6, r.headers_json)
            .bind(b + 7, detail::to_ms(r.created_at));
      }
      st.run();
    }
  }

  // ---- claiming -------------------------------------------------------------------------------

  claimed_batch claim(const claim_request& req) {
    prepare();
    claimed_batch batch;
    batch.token = static_cast<std::int64_t>(rng_() >> 1);
    batch.lease_until = req.now + req.lease;
    const auto now = detail::to_ms(req.now);
    detail::immediate_transaction tx(db_);
    auto& st = claim_;
    st.bind(1, detail::to_ms(batch.lease_until))
        .bind(2, req.owner)
        .bind(3, batch.token)
        .bind(4, now)
        .bind(5, static_cast<std::int64_t>(req.limit));
    // Not reserve(req.limit): the limit is the caller's number, the rows are what exists.
    batch.messages.reserve(std::min<std::size_t>(req.limit, 1024));
    std::vector<std::pair<std::int64_t, std::string>> unreadable;
    try {
      while (st.step()) {
        std::string why;
        message m = read_message(st, why);
        if (why.empty())
          batch.messages.push_back(std::move(m));
        else
          unreadable.emplace_back(m.sequence, std::move(why));
      }
    } catch (...) {
      st.reset();
      throw;
    }
    st.reset();
    // A row that cannot be read is dead-lettered in the claim's own transaction, with the
    // reason; the rest of the batch flows.
    for (const auto& [seq, why] : unreadable) {
      const auto text = sanitize_text("unreadable row: " + why);
      batch.unreadable += static_cast<std::size_t>(
          dead_.bind(1, now).bind(2, text).bind(3, seq).bind(4, batch.token).run());
    }
    tx.commit();
    batch.sort_by_sequence();  // RETURNING gives no order guarantee
    return batch;
  }

  settle_result settle(const claimed_batch& batch, std::span<const settlement> fates) {
    batch.require_one_fate_each(fates.size(), "sqlite");
    prepare();
    settle_result r;
    std::string published = "[";
    std::string released = "[";
    std::size_t n_published = 0;
    std::size_t n_released = 0;
    published.reserve(fates.size() * 8);
    const auto add = [](std::string& list, std::size_t& n, std::int64_t seq) {
      if (n++) list += ',';
      char buf[24];
      const auto r = std::to_chars(buf, buf + sizeof buf, seq);
      list.append(buf, r.ptr);
    };
    for (std::size_t i = 0; i < fates.size(); ++i) {
      if (fates[i].what == settlement::kind::published)
        add(published, n_published, batch.messages[i].sequence);
      else if (fates[i].what == settlement::kind::release)
        add(released, n_released, batch.messages[i].sequence);
    }
    published += "]";
    released += "]";
    const auto now = detail::to_ms(std::chrono::system_clock::now());
    detail::immediate_transaction tx(db_);
    if (n_published) {
      auto& st = options_.retention == retention::keep ? mark_published_ : delete_published_;
      if (options_.retention == retention::keep) st.bind(3, now);
      r.published = static_cast<std::size_t>(st.bind(1, published).bind(2, batch.token).run());
    }
    if (n_released) {
      r.released = static_cast<std::size_t>(release_.bind(1, released).bind(2, batch.token).run());
    }
    for (std::size_t i = 0; i < fates.size(); ++i) {
      const auto& f = fates[i];
      const auto seq = batch.messages[i].sequence;
      if (f.what == settlement::kind::retry) {
        r.retried += static_cast<std::size_t>(retry_.bind(1, detail::to_ms(f.retry_at))
                                                  .bind(2, f.error)
                                                  .bind(3, seq)
                                                  .bind(4, batch.token)
                                                  .run());
      } else if (f.what == settlement::kind::dead) {
        r.dead += static_cast<std::size_t>(
            dead_.bind(1, now).bind(2, f.error).bind(3, seq).bind(4, batch.token).run());
      }
    }
    tx.commit();
    r.fenced = fates.size() - (r.published + r.released + r.retried + r.dead);
    return r;
  }

  void release(const claimed_batch& batch) {
    std::vector<settlement> fates(batch.size());
    settle(batch, fates);
  }

  // ---- inbox ----------------------------------------------------------------------------------

  [[nodiscard]] transaction begin() {
    prepare();
    return transaction(db_);
  }

  /// Classifies an error of SOCI's sqlite3 backend (a handler's own statement) by its result
  /// code: busy or locked -> transient, and so on (`concepts::classifying_store`).
  [[nodiscard]] std::optional<errc> classify(const std::exception& e) const noexcept {
    if (const auto* s = dynamic_cast<const ::soci::sqlite3_soci_error*>(&e))
      return detail::classify(s->result());
    return std::nullopt;
  }

  bool record_delivery(std::string_view consumer, const uuid& id, time_point now) {
    prepare();
    const auto text = id.to_string();
    return inbox_insert_.bind(1, consumer).bind(2, text).bind(3, detail::to_ms(now)).run() == 1;
  }

  void dead_letter_delivery(std::string_view consumer, const message& m, std::string_view why,
                            time_point now) {
    prepare();
    const auto id = m.id.to_string();
    const auto headers = headers_to_json(m.headers);
    const auto at = detail::to_ms(now);
    detail::immediate_transaction tx(db_);
    detail::statement st(db_,
                         "INSERT OR REPLACE INTO outbox_inbox_dead (consumer, event_id, "
                         "aggregate_type, aggregate_id, event_type, payload, headers, error, "
                         "failed_at) VALUES (?,?,?,?,?,?,?,?,?)");
    st.bind(1, consumer).bind(2, id).bind(3, m.aggregate_type).bind(4, m.aggregate_id);
    st.bind(5, m.event_type).bind(6, m.payload).bind(7, headers).bind(8, why).bind(9, at).run();
    inbox_insert_.bind(1, consumer).bind(2, id).bind(3, at).run();
    tx.commit();
  }

  // ---- operations -----------------------------------------------------------------------------

  backlog_stats stats(time_point now) {
    prepare();
    const auto t = detail::to_ms(now);
    backlog_stats s;
    detail::statement st(db_,
                         "SELECT count(*), "
                         "coalesce(sum(lease_token IS NOT NULL AND available_at > ?1), 0), "
                         "min(created_at) FROM outbox WHERE state = 0");
    st.bind(1, t);
    st.step();
    const auto all = st.column_int64(0);
    s.in_flight = st.column_int64(1);
    s.pending = all - s.in_flight;
    if (!st.column_is_null(2))
      s.oldest_pending_age = std::chrono::milliseconds(elapsed(t, st.column_int64(2)));
    st.reset();
    detail::statement dead(db_, "SELECT count(*) FROM outbox WHERE state = 2");
    dead.step();
    s.dead = dead.column_int64(0);
    return s;
  }

  std::vector<dead_letter> dead_letters(std::size_t limit) {
    prepare();
    detail::statement st(db_,
                         "SELECT seq, event_id, aggregate_type, aggregate_id, event_type, payload, "
                         "headers, attempts, created_at, coalesce(last_error, ''), "
                         "coalesce(dead_at, 0) FROM outbox WHERE state = 2 ORDER BY seq LIMIT ?");
    st.bind(1, static_cast<std::int64_t>(limit));
    std::vector<dead_letter> out;
    while (st.step()) {
      dead_letter d;
      std::string why;  // listed as far as it can be read; the claim kept the reason
      d.msg = read_message(st, why);
      d.last_error = st.column_text(9);
      d.dead_at = detail::from_ms(st.column_int64(10));
      out.push_back(std::move(d));
    }
    st.reset();
    return out;
  }

  bool requeue(const uuid& id) {
    prepare();
    const auto text = id.to_string();
    detail::immediate_transaction tx(db_);
    detail::statement st(db_,
                         "UPDATE outbox SET state = 0, attempts = 0, available_at = 0, "
                         "lease_owner = NULL, lease_token = NULL, dead_at = NULL "
                         "WHERE event_id = ? AND state = 2");
    const bool done = st.bind(1, text).run() == 1;
    tx.commit();
    return done;
  }

  std::size_t purge_published(time_point before, std::size_t limit) {
    prepare();
    detail::immediate_transaction tx(db_);
    detail::statement st(db_,
                         "DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox INDEXED BY "
                         "outbox_by_state WHERE state = 1 AND published_at < ? ORDER BY seq "
                         "LIMIT ?)");
    const auto n =
        st.bind(1, detail::to_ms(before)).bind(2, static_cast<std::int64_t>(limit)).run();
    tx.commit();
    return static_cast<std::size_t>(n);
  }

  std::size_t purge_inbox(time_point before, std::size_t limit) {
    prepare();
    detail::immediate_transaction tx(db_);
    detail::statement st(db_,
                         "DELETE FROM outbox_inbox WHERE rowid IN (SELECT rowid FROM outbox_inbox "
                         "WHERE processed_at < ? ORDER BY processed_at LIMIT ?)");
    const auto n =
        st.bind(1, detail::to_ms(before)).bind(2, static_cast<std::int64_t>(limit)).run();
    tx.commit();
    return static_cast<std::size_t>(n);
  }

 private:
  /// The current row of a statement whose first nine columns are seq, event_id, aggregate_type,
  /// aggregate_id, event_type, payload, headers, attempts, created_at (ms): claim and
  /// dead_letters both select them in this order. Never throws on content: what cannot be
  /// read (a row written by another program) is left empty and `why` says what it was.
  static message read_message(const detail::statement& st, std::string& why) {
    message m;
    m.sequence = st.column_int64(0);
    m.id = uuid::parse(st.column_view(1)).value_or(uuid{});
    m.aggregate_type = st.column_text(2);
    m.aggregate_id = st.column_text(3);
    m.event_type = st.column_text(4);
    m.payload = st.column_text(5);
    m.attempts = clamp_attempts(st.column_int64(7));
    m.created_at = detail::from_ms(st.column_int64(8));
    why = read_stored_headers(m, st.column_view(6));
    return m;
  }

  /// Prepares the hot statements once per connection (re-prepared if the session reconnected).
  void prepare() {
    auto* db = detail::handle(*sql_);
    if (db == db_ && prepared_) return;
    prepared_ = false;
    db_ = db;
    claim_ = detail::statement(db_, claim_sql, true);
    mark_published_ = detail::statement(
        db_,
        "UPDATE outbox SET state = 1, published_at = ?3, lease_owner = NULL, lease_token = NULL "
        "WHERE seq IN (SELECT value FROM json_each(?1)) AND lease_token = ?2 AND state = 0",
        true);
    delete_published_ =
        detail::statement(db_,
                          "DELETE FROM outbox WHERE seq IN (SELECT value FROM json_each(?1)) "
                          "AND lease_token = ?2 AND state = 0",
                          true);
    release_ = detail::statement(
        db_,
        "UPDATE outbox SET available_at = 0, attempts = attempts - 1, lease_owner = NULL, "
        "lease_token = NULL WHERE seq IN (SELECT value FROM json_each(?1)) "
        "AND lease_token = ?2 AND state = 0",
        true);
    retry_ = detail::statement(
        db_,
        "UPDATE outbox SET available_at = ?1, last_error = ?2, lease_owner = NULL, "
        "lease_token = NULL WHERE seq = ?3 AND lease_token = ?4 AND state = 0",
        true);
    dead_ = detail::statement(
        db_,
        "UPDATE outbox SET state = 2, dead_at = ?1, last_error = ?2, lease_owner = NULL, "
        "lease_token = NULL WHERE seq = ?3 AND lease_token = ?4 AND state = 0",
        true);
    inbox_insert_ = detail::statement(
        db_,
        "INSERT INTO outbox_inbox (consumer, event_id, processed_at) VALUES (?, ?, ?) "
        "ON CONFLICT DO NOTHING",
        true);
    prepared_ = true;  // last: a failure above leaves the store to prepare again next time
  }

 public:
  /// The claim, one statement (kept public for the bare-SQL benchmark that measures it alone).
  /// ?1 lease expiry, ?2 owner, ?3 fencing token, ?4 now, ?5 limit.
  static constexpr std::string_view claim_sql =
      "UPDATE outbox SET available_at = ?1, lease_owner = ?2, lease_token = ?3, "
      "attempts = attempts + 1 "
      "WHERE seq IN ("
      " SELECT o.seq FROM outbox AS o INDEXED BY outbox_by_state"
      " WHERE o.state = 0 AND o.available_at <= ?4"
      "  AND NOT EXISTS (SELECT 1 FROM outbox AS p INDEXED BY outbox_pending_by_aggregate"
      "   WHERE p.state = 0 AND p.aggregate_type = o.aggregate_type"
      "    AND p.aggregate_id = o.aggregate_id AND p.seq < o.seq AND p.available_at > ?4)"
      " ORDER BY o.seq LIMIT ?5) "
      "RETURNING seq, event_id, aggregate_type, aggregate_id, event_type, payload, headers, "
      "attempts, created_at";

 private:
  ::soci::session* sql_;
  detail::sq::sqlite3* db_;
  bool prepared_ = false;
  store_options options_;
  std::mt19937_64 rng_;
  detail::statement claim_, mark_published_, delete_published_, release_, retry_, dead_,
      inbox_insert_;
};

static_assert(concepts::store<store>);

}  // namespace outbox::sqlite
