#pragma once
/// @file
/// The SQLite store: outbox, inbox and dead letters in one SQLite file, over SOCI sessions.
///
/// Claim policy: *leasing* only (`claim_policy::store_default` is leasing here; `locking` is
/// refused). SQLite has one writer at a time, so a claim transaction held open while the broker
/// is awaited would block the application's writers; instead the claim stamps owner, expiry and
/// a fencing token in one short BEGIN IMMEDIATE transaction, the batch is published with no
/// transaction open, and the settle transaction touches only rows still held under that token.
/// Several relays on one file serialize on the write lock (the busy timeout makes them wait, not
/// fail) and never share a row while its lease holds.
///
/// Layout (docs/writing-an-adapter.md, "Store kit"): the SQL is in sql/sqlite/ (embedded as
/// `schema.hpp`), the connection layer in `detail/connection.hpp`, what every store shares in
/// `include/outbox/sql/`; this file maps the store concepts onto those statements.

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <exception>
#include <iterator>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <outbox/concepts/store.hpp>
#include <outbox/concepts/triage.hpp>
#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/schedule.hpp>
#include <outbox/sql/backend.hpp>
#include <outbox/sql/migrate.hpp>
#include <outbox/sql/row.hpp>
#include <outbox/sql/settle.hpp>
#include <outbox/sql/statements.hpp>
#include <outbox/sqlite/appender.hpp>
#include <outbox/sqlite/detail/connection.hpp>
#include <outbox/sqlite/detail/triage.hpp>
#include <outbox/sqlite/schema.hpp>
#include <outbox/store_options.hpp>
#include <outbox/validate.hpp>

namespace outbox::sqlite {

namespace detail {

/// The current row of a statement, as `outbox::sql::read_message` reads it.
struct row {
  const statement& st;
  [[nodiscard]] std::int64_t int64(int c) const { return st.column_int64(c); }
  [[nodiscard]] std::string_view text(int c) const { return st.column_view(c); }
  [[nodiscard]] std::string bytes(int c) const { return st.column_bytes(c); }
  [[nodiscard]] time_point time(int c) const { return from_ms(st.column_int64(c)); }
};

/// A JSON array of sequences (`json_each(?)` in the settle statements).
inline std::string json_array(std::span<const std::int64_t> seqs) {
  return outbox::sql::json_integer_array(seqs);
}

/// The migration runner's host: BEGIN IMMEDIATE is the lock (one writer at a time).
class migration_host {
 public:
  explicit migration_host(sq::sqlite3* db) : db_(db) {}
  void begin_exclusive() {
    if (sq::sqlite3_get_autocommit(db_) == 0)
      throw error(errc::misconfigured, "sqlite", {},
                  "migrate: the session is in a transaction; call migrate outside one");
    // Several processes may migrate at once: wait for the write lock even on a session that
    // was never configured (busy timeout 0), then put its setting back.
    statement current(db_, "PRAGMA busy_timeout");
    busy_timeout_ = current.step() ? static_cast<int>(current.column_int64(0)) : 0;
    current.reset();
    if (busy_timeout_ == 0) sq::sqlite3_busy_timeout(db_, 30'000);
    tx_.emplace(db_);
  }
  std::vector<int> applied() {
    statement exists(db_, statements::migrations_table_exists);
    exists.step();
    std::vector<int> out;
    if (exists.column_int64(0) == 0) return out;
    statement v(db_, statements::migrations_applied);
    while (v.step()) out.push_back(static_cast<int>(v.column_int64(0)));
    return out;
  }
  void apply(const migration& m) { exec(db_, std::string(m.sql).c_str()); }
  void record(const migration& m) {
    statement rec(db_, statements::migrations_record);
    rec.bind(1, std::int64_t{m.version})
        .bind(2, m.name)
        .bind(3, to_ms(std::chrono::system_clock::now()))
        .run();
  }
  void commit() {
    tx_->commit();
    tx_.reset();
    restore();
  }
  void rollback() noexcept {
    tx_.reset();
    restore();
  }

 private:
  void restore() noexcept {
    if (busy_timeout_ == 0) sq::sqlite3_busy_timeout(db_, 0);
    busy_timeout_ = -1;
  }

  sq::sqlite3* db_;
  int busy_timeout_ = -1;  // the session's own, while a migration runs with a longer one
  std::optional<immediate_transaction> tx_;
};

}  // namespace detail

/// The SQLite store. A view over one `soci::session` (the relay's or the consumer's own
/// connection; not shared between threads); the writer's `append` runs on whatever session the
/// application passes it. Movable, not copyable.
///
/// Per-aggregate order: a pending row is not claimed while an earlier pending row of its
/// aggregate is held by a lease or waiting for a retry. Dead letters do not hold back their
/// aggregate (its later events flow; a requeued dead letter is then out of order).
class store {
 public:
  /// The connection type: a SOCI session with the sqlite3 backend.
  using session_type = ::soci::session;

  /// A BEGIN IMMEDIATE transaction; rolls back on destruction unless committed.
  class transaction {
   public:
    /// Begins it on `db`, waiting for the write lock up to the busy timeout.
    explicit transaction(detail::sq::sqlite3* db) : tx_(db) {}
    /// Commits. @throws outbox::error `transient` when the commit is refused as busy (then
    /// rolled back), `permanent` when a failed statement had already rolled it back.
    void commit() { tx_.commit(); }

   private:
    detail::immediate_transaction tx_;
  };

  /// What the writer needs: an append on the application's session (`sqlite::appender`).
  using appender = sqlite::appender;

  /// The session set-up every connection to the file needs: WAL (readers never block), the busy
  /// timeout, synchronous FULL or NORMAL. Call it on the application's own sessions too.
  /// @throws outbox::error `misconfigured` for a session of another backend, or when WAL is
  ///         refused (e.g. inside a transaction).
  static void configure(session_type& sql, const session_options& o = {}) {
    auto* db = detail::handle(sql);
    detail::sq::sqlite3_busy_timeout(db, static_cast<int>(o.lock_timeout.count()));
    detail::statement wal(db, "PRAGMA journal_mode=WAL");
    const std::string mode = wal.step() ? wal.column_text(0) : std::string();
    wal.reset();
    // An in-memory database answers "memory"; anything else means WAL could not be turned on,
    // and readers would block writers.
    if (mode != "wal" && mode != "memory")
      throw error(errc::misconfigured, "sqlite", {},
                  "journal_mode=WAL refused, got '" + mode + "'");
    detail::exec(db, o.durable_commits ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL");
  }

  /// The SOCI backend of the store's sessions: `soci::session sql(Store::soci_backend, ...)`.
  static constexpr const char* soci_backend = "sqlite3";
  /// Opens `sql`, a session not yet open, with the store's SOCI backend on `connect_string`:
  /// `soci::session::open`, its failure classified as the store's statements' are.
  /// @throws outbox::error `misconfigured` for a file that cannot be opened (14: no such directory,
  ///         no right), `transient` for a busy or full one.
  static void connect(session_type& sql, const std::string& connect_string) {
    outbox::sql::open_session(sql, soci_backend, connect_string, detail::connect_error);
  }
  /// The schema version this library migrates to (the number of migration files).
  static constexpr int schema_version = static_cast<int>(std::size(migrations));

  /// Applies the migrations of `sql/sqlite/` the database does not have yet (up to `target`),
  /// in one BEGIN IMMEDIATE transaction (`outbox::sql::run_migrations`). Safe from several
  /// processes. @returns the schema version after the call.
  static int migrate(session_type& sql, int target = outbox::sql::latest_version) {
    detail::migration_host host(detail::handle(sql));
    return outbox::sql::run_migrations(host, migrations, "sqlite", target);
  }

  /// @param sql the store's own connection, connected with the sqlite3 backend; it must
  ///            outlive the store. Not migrated here: call `migrate` once. Configured with
  ///            `options.session` unless `options.configure_session` is false.
  /// @param options the store options; `store_default` resolves to `leasing`.
  /// @throws outbox::error `misconfigured` for a locking claim policy (SQLite has none).
  explicit store(session_type& sql, store_options options = {})
      : sql_(&sql), db_(detail::handle(sql)), options_(options), rng_(std::random_device{}()) {
    if (options_.policy == claim_policy::locking)
      throw error(errc::misconfigured, "sqlite", {},
                  "claim_policy::locking: SQLite has no row locks to skip; use leasing (the "
                  "store's default)");
    options_.policy = claim_policy::leasing;
    if (options_.configure_session) configure(sql, options_.session);
  }
  /// Moves the store; the moved-from store may only be destroyed or assigned to.
  store(store&&) noexcept = default;
  /// Moves the store; the moved-from store may only be destroyed or assigned to.
  store& operator=(store&&) noexcept = default;

  /// The connection the store was built on.
  [[nodiscard]] session_type& session() noexcept { return *sql_; }
  /// The options in effect (the claim policy resolved to `leasing`).
  [[nodiscard]] const store_options& options() const noexcept { return options_; }
  /// Always (leasing: a claim is one short transaction), so a relay pipelines on one store
  /// (`concepts::overlapping_claims_store`).
  [[nodiscard]] static constexpr bool claims_overlap() noexcept { return true; }

  // ---- appending ------------------------------------------------------------------------------

  /// `appender::append`.
  void append(session_type& sql, std::span<const outgoing> rows) { appender{}.append(sql, rows); }

  // ---- claiming -------------------------------------------------------------------------------

  /// Claims at most `req.limit` rows under a new token in one BEGIN IMMEDIATE transaction
  /// (`concepts::claiming_store`); a row it cannot read is dead-lettered in that transaction.
  claimed_batch claim(const claim_request& req) {
    prepare();
    claimed_batch batch;
    batch.token = static_cast<std::int64_t>(rng_() >> 1);
    batch.lease_until = req.now + req.lease;
    const auto now = detail::to_ms(req.now);
    detail::immediate_transaction tx(db_);
    auto& st = st_.claim;
    st.bind(1, detail::to_ms(batch.lease_until))
        .bind(2, req.owner)
        .bind(3, batch.token)
        .bind(4, now)
        .bind(5, static_cast<std::int64_t>(req.limit))
        .bind(6, outbox::sql::scan_limit(req));
    // Not reserve(req.limit): the limit is the caller's number, the rows are what exists.
    batch.messages.reserve(std::min<std::size_t>(req.limit, 1024));
    std::vector<std::pair<std::int64_t, std::string>> unreadable;
    try {
      while (st.step()) {
        std::string why;
        message m = outbox::sql::read_message(detail::row{st}, why);
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
      const auto text = outbox::sql::storable_text("unreadable row: " + why);
      const auto cause = cause_key("unreadable", why);
      batch.unreadable += static_cast<std::size_t>(st_.dead.bind(1, now)
                                                       .bind(2, text)
                                                       .bind(3, seq)
                                                       .bind(4, batch.token)
                                                       .bind(5, cause)
                                                       .run());
    }
    tx.commit();
    batch.sort_by_sequence();  // RETURNING gives no order guarantee
    return batch;
  }

  /// @param batch a batch this store claimed.
  /// @param fates one per message of `batch`, in its order (else `misconfigured`).
  /// @param now stamps published_at and dead_at (the relay's clock).
  settle_result settle(const claimed_batch& batch, std::span<const settlement> fates,
                       time_point now) {
    const auto plan = outbox::sql::settle_plan::of(batch, fates, "sqlite");
    prepare();
    settle_result r;
    const auto at = detail::to_ms(now);
    detail::immediate_transaction tx(db_);
    if (!plan.published.empty()) {
      const auto list = detail::json_array(plan.published);
      if (options_.retention == retention::keep)
        r.published = static_cast<std::size_t>(
            st_.mark_published.bind(1, list).bind(2, batch.token).bind(3, at).run());
      else
        r.published =
            static_cast<std::size_t>(st_.delete_published.bind(1, list).bind(2, batch.token).run());
    }
    if (!plan.released.empty()) {
      const auto list = detail::json_array(plan.released);
      r.released = static_cast<std::size_t>(st_.release.bind(1, list)
                                                .bind(2, batch.token)
                                                .bind(3, std::int64_t{0})
                                                .bind_null(4)
                                                .run());
    }
    for (const auto& d : plan.deferred) {  // claimable at retry_at, never before (rounded up)
      const auto list = detail::json_array(std::span(&d.seq, 1));
      r.released += static_cast<std::size_t>(
          st_.release.bind(1, list)
              .bind(2, batch.token)
              .bind(3, outbox::detail::to_unix_ceil<std::chrono::milliseconds>(d.retry_at))
              .bind(4, d.error)
              .run());
    }
    for (const auto& f : plan.failed) {
      if (f.code == outbox::sql::fate_code::retry)
        r.retried += static_cast<std::size_t>(st_.retry.bind(1, detail::to_ms(f.retry_at))
                                                  .bind(2, f.error)
                                                  .bind(3, f.seq)
                                                  .bind(4, batch.token)
                                                  .run());
      else
        r.dead += static_cast<std::size_t>(st_.dead.bind(1, at)
                                               .bind(2, f.error)
                                               .bind(3, f.seq)
                                               .bind(4, batch.token)
                                               .bind(5, f.cause)
                                               .run());
    }
    tx.commit();
    return plan.finish(r);
  }

  /// Returns the rows of `batch` still held under its token to pending, their attempt given
  /// back (a settle with every fate `release`).
  void release(const claimed_batch& batch) {
    std::vector<settlement> fates(batch.size());
    settle(batch, fates, batch.lease_until);  // nothing is stamped by a release
  }

  // ---- inbox ----------------------------------------------------------------------------------

  /// A write transaction on `session()` for the consumer (`concepts::inbox_store`).
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

  /// Records (`consumer`, `id`) in the open transaction: true the first time, false for a
  /// duplicate, which does not abort the transaction (`concepts::inbox_store`).
  bool record_delivery(std::string_view consumer, const uuid& id, time_point now) {
    prepare();
    const auto text = id.to_string();
    return st_.inbox_insert.bind(1, consumer).bind(2, text).bind(3, detail::to_ms(now)).run() == 1;
  }

  /// Whether `consumer` recorded `id` (`concepts::inbox_lookup_store`).
  bool recorded(std::string_view consumer, const uuid& id) {
    prepare();
    const auto text = id.to_string();
    auto& st = st_.inbox_recorded.bind(1, consumer).bind(2, text);
    const bool found = st.step();
    st.reset();
    return found;
  }

  /// In a transaction of its own: keeps `m` and `why` in the inbox dead letters, and records
  /// (`consumer`, `m.id`) so that redeliveries are skipped.
  void dead_letter_delivery(std::string_view consumer, const message& m, std::string_view why,
                            time_point now) {
    prepare();
    // What a peer delivered is kept whatever it is: the payload as bytes, the texts made
    // storable (as on every store).
    using outbox::sql::storable_text;
    const auto id = m.id.to_string();
    const auto headers = outbox::sql::storable_headers(m.headers);
    const std::string texts[] = {storable_text(m.aggregate_type), storable_text(m.aggregate_id),
                                 storable_text(m.event_type), storable_text(why),
                                 storable_text(m.content_type)};
    const auto at = detail::to_ms(now);
    detail::immediate_transaction tx(db_);
    detail::statement st(db_, statements::inbox_dead);
    st.bind(1, consumer).bind(2, id).bind(3, texts[0]).bind(4, texts[1]).bind(5, texts[2]);
    st.bind_blob(6, m.payload).bind(7, headers).bind(8, texts[3]).bind(9, at);
    st.bind(10, texts[4]).run();
    st_.inbox_insert.bind(1, consumer).bind(2, id).bind(3, at).run();
    tx.commit();
  }

  // ---- operations -----------------------------------------------------------------------------

  /// The backlog at `now`, in one statement (`concepts::operable_store`).
  backlog_stats stats(time_point now) {
    prepare();
    const auto t = detail::to_ms(now);
    detail::statement st(db_, statements::stats);
    st.bind(1, t).step();
    return outbox::sql::read_backlog<std::milli>(detail::row{st}, 0, t);
  }

  /// When the next waiting row (a scheduled event, a retry) falls due, after `now`; nullopt when
  /// none waits (`concepts::due_telling_store`: an idle relay wakes then, not a poll later).
  std::optional<time_point> next_due(time_point now) {
    prepare();
    detail::statement st(db_, statements::next_due);
    st.bind(1, detail::to_ms(now)).step();
    const std::int64_t ms = st.column_int64(0);
    if (ms <= 0) return std::nullopt;
    return detail::from_ms(ms);
  }

  /// The backlog per aggregate type, in one statement (`concepts::aggregate_stats_store`).
  std::vector<aggregate_type_stats> stats_by_aggregate_type(time_point now) {
    prepare();
    const auto t = detail::to_ms(now);
    detail::statement st(db_, statements::stats_by_type);
    st.bind(1, t);
    std::vector<aggregate_type_stats> out;
    while (st.step()) {
      const detail::row r{st};
      out.push_back({std::string(r.text(0)), outbox::sql::read_backlog<std::milli>(r, 1, t)});
    }
    return out;
  }

  /// At most `limit` dead letters, oldest first.
  std::vector<dead_letter> dead_letters(std::size_t limit) {
    prepare();
    detail::statement st(db_, statements::dead_letters);
    st.bind(1, static_cast<std::int64_t>(limit));
    std::vector<dead_letter> out;
    while (st.step()) out.push_back(outbox::sql::read_dead_letter(detail::row{st}));
    return out;
  }

  /// Makes the dead letter `id` pending again, its attempts reset; false when `id` is not a
  /// dead letter.
  bool requeue(const uuid& id) {
    prepare();
    const auto text = id.to_string();
    detail::immediate_transaction tx(db_);
    detail::statement st(db_, statements::requeue);
    const bool done = st.bind(1, text).run() == 1;
    tx.commit();
    return done;
  }

  /// At most `n` groups of dead letters by cause key, the largest first
  /// (`concepts::triage_store`).
  std::vector<dead_letter_group> dead_letter_groups(std::size_t n) {
    prepare();
    return detail::dead_letter_groups(db_, n);
  }
  /// Requeues at most `n` dead letters of cause `key`, oldest first; how many.
  std::size_t requeue_group(const std::string& key, time_point now, std::size_t n) {
    prepare();
    return detail::requeue_group(db_, key, now, n);
  }
  /// Moves at most `n` dead letters matching `f`, oldest first, to the archive; how many.
  std::size_t discard(const dead_letter_filter& f, time_point now, std::size_t n) {
    prepare();
    return detail::discard(db_, f, now, n);
  }
  /// Deletes at most `n` archived dead letters archived before `before`, oldest first.
  std::size_t purge_archive(time_point before, std::size_t n) {
    return purge(statements::purge_archive, before, n);
  }
  /// What `replay(f, ...)` would send (`concepts::replay_store`).
  replay_estimate replay_count(const replay_filter& f) {
    prepare();
    return detail::replay_count(db_, f);
  }
  /// Makes at most `n` published events matching `f` pending again, oldest first; how many.
  std::size_t replay(const replay_filter& f, time_point now, std::size_t n) {
    prepare();
    return detail::replay(db_, f, now, n);
  }

  /// Deletes at most `limit` rows published before `before`, oldest first.
  /// @returns how many (call again while it returns `limit`).
  std::size_t purge_published(time_point before, std::size_t limit) {
    return purge(statements::purge_published, before, limit);
  }

  /// Deletes at most `limit` inbox records processed before `before`, oldest first.
  /// @returns how many (call again while it returns `limit`).
  std::size_t purge_inbox(time_point before, std::size_t limit) {
    return purge(statements::purge_inbox, before, limit);
  }

 private:
  std::size_t purge(std::string_view sql, time_point before, std::size_t limit) {
    prepare();
    detail::immediate_transaction tx(db_);
    detail::statement st(db_, sql);
    const auto n =
        st.bind(1, detail::to_ms(before)).bind(2, static_cast<std::int64_t>(limit)).run();
    tx.commit();
    return static_cast<std::size_t>(n);
  }

  /// The hot statements, prepared once per connection.
  struct prepared {
    detail::statement claim, mark_published, delete_published, release, retry, dead, inbox_insert,
        inbox_recorded;
  };

  /// Prepares the hot statements once per connection (again if the session reconnected).
  void prepare() {
    auto* db = detail::handle(*sql_);
    if (db == db_ && prepared_) return;
    prepared_ = false;
    db_ = db;
    {
      detail::statement v(db_, statements::schema_version);
      outbox::sql::require_schema_version(v.step() ? v.column_int64(0) : 0, schema_version,
                                          "sqlite");
    }
    st_.claim = detail::statement(db_, statements::claim, true);
    st_.mark_published = detail::statement(db_, statements::settle_published_keep, true);
    st_.delete_published = detail::statement(db_, statements::settle_published_delete, true);
    st_.release = detail::statement(db_, statements::settle_release, true);
    st_.retry = detail::statement(db_, statements::settle_retry, true);
    st_.dead = detail::statement(db_, statements::settle_dead, true);
    st_.inbox_insert = detail::statement(db_, statements::inbox_insert, true);
    st_.inbox_recorded = detail::statement(db_, statements::inbox_recorded, true);
    prepared_ = true;  // last: a failure above leaves the store to prepare again next time
  }

  session_type* sql_;
  detail::sq::sqlite3* db_;
  bool prepared_ = false;
  store_options options_;
  std::mt19937_64 rng_;
  prepared st_;
};

static_assert(concepts::store<store>);
static_assert(concepts::inbox_lookup_store<store>);
static_assert(concepts::aggregate_stats_store<store>);
static_assert(concepts::triage_store<store> && concepts::replay_store<store>);

}  // namespace outbox::sqlite
