#pragma once
/// @file
/// `outbox::postgresql::tailing_store`: the second relay method. Events are read from the
/// database's transaction log (logical replication, `pgoutput`) instead of polled from the
/// outbox table; the table keeps only the events that wait for a retry, and the dead letters.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/postgresql/detail/connection.hpp>
#include <outbox/postgresql/detail/tail_admin.hpp>
#include <outbox/postgresql/detail/tail_batch.hpp>
#include <outbox/postgresql/detail/tail_handout.hpp>
#include <outbox/postgresql/detail/tail_ledger.hpp>
#include <outbox/postgresql/detail/tail_parking.hpp>
#include <outbox/postgresql/detail/tail_positions.hpp>
#include <outbox/postgresql/detail/tail_reader.hpp>
#include <outbox/postgresql/detail/tail_sweep.hpp>
#include <outbox/postgresql/detail/tail_turns.hpp>
#include <outbox/postgresql/detail/tail_writers.hpp>
#include <outbox/postgresql/detail/wakeup.hpp>
#include <outbox/postgresql/detail/wal.hpp>
#include <outbox/postgresql/store.hpp>
#include <outbox/postgresql/tailing_options.hpp>

namespace outbox::postgresql {

/// A store whose claim reads the transaction log: events written by `tailing_store::appender`
/// (`pg_logical_emit_message`, in the caller's transaction: no row, no index, no vacuum) reach
/// the relay in commit order, one transaction after another, as soon as they commit.
///
/// - **Position.** The slot's confirmed position moves past a transaction only once each of its
///   events was confirmed by the broker, or written to the outbox table. A relay that stops,
///   crashes or loses its connection starts again from there: the events after it are sent
///   again (at-least-once; the consumer's inbox absorbs them). Inside a transaction larger
///   than a batch, the first events settled are kept too (outbox_tail_positions), and a new
///   stream skips them.
/// - **Retries and dead letters.** An event the transport fails is written to the outbox table,
///   pending until its retry time (with its attempts), or dead-lettered there; events of its
///   aggregate that follow it in the stream are written behind it until the table has none of
///   that aggregate left, so the aggregate keeps its order while other aggregates flow. Each
///   stream batch asks the table first whether its aggregates have pending rows, so one made
///   pending elsewhere (a requeue, another relay's park) holds the aggregate back at once. The
///   table's rows are claimed like a polling relay's (`table_poll`, or sooner when a retry is
///   due). `stats`, `dead_letters`, `requeue`, the triage (`dead_letter_groups`,
///   `requeue_group`, `discard`, `purge_archive`) and the purges are the table's.
/// - **Scheduled events and deferrals** (`event::deliver_at` ahead; a release with `retry_at`)
///   are parked in the table until their time, as retries are: the aggregate's later events
///   wait behind them. `next_due` tells the relay when the table's next one falls due.
/// - **One relay per slot**, and one tailing relay per outbox table: the retries of the table
///   belong to the relay that wrote them. The table-free writer's events belong to the
///   database (logical decoding messages have no schema): every tailing relay of the database
///   publishes them, so keep one table-free outbox per database (or use `table_mode`).
///
/// Needs `wal_level = logical`, a role with the REPLICATION attribute, the slot and the
/// publication (`setup`). A slot that is not read holds WAL back: drop the slot of a relay
/// that is retired (`drop`).
class tailing_store {
 public:
  /// The connection type: a SOCI session with the postgresql backend.
  using session_type = ::soci::session;

  /// The table-free writer: each event becomes a transactional logical decoding message of
  /// the caller's transaction (prefix `outbox`, `detail::wal::encode_event`): written to the
  /// WAL at commit, gone with a rollback. `outbox::writer<postgresql::tailing_store>` uses it.
  using appender = detail::tail_appender;

  /// The table-mode writer: each event becomes a row of the outbox table as `store`'s writer
  /// writes it, but in state 3 ("streamed"): the relay reads the row's INSERT from the WAL
  /// (through the publication) and deletes the row once the broker confirmed the event. The
  /// row is in none of the indexes a polling claim uses, and never claimed from the table.
  /// `outbox::writer<postgresql::tailing_store::table_mode>` uses it.
  struct table_mode {
    using session_type = ::soci::session;          ///< The connection type of the application.
    using appender = detail::tail_table_appender;  ///< What `append` writes with.
    /// Writes `rows` as streamed rows of the outbox table in the open transaction of `sql`.
    void append(session_type& sql, std::span<const outgoing> rows, const writer_options& o = {}) {
      appender{}.append(sql, rows, o);
    }
  };

  /// Creates what a tailing relay needs when it is missing: the publication and the logical
  /// replication slot (`pgoutput`). Idempotent; safe from several processes. Run it outside a
  /// transaction, after `migrate`, on a session of a role that owns the outbox table, may
  /// create publications and has REPLICATION.
  /// @returns true when the slot was created by this call (it then starts at the current end of
  ///          the WAL: table-free events committed before it are not in it; table mode's rows
  ///          are published from the table, see `claim`).
  /// @throws outbox::error `misconfigured` (a bad name, `wal_level` not logical, no right, an
  ///         existing publication of that name that does not publish the INSERTs of the outbox
  ///         table this session resolves: tail_publication_check.sql).
  static bool setup(session_type& sql, const tailing_options& o = {}) {
    return detail::tail::setup(detail::handle(sql), o);
  }

  /// Drops the relay's slot (its retained WAL is freed) and, with `publication`, the
  /// publication. Missing ones are not an error.
  /// @throws outbox::error `transient` while a relay streams from the slot (55006).
  static void drop(session_type& sql, const tailing_options& o = {}, bool publication = false) {
    detail::tail::drop(detail::handle(sql), o, publication);
  }

  /// @param conninfo the replication connection's parameters (libpq keywords or a URI, as for
  ///        the store's session; `replication=database` is added). Opened by the first claim.
  /// @param table_session the store's own connection for the outbox table (retries, dead
  ///        letters); it must outlive the store. Migrated as for `postgresql::store`.
  /// @param options the slot, the publication and the rest; the table store built from
  ///        `options.table` always leases and never listens.
  /// @throws outbox::error `misconfigured` for a bad slot or publication name, or a
  ///         `read_ahead` of 0.
  tailing_store(std::string conninfo, session_type& table_session, tailing_options options = {})
      : conninfo_(std::move(conninfo)),
        options_(std::move(options)),
        table_(table_session, table_options(options_)),
        parking_(table_) {
    detail::tail::check_names(options_);
    if (options_.read_ahead == 0)
      throw error(errc::misconfigured, "postgresql", {}, "tailing_options.read_ahead must be > 0");
  }

  tailing_store(const tailing_store&) = delete;
  tailing_store& operator=(const tailing_store&) = delete;

  /// The options the store was built with.
  [[nodiscard]] const tailing_options& options() const noexcept { return options_; }
  /// The outbox table's store (retries and dead letters), on the session given.
  [[nodiscard]] store& table() noexcept { return table_; }
  /// The connection of the outbox table store: the session given at construction.
  [[nodiscard]] session_type& session() noexcept { return table_.session(); }
  /// The position up to which every event is settled (reported to the server as the slot's
  /// confirmed position); 0 before the stream was opened.
  [[nodiscard]] detail::wal::lsn settled_position() const noexcept { return ledger().position(); }
  /// Closes the replication stream (the next claim opens it again from the settled position;
  /// what was read and not settled comes again). Before dropping the slot, or to hand it to
  /// another relay: the server's walsender ends once it notices (a moment later).
  void close() noexcept { reset_stream(); }

  /// One stream batch at a time: a claim while one is unsettled starts the stream again.
  [[nodiscard]] bool claims_overlap() const noexcept { return false; }

  /// `appender::append`.
  void append(session_type& sql, std::span<const outgoing> rows, const writer_options& o = {}) {
    appender{}.append(sql, rows, o);
  }

  // ---- claiming -------------------------------------------------------------------------------

  /// The table's due rows when there are any (retries, requeued dead letters), otherwise the
  /// events of the transactions that committed since the last batch, in commit order, up to
  /// `req.limit` (never waits for more). Events of an aggregate that has pending rows in the
  /// table go to the table instead, behind them: the aggregates not known to have some are
  /// looked up in the table before the batch is handed out (parked_aggregates.sql, one
  /// prepared query), so a row made pending by another process (`outbox requeue`, a relay that
  /// parked it and confirmed the slot past it before this stream opened) goes before them.
  ///
  /// Table mode's rows that the stream passed without showing them (written while the
  /// publication did not carry the outbox table, or before the slot was made) are found by a
  /// look every `table_poll` (tail_sweep.sql) and made pending rows of the table once the
  /// settled position is past them (tail_rescue.sql; `stranded_rows`, `on_stranded`): the
  /// table publishes them. The publication is then checked again.
  /// @throws outbox::error `misconfigured` when the publication does not carry the outbox
  ///         table's INSERTs (checked as each stream opens: tail_publication_check.sql).
  claimed_batch claim(const claim_request& req) {
    if (out_) reset_stream();  // the last batch was neither settled nor released: replay it
    open();
    pump();
    // Answer the server first: the table's statements below may fail (a server shutting down
    // ends ordinary sessions before its walsenders, which then wait for our confirmation).
    advance();
    sweep();
    // The table's due rows and the stream take turns when both have work, so a backlog of
    // retries does not hold back the aggregates that flow straight from the stream.
    if (turns_.table_first(req.now, ledger().ready() > 0)) {
      claimed_batch b = table_.claim(req);
      if (!b.empty() || b.unreadable > 0) {
        turns_.table_served();
        advance();  // the server hears from us while the stream waits
        return b;
      }
      turns_.table_empty(req.now, options_.table_poll);
    }
    turns_.stream_served();
    claimed_batch batch;
    batch.token = detail::stream_token(++stream_batches_);
    batch.lease_until = req.now + req.lease;
    detail::stream_batch sb{batch.token, {}, 0, 0, {}};
    // Where the batch starts: the first unsettled transaction, at its next event (every event
    // handed out before is settled: one stream batch at a time).
    const auto head = ledger().head();
    // The events taken, in stream order, up to `req.limit` of aggregates not known parked.
    std::vector<detail::event_in_log> taken;
    std::size_t unparked = 0;
    while (ledger().ready() > 0 && unparked < req.limit) {
      taken.push_back(ledger().hand_out());
      const detail::event_in_log& ev = taken.back();
      if (ev.why.empty() && !parking_.holds(outbox::detail::aggregate_key(ev.m))) ++unparked;
    }
    std::vector<detail::parked_row> to_park;
    try {
      // parking_ knows the rows this store parked or read at the stream's start; pending rows
      // come from elsewhere too (another process's requeue, a relay that parked and moved the
      // slot after this one read them as it opened): the table says, before anything goes.
      if (unparked > 0) parking_.learn(taken);
      to_park = detail::sort_taken(taken, parking_, turns_, req.now, batch, sb, sequence_);
      park(to_park, req.now);
      if (!to_park.empty()) turns_.due_at(req.now);  // parked behind their aggregate
      if (!batch.empty() && head_unclaimed_) count_head_attempt(batch, sb, head);
    } catch (...) {
      reset_stream();  // what was taken from the buffer comes again
      throw;
    }
    if (!batch.empty()) out_ = std::move(sb);
    advance();
    return batch;
  }

  /// Settles a table batch in the table. For a stream batch: confirmed events are done; the
  /// others go to the outbox table (pending with their retry time, pending at once when
  /// released, or dead); then the slot's position moves past every transaction all of whose
  /// events are settled.
  settle_result settle(const claimed_batch& batch, std::span<const settlement> fates,
                       time_point now) {
    if (detail::origin(batch) == detail::batch_origin::table)
      return settle_table(batch, fates, now);
    batch.require_one_fate_each(fates.size(), "postgresql");
    if (!out_ || out_->token != batch.token) {
      settle_result stale;  // the stream restarted since: these events come again
      stale.fenced = fates.size();
      return stale;
    }
    auto [out, to_park] = detail::sort_fates(batch, fates, *out_, turns_, now);
    // The events held back behind the batch's (park sorts them in among the fates).
    if (!out_->behind.empty()) turns_.due_at(now);
    for (auto& r : out_->behind) to_park.push_back(std::move(r));
    try {
      park(to_park, now);
      delete_streamed_rows(batch, fates);
    } catch (...) {
      reset_stream();  // nothing of the batch is settled: the stream replays it
      throw;
    }
    for (std::size_t i = 0; i < fates.size(); ++i)
      if (fates[i].what == settlement::kind::published)
        ledger().settle(out_->of(batch.messages[i].sequence).tx);
    const detail::stream_batch was_out = *std::exchange(out_, std::nullopt);
    advance();
    // The head batch settled, so its claim was no crash: taken back while the slot stays at
    // its position (a relay dying later in that transaction starts there again).
    if (was_out.head_position != 0 &&
        ledger().position() < static_cast<detail::wal::lsn>(was_out.head_position))
      detail::tail::release_attempt(table_, options_.slot, was_out.head_position,
                                    was_out.head_within);
    return out;
  }

  /// A table batch goes back to the table; a stream batch is dropped and the stream starts
  /// again from the settled position (its events come again, attempts not counted).
  void release(const claimed_batch& batch) {
    if (detail::origin(batch) == detail::batch_origin::table) {
      table_.release(batch);
      return;
    }
    if (!out_ || out_->token != batch.token) return;
    // Not an attempt (stopping): the count of the head batch's claims goes back.
    if (out_->head_position != 0)
      detail::tail::release_attempt(table_, options_.slot, out_->head_position, out_->head_within);
    reset_stream();
  }

  // ---- waking ---------------------------------------------------------------------------------

  /// Sleeps until the stream has input, `interrupt` is called, or `timeout` (at most
  /// `table_poll`) passes. Never throws.
  bool wait_for_work(std::chrono::milliseconds timeout) {
    if (ledger().ready() > 0 || reader_.more_buffered()) return true;
    timeout = std::min(timeout, options_.table_poll);
    const auto o = wake_.wait(reader_.socket(), timeout);
    return o.interrupted || o.socket_ready;
  }
  /// Ends a `wait_for_work` in progress, or the next one (from any thread).
  void interrupt() noexcept { wake_.interrupt(); }

  // ---- operations -----------------------------------------------------------------------------

  /// The slot of `o` as the server sees it (any session of the database).
  static slot_status slot(session_type& sql, const tailing_options& o) {
    detail::tail::check_names(o);
    return detail::tail::query_slot(detail::handle(sql), o.slot);
  }

  /// The outbox table's backlog (retries waiting, dead letters), table mode's rows not
  /// published yet (`streamed_unpublished`, `oldest_streamed_age`) and the slot's lag
  /// (`log_lag_bytes`, `log_lag`).
  backlog_stats stats(time_point now) {
    backlog_stats s = table_.stats(now);
    const streamed_status rows = table_.run("streamed rows", [&](PGconn* c) {
      return detail::tail::query_streamed(c, now, streamed_grace);
    });
    s.streamed_unpublished = rows.unpublished;
    s.oldest_streamed_age = rows.oldest_age;
    const slot_status st = own_slot();
    s.log_lag_bytes = st.lag_bytes;
    s.log_lag = st.lag;
    return s;
  }

  /// How long a table-mode row may wait unpublished before `streamed` (and
  /// `backlog_stats::streamed_unpublished`) counts it: a relay that keeps up deletes it moments
  /// after its commit.
  static constexpr std::chrono::seconds streamed_grace{10};

  /// Table mode's rows that no relay has published yet (outbox rows in state 3), on any session
  /// of the outbox table (tail_streamed.sql).
  static streamed_status streamed(session_type& sql, time_point now) {
    return detail::tail::query_streamed(detail::handle(sql), now, streamed_grace);
  }

  /// Table mode's rows this store found passed by its stream and made pending rows of the
  /// table (see `claim`); any thread may read it.
  [[nodiscard]] std::uint64_t stranded_rows() const noexcept {
    return stranded_.load(std::memory_order_relaxed);
  }
  /// When the outbox table's next waiting row (a scheduled event, a retry, a deferral) falls
  /// due, after `now` (`concepts::due_telling_store`, `store::next_due`); the table is looked
  /// at then.
  std::optional<time_point> next_due(time_point now) {
    const auto due = table_.next_due(now);
    if (due) turns_.due_at(*due);
    return due;
  }
  /// At most `n` dead letters of the outbox table, oldest first (`store::dead_letters`).
  std::vector<dead_letter> dead_letters(std::size_t n) { return table_.dead_letters(n); }
  /// Makes the dead letter `id` a pending row of the outbox table again (`store::requeue`).
  bool requeue(const uuid& id) { return table_.requeue(id); }
  /// Deletes at most `n` rows of the outbox table published before `t` (`store::purge_published`).
  std::size_t purge_published(time_point t, std::size_t n) { return table_.purge_published(t, n); }
  /// Deletes at most `n` inbox records processed before `t` (`store::purge_inbox`).
  std::size_t purge_inbox(time_point t, std::size_t n) { return table_.purge_inbox(t, n); }
  /// The outbox table's dead letters by cause key (`concepts::triage_store`, as `store`'s).
  std::vector<dead_letter_group> dead_letter_groups(std::size_t n) {
    return table_.dead_letter_groups(n);
  }
  /// Requeues at most `n` dead letters of cause `key` in the table; the stream's events of
  /// their aggregates wait behind them (the table is asked before each stream batch).
  std::size_t requeue_group(const std::string& key, time_point now, std::size_t n) {
    return table_.requeue_group(key, now, n);
  }
  /// Moves at most `n` dead letters matching `f` to the archive (`store::discard`).
  std::size_t discard(const dead_letter_filter& f, time_point now, std::size_t n) {
    return table_.discard(f, now, n);
  }
  /// Deletes at most `n` archived dead letters archived before `t` (`store::purge_archive`).
  std::size_t purge_archive(time_point t, std::size_t n) { return table_.purge_archive(t, n); }

 private:
  // The confirm rule's state, which the reader feeds from the stream.
  [[nodiscard]] detail::tail_ledger& ledger() noexcept { return reader_.ledger(); }
  [[nodiscard]] const detail::tail_ledger& ledger() const noexcept { return reader_.ledger(); }
  /// Table mode's safety net (detail::tail_sweep): the streamed rows the stream passed over
  /// become pending rows of the table, reported; the publication is checked again.
  void sweep() {
    if (const auto seqs = sweep_.due(ledger().position())) rescue(*seqs);
    sweep_.look(table_, options_.table_poll);
  }

  void rescue(const std::string& seqs) {
    const auto moved = detail::tail_sweep::rescue(table_, seqs);
    if (moved.empty()) return;
    // Their aggregates' next events wait behind them; the table's claim looks at once.
    for (const auto& k : moved) parking_.hold(k);
    turns_.due_at(time_point{});
    stranded_.fetch_add(moved.size(), std::memory_order_relaxed);
    const std::string what =
        detail::tail_sweep::report(moved.size(), options_.slot, options_.publication);
    // Reported whatever the check says (the rows are moved); a publication still wrong stops
    // the relay, any other failure of the check is the claim's.
    std::optional<error> still_wrong;
    std::exception_ptr check_failed;
    try {
      check_publication(" (" + what + " once it is fixed)");
    } catch (const error& e) {
      if (e.code() == errc::misconfigured)
        still_wrong = e;
      else
        check_failed = std::current_exception();
    }
    if (options_.on_stranded) {
      try {
        options_.on_stranded(still_wrong ? *still_wrong
                                         : error(errc::misconfigured, "postgresql", {}, what));
      } catch (...) {  // NOLINT(bugprone-empty-catch): a report, never the relay's failure
      }
    }
    if (still_wrong) throw *still_wrong;
    if (check_failed) std::rethrow_exception(check_failed);
  }

  /// Checks the publication on the table's connection, and tells the ledger which relation
  /// is the outbox table.
  void check_publication(const std::string& more = {}) {
    const std::uint32_t relid = table_.run("check the publication", [&](PGconn* c) {
      return detail::tail::check_publication(c, options_.publication, more);
    });
    ledger().outbox_table(relid);
  }

  /// This store's slot, on the table's connection.
  slot_status own_slot() {
    return table_.run("slot status",
                      [&](PGconn* c) { return detail::tail::query_slot(c, options_.slot); });
  }

  static store_options table_options(const tailing_options& o) {
    store_options t = o.table;
    t.policy = claim_policy::leasing;
    t.listen = false;
    return t;
  }

  /// Opens the stream from the settled position, with the parked aggregates read again, once
  /// the publication is known to carry the outbox table's INSERTs.
  void open() {
    if (reader_.is_open()) return;
    // Before anything else: a stream through a publication without the table would pass over
    // table mode's rows, and the slot would move past them.
    check_publication();
    // The position before the parked aggregates: a relay that parks saves its position after,
    // so the parked rows read here include every one its saved position covers.
    const auto [start, confirmed] = start_position();
    parking_.load({});
    try {
      reader_.open(conninfo_, options_.slot, options_.publication, start, confirmed);
    } catch (const error& e) {
      if (e.code() != errc::misconfigured || e.native_code() != "55000") throw;
      // The slot may have been invalidated (it kept more WAL than max_slot_wal_keep_size).
      slot_status st;
      try {
        st = own_slot();
      } catch (const error&) {
        throw e;
      }
      if (st.wal_status != "lost") throw;
      throw error(errc::misconfigured, "postgresql", e.native_code(),
                  "replication slot " + options_.slot +
                      " was invalidated: it kept more WAL than max_slot_wal_keep_size allows, so "
                      "events committed after its position are gone from the WAL (compare what "
                      "the writers committed with what was published); drop it and set it up "
                      "again (tailing_store::drop, setup)");
    }
  }

  /// Forgets what was read and not settled, and closes the stream: the next claim opens it
  /// again from the settled position, so those events come again.
  void reset_stream() noexcept {
    reader_.close();
    out_.reset();
    head_unclaimed_ = true;
  }

  void pump() {
    try {
      reader_.pump(options_.read_ahead, out_.has_value());
    } catch (...) {
      reset_stream();
      throw;
    }
  }

  /// Moves the settled position (the ledger's confirm rule), reports it to the server, and
  /// saves the progress once per progress.
  void advance() {
    std::optional<detail::tail_progress> to_save;
    try {
      to_save = reader_.advance(out_.has_value(), options_.status_interval);
    } catch (...) {
      reset_stream();
      throw;
    }
    if (to_save) save_position(*to_save);
  }

  /// Writes the progress to outbox_tail_positions (the stream starts there again, whatever the
  /// slot says after a server restart). Never fails the settle it follows: a failure leaves the
  /// saved progress behind (a restart replays more, loses none). One that is not transient (a
  /// right missing, a read-only server) closes the stream: the next claim's open meets it.
  void save_position(const detail::tail_progress& p) noexcept {
    try {
      write_position(p);
    } catch (const error& e) {
      if (e.code() != errc::transient) reset_stream();
    } catch (...) {
      reset_stream();
    }
  }

  void write_position(const detail::tail_progress& p) {
    detail::tail::write_position(table_, options_.slot, p);
    ledger().saved(p);
  }

  /// Where the stream starts (the settled position known here or saved in the table, whichever
  /// is later), and the slot's confirmed position. The merged progress is written back first:
  /// a right missing on the table stops the relay here; a transient failure does not.
  std::pair<detail::wal::lsn, detail::wal::lsn> start_position() {
    const auto [row, confirmed] = detail::tail::read_position(table_, options_.slot);
    const detail::tail_progress merged = ledger().resume(row);
    try {
      write_position(merged);
    } catch (const error& e) {
      if (e.code() != errc::transient) throw;
    }
    return {ledger().position(), confirmed};
  }

  /// Writes `rows` to the outbox table; their events are settled.
  void park(std::vector<detail::parked_row>& rows, time_point now) {
    for (const std::uint64_t tx : parking_.park(rows, now)) ledger().settle(tx);
  }

  /// The head batch (the first since the stream opened) starts where the slot stands: its
  /// claims are counted in the table, and its messages carry the count as their attempts, so a
  /// message that keeps crashing relays is dead-lettered unsent (docs/log-tailing.md, "Crash
  /// loops").
  void count_head_attempt(claimed_batch& batch, detail::stream_batch& sb,
                          std::pair<std::int64_t, std::int64_t> head) {
    const int claims = detail::tail::count_attempt(table_, options_.slot, head.first, head.second);
    head_unclaimed_ = false;
    sb.head_position = head.first;
    sb.head_within = head.second;
    for (auto& m : batch.messages) m.attempts = std::max(1, claims);
  }

  /// Table mode: deletes the rows of the published events (tail_delete.sql).
  void delete_streamed_rows(const claimed_batch& batch, std::span<const settlement> fates) {
    detail::array_literal ids;
    for (std::size_t i = 0; i < fates.size(); ++i)
      if (fates[i].what == settlement::kind::published &&
          out_->of(batch.messages[i].sequence).streamed_row)
        ids.add_text(batch.messages[i].id.to_string());
    if (ids.size() == 0) return;
    table_.run("delete streamed rows", [&](PGconn* c) {
      detail::exec(c, std::string(statements::tail_delete), detail::params().add(ids.str()),
                   "delete published streamed rows");
      return 0;
    });
  }

  settle_result settle_table(const claimed_batch& batch, std::span<const settlement> fates,
                             time_point now) {
    settle_result r = table_.settle(batch, fates, now);
    std::vector<const message*> of;
    of.reserve(batch.messages.size());
    for (const auto& m : batch.messages) of.push_back(&m);
    if (!of.empty()) parking_.load(of);
    for (const auto& f : fates) turns_.after(f, now);
    return r;
  }

  std::string conninfo_;
  tailing_options options_;
  store table_;
  detail::tail_parking parking_;
  detail::tail_reader reader_;
  detail::wakeup wake_;

  std::optional<detail::stream_batch> out_;
  std::uint64_t stream_batches_ = 0;
  std::int64_t sequence_ = 0;
  detail::tail_turns turns_;
  bool head_unclaimed_ = true;  // the stream's first batch since it opened is not counted yet
  detail::tail_sweep sweep_;
  std::atomic<std::uint64_t> stranded_{0};
};

}  // namespace outbox::postgresql
