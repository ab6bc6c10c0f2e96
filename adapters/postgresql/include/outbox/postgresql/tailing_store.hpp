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
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/postgresql/detail/connection.hpp>
#include <outbox/postgresql/detail/replication.hpp>
#include <outbox/postgresql/detail/wakeup.hpp>
#include <outbox/postgresql/detail/wal.hpp>
#include <outbox/postgresql/store.hpp>
#include <outbox/store/row.hpp>
#include <outbox/uuid.hpp>

namespace outbox::postgresql {

/// Options of a `tailing_store`.
struct tailing_options {
  /// The logical replication slot the relay reads from (`[a-z0-9_]`, at most 63 characters):
  /// one per relay. Its confirmed position advances only past events the broker confirmed (or
  /// that went to the outbox table), so a restarted relay replays from there.
  std::string slot = "outbox_relay";
  /// The publication named to `pgoutput` (same rules): the outbox table's inserts (table mode;
  /// `setup` creates it for the table of the session's search path). The table-free mode's
  /// logical decoding messages need no table (every publication carries them), but the
  /// publication must carry the relay's outbox table all the same: `setup` and each stream
  /// opened check it (`misconfigured` otherwise), so table mode's rows are never passed over.
  std::string publication = "outbox_tail";
  /// How often the outbox table (retries, requeued dead letters) is looked at when no retry is
  /// known to be due sooner.
  std::chrono::milliseconds table_poll{1'000};
  /// The slot's position is reported to the server at least this often (it also goes after
  /// each batch that moved it, and whenever the server asks).
  std::chrono::milliseconds status_interval{10'000};
  /// Events read from the stream ahead of the batches, at most (more stays in the socket).
  std::size_t read_ahead = 20'000;
  /// Options of the outbox table's store (its claim policy is always leasing: a table claim
  /// and the stream's batches take turns on one connection).
  store_options table{};
  /// Told, on the relay's thread, when the relay found table mode's rows that its stream had
  /// passed without showing them (written while the publication did not carry the outbox
  /// table, or before the slot was made) and made them pending rows of the table, which
  /// publishes them: an error of class `misconfigured` saying how many and why, not thrown.
  /// `tailing_store::stranded_rows` counts them. Must not throw (what it throws is dropped).
  std::function<void(const error&)> on_stranded{};
};

/// A log-tailing relay's replication slot, as the server sees it (`tailing_store::slot`).
struct slot_status {
  bool exists = false;
  bool active = false;               ///< A connection streams from it.
  std::int64_t lag_bytes = 0;        ///< WAL after its confirmed position.
  std::int64_t retained_bytes = 0;   ///< WAL it keeps the server from removing.
  std::string wal_status{};          ///< reserved, extended, unreserved (about to lose), lost.
  std::chrono::milliseconds lag{0};  ///< The streaming connection's flush lag (0: none).
};

/// Table mode's rows that no relay has published yet (`tailing_store::streamed`).
struct streamed_status {
  /// Written more than `tailing_store::streamed_grace` (10 s) ago.
  std::int64_t unpublished = 0;
  /// The oldest one's age, whatever it is (0: none).
  std::chrono::milliseconds oldest_age{0};
};

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
///   due). `stats`, `dead_letters`, `requeue` and the purges are the table's.
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
  using session_type = ::soci::session;

  /// The table-free writer: each event becomes a transactional logical decoding message of
  /// the caller's transaction (prefix `outbox`, `detail::wal::encode_event`): written to the
  /// WAL at commit, gone with a rollback. `outbox::writer<postgresql::tailing_store>` uses it.
  class appender {
   public:
    using session_type = ::soci::session;
    /// Emits `rows` on `sql` inside the caller's open transaction: one statement per 500 rows,
    /// each event bound in binary (never spliced into the SQL text), in the order given. One
    /// event goes as a statement prepared once per connection (sql/postgresql/emit.sql),
    /// unless `o.prepare_statements` is false (poolers in transaction mode).
    void append(session_type& sql, std::span<const outgoing> rows, const writer_options& o = {}) {
      PGconn* c = detail::handle(sql);
      if (rows.size() == 1) {
        detail::params p;
        p.add_bytes(detail::wal::encode_event(rows.front()));
        if (o.prepare_statements)
          detail::exec_prepared_once<detail::emit_statement>(c, statements::emit, p, "append");
        else
          detail::exec(c, std::string(statements::emit), p, "append");
        return;
      }
      for (std::size_t off = 0; off < rows.size(); off += 500) {
        const auto part = rows.subspan(off, std::min<std::size_t>(500, rows.size() - off));
        // emit.sql's function over a VALUES list; the select list runs after the ORDER BY (a
        // volatile function), so the messages go in the order given.
        std::string text =
            "SELECT pg_catalog.pg_logical_emit_message(true, 'outbox', e.v) FROM (VALUES ";
        for (std::size_t i = 0; i < part.size(); ++i) {
          if (i > 0) text += ", ";
          text += "($" + std::to_string(i + 1) + "::bytea, " + std::to_string(i) + ")";
        }
        text += ") AS e(v, o) ORDER BY e.o";
        detail::params p;
        for (const outgoing& r : part) p.add_bytes(detail::wal::encode_event(r));
        detail::exec(c, text, p, "append (logical decoding messages)");
      }
    }
  };

  /// The table-mode writer: each event becomes a row of the outbox table as `store`'s writer
  /// writes it, but in state 3 ("streamed"): the relay reads the row's INSERT from the WAL
  /// (through the publication) and deletes the row once the broker confirmed the event. The
  /// row is in none of the indexes a polling claim uses, and never claimed from the table.
  /// `outbox::writer<postgresql::tailing_store::table_mode>` uses it.
  struct table_mode {
    using session_type = ::soci::session;
    class appender {
     public:
      using session_type = ::soci::session;
      /// Inserts `rows` on `sql` inside the caller's open transaction, as `store::appender`
      /// does (one prepared statement for one event, else multi-row INSERTs of 500).
      void append(session_type& sql, std::span<const outgoing> rows, const writer_options& o = {}) {
        store::appender::insert<detail::append_streamed_statement>(sql, rows, o,
                                                                   statements::append_streamed);
      }
    };
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
    check_names(o);
    PGconn* c = detail::handle(sql);
    auto pub = detail::exec(c, std::string(statements::tail_publication),
                            detail::params().add(o.publication), "setup: publication");
    if (pub.text(0, 0) != "t") {
      try {
        // The session's outbox table (its search path), inserts only: table mode's rows.
        detail::exec(c, ("CREATE PUBLICATION \"" + o.publication +
                         "\" FOR TABLE outbox WITH (publish = 'insert')")
                            .c_str());
      } catch (const error& e) {
        if (e.native_code() != "42710") throw;  // created by another process meanwhile
      }
    }
    // One made by hand, or by an earlier setup on another search path, may not carry this
    // session's outbox table: the relay would pass over table mode's rows without a word.
    (void)check_publication(c, o.publication);
    for (int attempt = 0;; ++attempt) {
      try {
        auto r = detail::exec(c, std::string(statements::tail_slot), detail::params().add(o.slot),
                              "setup: replication slot");
        if (r.text(0, 0) == "t") return false;
        // A new slot starts at the end of the WAL: what an earlier slot of that name saved
        // says nothing about it.
        forget(c, o.slot);
        return true;
      } catch (const error& e) {
        if (e.native_code() == "42710" && attempt == 0) continue;  // created meanwhile
        if (e.native_code() == "55000")                            // wal_level
          throw error(errc::misconfigured, "postgresql", e.native_code(),
                      std::string(e.what()) + " (log tailing needs wal_level = logical)");
        throw;
      }
    }
  }

  /// Drops the relay's slot (its retained WAL is freed) and, with `publication`, the
  /// publication. Missing ones are not an error.
  /// @throws outbox::error `transient` while a relay streams from the slot (55006).
  static void drop(session_type& sql, const tailing_options& o = {}, bool publication = false) {
    check_names(o);
    PGconn* c = detail::handle(sql);
    // A stream this process closed may still hold the slot while its walsender exits: wait
    // for that process (bounded), as a new stream does, rather than fail the drop.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < give_up) {
      auto r = detail::exec(c,
                            "SELECT active_pid FROM pg_catalog.pg_replication_slots WHERE "
                            "slot_name = $1 AND active_pid IS NOT NULL",
                            detail::params().add(o.slot), "drop replication slot");
      if (r.rows() != 1 ||
          !detail::closed_walsenders::contains(std::atoi(std::string(r.text(0, 0)).c_str())))
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    try {
      detail::exec(c,
                   "SELECT pg_catalog.pg_drop_replication_slot(slot_name) FROM "
                   "pg_catalog.pg_replication_slots WHERE slot_name = $1",
                   detail::params().add(o.slot), "drop replication slot");
    } catch (const error& e) {
      if (e.native_code() != "55006") throw;
      throw error(errc::transient, "postgresql", e.native_code(),
                  "drop replication slot " + o.slot +
                      ": a connection still streams from it (a relay, or one that is going "
                      "away): stop it and drop again");
    }
    if (publication)
      detail::exec(c, ("DROP PUBLICATION IF EXISTS \"" + o.publication + "\"").c_str());
    forget(c, o.slot);
  }

  /// @param conninfo the replication connection's parameters (libpq keywords or a URI, as for
  ///        the store's session; `replication=database` is added). Opened by the first claim.
  /// @param table_session the store's own connection for the outbox table (retries, dead
  ///        letters); it must outlive the store. Migrated as for `postgresql::store`.
  /// @throws outbox::error `misconfigured` for a bad slot or publication name.
  tailing_store(std::string conninfo, session_type& table_session, tailing_options options = {})
      : conninfo_(std::move(conninfo)),
        options_(std::move(options)),
        table_(table_session, table_options(options_)) {
    check_names(options_);
    if (options_.read_ahead == 0)
      throw error(errc::misconfigured, "postgresql", {}, "tailing_options.read_ahead must be > 0");
  }

  tailing_store(const tailing_store&) = delete;
  tailing_store& operator=(const tailing_store&) = delete;

  [[nodiscard]] const tailing_options& options() const noexcept { return options_; }
  /// The outbox table's store (retries and dead letters), on the session given.
  [[nodiscard]] store& table() noexcept { return table_; }
  [[nodiscard]] session_type& session() noexcept { return table_.session(); }
  /// The position up to which every event is settled (reported to the server as the slot's
  /// confirmed position); 0 before the stream was opened.
  [[nodiscard]] detail::wal::lsn settled_position() const noexcept { return flushed_; }
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
    if (req.now >= next_table_look_ && (table_turn_ || ready_.empty())) {
      claimed_batch b = table_.claim(req);
      if (!b.empty() || b.unreadable > 0) {
        table_turn_ = false;
        advance();  // the server hears from us while the stream waits
        return b;
      }
      next_table_look_ = next_look_after_empty(req.now);
    }
    table_turn_ = true;
    claimed_batch batch;
    batch.token = -static_cast<std::int64_t>(++stream_batches_);
    batch.lease_until = req.now + req.lease;
    stream_batch sb{batch.token, {}, 0, 0};
    // Where the batch starts: the first unsettled transaction, at its next event (every event
    // handed out before is settled: one stream batch at a time).
    const auto head =
        txs_.empty() ? std::pair<std::int64_t, std::int64_t>{flushed_, 0}
                     : std::pair<std::int64_t, std::int64_t>{txs_.front().end, txs_.front().next};
    // The events taken, in stream order, up to `req.limit` of aggregates not known parked.
    std::vector<event_in_log> taken;
    std::size_t unparked = 0;
    while (!ready_.empty() && unparked < req.limit) {
      taken.push_back(std::move(ready_.front()));
      ready_.pop_front();
      const event_in_log& ev = taken.back();
      if (tx_state* t = tx_of(ev.tx)) ++t->next;
      if (ev.why.empty() &&
          !parked_.contains(outbox::detail::aggregate_key(ev.m.aggregate_type, ev.m.aggregate_id)))
        ++unparked;
    }
    std::vector<parked_row> to_park;
    try {
      // parked_ knows the rows this store parked or read at the stream's start; pending rows
      // come from elsewhere too (another process's requeue, a relay that parked and moved the
      // slot after this one read them as it opened): the table says, before anything goes.
      if (unparked > 0) learn_parked(taken);
      for (event_in_log& ev : taken) {
        if (!ev.why.empty()) {
          to_park.push_back(unreadable_row(std::move(ev), req.now));
          ++batch.unreadable;
          continue;
        }
        if (parked_.contains(
                outbox::detail::aggregate_key(ev.m.aggregate_type, ev.m.aggregate_id))) {
          to_park.push_back(parked_row{std::move(ev.m), ev.tx, 0, std::nullopt, 0, {}});
          continue;
        }
        ev.m.sequence = ++sequence_;
        ev.m.attempts = 1;  // counting this one
        batch.messages.push_back(std::move(ev.m));
        sb.entries.push_back({ev.m.sequence, ev.tx, ev.streamed_row});
      }
      park(to_park, req.now);
      if (!to_park.empty()) next_table_look_ = req.now;  // parked behind their aggregate: due
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
    if (batch.token >= 0) return settle_table(batch, fates, now);
    batch.require_one_fate_each(fates.size(), "postgresql");
    if (!out_ || out_->token != batch.token) {
      settle_result stale;  // the stream restarted since: these events come again
      stale.fenced = fates.size();
      return stale;
    }
    settle_result out;
    std::vector<parked_row> to_park;
    for (std::size_t i = 0; i < fates.size(); ++i) {
      const message& m = batch.messages[i];
      const settlement& f = fates[i];
      const std::uint64_t tx = out_->of(m.sequence).tx;
      switch (f.what) {
        case settlement::kind::published:
          ++out.published;
          continue;
        case settlement::kind::retry:
          ++out.retried;
          retry_times_.push_back(f.retry_at);
          next_table_look_ = std::min(next_table_look_, f.retry_at);
          to_park.push_back(parked_row{m, tx, 0, f.retry_at, m.attempts, {}});
          break;
        case settlement::kind::release:
          ++out.released;
          next_table_look_ = now;
          to_park.push_back(parked_row{m, tx, 0, std::nullopt, std::max(0, m.attempts - 1), {}});
          break;
        case settlement::kind::dead:
          ++out.dead;
          to_park.push_back(parked_row{m, tx, 2, std::nullopt, m.attempts, f.error});
          break;
      }
    }
    try {
      park(to_park, now);
      delete_streamed_rows(batch, fates);
    } catch (...) {
      reset_stream();  // nothing of the batch is settled: the stream replays it
      throw;
    }
    for (std::size_t i = 0; i < fates.size(); ++i)
      if (fates[i].what == settlement::kind::published)
        done(out_->of(batch.messages[i].sequence).tx);
    const stream_batch was_out = *std::exchange(out_, std::nullopt);
    advance();
    // The head batch settled, so its claim was no crash. When the slot stays where it was (its
    // first transaction goes on past the batch), a relay that dies later in that transaction
    // starts at the same position again: that claim must not count as an attempt of this
    // batch (seen: a 10,000-event transaction, a relay killed at its 5th batch each time, and
    // the first batch, delivered every time, dead-lettered at the 10th).
    if (was_out.head_position != 0 &&
        flushed_ < static_cast<detail::wal::lsn>(was_out.head_position))
      uncount_head_attempt(was_out.head_position, was_out.head_within);
    return out;
  }

  /// A table batch goes back to the table; a stream batch is dropped and the stream starts
  /// again from the settled position (its events come again, attempts not counted).
  void release(const claimed_batch& batch) {
    if (batch.token >= 0) {
      table_.release(batch);
      return;
    }
    if (!out_ || out_->token != batch.token) return;
    // Not an attempt (stopping): the count of the head batch's claims goes back.
    if (out_->head_position != 0) uncount_head_attempt(out_->head_position, out_->head_within);
    reset_stream();
  }

  // ---- waking ---------------------------------------------------------------------------------

  /// Sleeps until the stream has input, `interrupt` is called, or `timeout` (at most
  /// `table_poll`) passes. Never throws.
  bool wait_for_work(std::chrono::milliseconds timeout) {
    if (!ready_.empty() || more_buffered_) return true;
    timeout = std::min(timeout, options_.table_poll);
    const auto o = wake_.wait(stream_.socket(), timeout);
    return o.interrupted || o.socket_ready;
  }
  void interrupt() noexcept { wake_.interrupt(); }

  // ---- operations -----------------------------------------------------------------------------

  /// The slot of `o` as the server sees it (any session of the database).
  static slot_status slot(session_type& sql, const tailing_options& o) {
    check_names(o);
    return query_slot(detail::handle(sql), o.slot);
  }

  /// The outbox table's backlog (retries waiting, dead letters), table mode's rows not
  /// published yet (`streamed_unpublished`, `oldest_streamed_age`) and the slot's lag
  /// (`log_lag_bytes`, `log_lag`).
  backlog_stats stats(time_point now) {
    backlog_stats s = table_.stats(now);
    const streamed_status rows =
        table_.run("streamed rows", [&](PGconn* c) { return query_streamed(c, now); });
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
    return query_streamed(detail::handle(sql), now);
  }

  /// Table mode's rows this store found passed by its stream and made pending rows of the
  /// table (see `claim`); any thread may read it.
  [[nodiscard]] std::uint64_t stranded_rows() const noexcept {
    return stranded_.load(std::memory_order_relaxed);
  }
  std::vector<dead_letter> dead_letters(std::size_t n) { return table_.dead_letters(n); }
  bool requeue(const uuid& id) { return table_.requeue(id); }
  std::size_t purge_published(time_point t, std::size_t n) { return table_.purge_published(t, n); }
  std::size_t purge_inbox(time_point t, std::size_t n) { return table_.purge_inbox(t, n); }

 private:
  struct event_in_log {
    message m;
    std::string why;  // why it cannot be published; empty when it can
    std::uint64_t tx = 0;
    bool streamed_row = false;  // table mode: a row to delete once published
  };
  struct tx_state {
    detail::wal::lsn end = 0;
    std::size_t open = 0;   // events not settled yet
    std::int64_t next = 0;  // index (in the WAL) of its next event to hand out
  };
  struct stream_batch {
    struct entry {
      std::int64_t sequence = 0;
      std::uint64_t tx = 0;
      bool streamed_row = false;
    };
    std::int64_t token = 0;
    /// Each message's transaction, by sequence (the relay may reorder the batch).
    std::vector<entry> entries;
    /// The first batch after the stream opened: the place its claim was counted at
    /// (outbox_tail_attempts: the end of its first transaction, and its first event's index
    /// there), 0 for the others.
    std::int64_t head_position = 0, head_within = 0;
    [[nodiscard]] const entry& of(std::int64_t seq) const {
      const auto it =
          std::lower_bound(entries.begin(), entries.end(), seq,
                           [](const entry& e, std::int64_t v) { return e.sequence < v; });
      if (it == entries.end() || it->sequence != seq)
        throw error(errc::misconfigured, "postgresql", {},
                    "settle: a message that is not of the batch");
      return *it;
    }
  };
  /// A look of `sweep`: the server's WAL insert position, its page size, and the streamed
  /// rows (their seqs, a bigint[] literal) that committed before it.
  struct sweep_look {
    detail::wal::lsn position = 0;
    std::int64_t page_size = 0;
    std::string seqs;
  };
  /// The most streamed rows one look of `sweep` takes (the oldest).
  static constexpr std::size_t sweep_limit = 1'000;

  struct parked_row {
    message m;
    std::uint64_t tx = 0;
    int state = 0;                             // 0 pending, 2 dead
    std::optional<time_point> available_at{};  // none: claimable now
    int attempts = 0;
    std::string error{};
  };

  /// tail_lag.sql for `slot` on `c`.
  static slot_status query_slot(PGconn* c, const std::string& slot) {
    const auto r = detail::exec(c, std::string(statements::tail_lag), detail::params().add(slot),
                                "slot status");
    slot_status st;
    if (r.rows() == 0) return st;
    st.exists = true;
    st.lag_bytes = r.is_null(0, 0) ? 0 : r.int64(0, 0);
    st.active = r.text(0, 1) == "t";
    st.retained_bytes = r.is_null(0, 2) ? 0 : r.int64(0, 2);
    st.wal_status = r.text(0, 3);
    st.lag = std::chrono::milliseconds(r.int64(0, 4));
    return st;
  }

  /// tail_streamed.sql on `c`.
  static streamed_status query_streamed(PGconn* c, time_point now) {
    const auto t = detail::to_us(now);
    const auto r = detail::exec(
        c, std::string(statements::tail_streamed),
        detail::params().add(t).add(std::int64_t{
            std::chrono::duration_cast<std::chrono::microseconds>(streamed_grace).count()}),
        "streamed rows");
    streamed_status st;
    st.unpublished = r.int64(0, 0);
    if (const std::int64_t oldest = r.int64(0, 1); oldest != 0)
      st.oldest_age = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::microseconds(elapsed(t, oldest)));
    return st;
  }

  /// Checks that publication `pub` publishes the INSERTs of the outbox table that `c`
  /// resolves (tail_publication_check.sql); returns that table's oid.
  /// @throws outbox::error `misconfigured` naming the publication and the table (and ending
  ///         with `more`).
  static std::uint32_t check_publication(PGconn* c, const std::string& pub,
                                         const std::string& more = {}) {
    const auto r = detail::exec(c, std::string(statements::tail_publication_check),
                                detail::params().add(pub), "check the publication");
    const std::string table(r.text(0, 0));
    const auto fail = [&](const std::string& why) {
      throw error(errc::misconfigured, "postgresql", {},
                  "publication \"" + pub + "\" " + why +
                      ": the log-tailing relay reads table mode's events as the INSERTs of its "
                      "outbox table through it, and would pass over them without a word" +
                      more);
    };
    if (r.is_null(0, 0))
      throw error(errc::misconfigured, "postgresql", {},
                  "log tailing: this session's search_path resolves no table named outbox "
                  "(migrate the schema, or connect with the search_path of the outbox table)");
    const std::string add = "ALTER PUBLICATION \"" + pub + "\" ADD TABLE " + table;
    if (r.text(0, 2) != "t")
      fail("does not exist (the outbox table is " + table +
           "): create it with tailing_store::setup, or `outbox migrate` with a postgresql+tail "
           "URL, on a session whose search_path resolves outbox to " +
           table);
    if (r.text(0, 3) != "t")
      fail("does not publish INSERTs (of " + table + ", the relay's outbox table): " +
           "ALTER PUBLICATION \"" + pub + "\" SET (publish = 'insert')");
    if (r.text(0, 4) != "t")
      fail("does not publish the table " + table +
           " (the relay's outbox table, as its session's search_path resolves it): " + add +
           ", or drop the publication and run setup again on a session with that search_path");
    if (!r.is_null(0, 5))
      fail("publishes " + table + " only WHERE " + std::string(r.text(0, 5)) +
           ": ALTER PUBLICATION \"" + pub + "\" SET TABLE " + table + " (without a row filter)");
    if (!r.is_null(0, 6))
      fail("leaves columns of " + table + " out of its column list (" + std::string(r.text(0, 6)) +
           "): ALTER PUBLICATION \"" + pub + "\" SET TABLE " + table + " (without a column list)");
    return static_cast<std::uint32_t>(r.int64(0, 1));
  }

  /// Whether the settled position is at WAL position `lsn` or past it. The server's insert
  /// position at a page's start is after the page's header, where no record ends: a stream
  /// that read all the WAL there is before it by the header (24 bytes, 40 at a segment's start).
  [[nodiscard]] bool passed(detail::wal::lsn lsn, std::int64_t page_size) const noexcept {
    if (flushed_ >= lsn) return true;
    const auto gap = lsn - flushed_;
    return page_size > 0 && flushed_ % static_cast<detail::wal::lsn>(page_size) == 0 &&
           (gap == 24 || gap == 40);
  }

  /// Table mode's safety net. Every `table_poll`, the oldest streamed rows and the server's WAL
  /// position, in one snapshot (tail_sweep.sql): each of them committed before it. Once the
  /// settled position has reached it, the stream has shown each of them it ever will, and
  /// settled it (a published row is deleted, a failed one parked, before the position moves
  /// past it): any still streamed was passed over, and becomes a pending row of the table.
  void sweep() {
    if (sweep_ && passed(sweep_->position, sweep_->page_size)) {
      const std::string seqs = std::move(sweep_->seqs);
      sweep_.reset();
      rescue(seqs);
    }
    const auto now = std::chrono::steady_clock::now();
    if (sweep_ || now < next_sweep_) return;
    next_sweep_ = now + options_.table_poll;
    auto look = table_.run("look for passed streamed rows", [&](PGconn* c) {
      const auto r = detail::exec(c, std::string(statements::tail_sweep),
                                  detail::params().add(static_cast<std::int64_t>(sweep_limit)),
                                  "look for passed streamed rows");
      return std::pair{r.int64(0, 2) > 0, sweep_look{static_cast<detail::wal::lsn>(r.int64(0, 0)),
                                                     r.int64(0, 1), std::string(r.text(0, 3))}};
    });
    if (look.first) sweep_ = std::move(look.second);
  }

  /// Makes the streamed rows `seqs` (a bigint[] literal) that are still streamed pending rows
  /// of the table (tail_rescue.sql), says so, and checks the publication again.
  void rescue(const std::string& seqs) {
    const auto moved = table_.run("move passed streamed rows to the table", [&](PGconn* c) {
      const auto r = detail::exec(c, std::string(statements::tail_rescue),
                                  detail::params().add(seqs), "move passed streamed rows");
      std::vector<std::string> keys;
      for (int i = 0; i < r.rows(); ++i)
        keys.push_back(outbox::detail::aggregate_key(r.text(i, 0), r.text(i, 1)));
      return keys;
    });
    if (moved.empty()) return;
    // Their aggregates' next events wait behind them; the table's claim looks at once.
    for (const auto& k : moved) parked_.insert(k);
    next_table_look_ = time_point{};
    stranded_.fetch_add(moved.size(), std::memory_order_relaxed);
    const std::string what = std::to_string(moved.size()) +
                             " table-mode event(s) (outbox rows in state 3) were passed over by "
                             "the replication stream of slot " +
                             options_.slot + " (written while publication \"" +
                             options_.publication +
                             "\" did not carry the outbox table, or before the slot was made): "
                             "they are pending rows of the outbox table now, published from there";
    // Reported whatever the check says (the rows are moved); a publication still wrong stops
    // the relay, any other failure of the check is the claim's.
    std::optional<error> still_wrong;
    std::exception_ptr check_failed;
    try {
      outbox_relid_ = table_.run("check the publication", [&](PGconn* c) {
        return check_publication(c, options_.publication, " (" + what + " once it is fixed)");
      });
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

  /// This store's slot, on the table's connection.
  slot_status own_slot() {
    return table_.run("slot status", [&](PGconn* c) { return query_slot(c, options_.slot); });
  }

  static store_options table_options(const tailing_options& o) {
    store_options t = o.table;
    t.policy = claim_policy::leasing;
    t.listen = false;
    return t;
  }

  /// Deletes a slot's head-batch claim count and saved position (tail_forget.sql,
  /// tail_position_forget.sql).
  static void forget(PGconn* c, const std::string& slot) {
    for (const auto statement : {statements::tail_forget, statements::tail_position_forget}) {
      try {
        detail::exec(c, std::string(statement), detail::params().add(slot),
                     "forget the slot's attempts and position");
      } catch (const error& e) {
        if (e.native_code() != "42P01") throw;  // not migrated that far: nothing to forget
      }
    }
  }

  static void check_names(const tailing_options& o) {
    if (!detail::valid_slot_name(o.slot))
      throw error(errc::misconfigured, "postgresql", {},
                  "tailing_options.slot must be 1..63 of [a-z0-9_], got '" +
                      sanitize_text(o.slot, 80) + "'");
    if (!detail::valid_slot_name(o.publication))
      throw error(errc::misconfigured, "postgresql", {},
                  "tailing_options.publication must be 1..63 of [a-z0-9_], got '" +
                      sanitize_text(o.publication, 80) + "'");
  }

  /// Opens the stream from the settled position, with the parked aggregates read again, once
  /// the publication is known to carry the outbox table's INSERTs.
  void open() {
    if (stream_.is_open()) return;
    // Before anything else: a stream through a publication without the table would pass over
    // table mode's rows, and the slot would move past them.
    outbox_relid_ = table_.run("check the publication", [&](PGconn* c) {
      return check_publication(c, options_.publication);
    });
    // The position before the parked aggregates: a relay that lost the slot may still finish
    // a settle (its table connection outlives its stream), and it parks before it saves the
    // position, so whatever its saved position covers, the parked rows read after it show.
    // (Read the other way round, a position saved between the two started the stream after
    // an aggregate's parked retry without knowing it: seen in the fault harness, an event
    // published before the two of its aggregate that waited in the table.)
    // The slot's own position is not covered: the server takes it as the stream starts, after
    // this read, and a relay that parks and confirms meanwhile moves it past rows read here as
    // absent; each stream batch asks the table again (learn_parked).
    const detail::wal::lsn start = start_position();
    load_parked({});
    try {
      stream_.open(conninfo_, options_.slot, options_.publication, start);
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
    last_ack_ = std::chrono::steady_clock::now();
  }

  /// Forgets what was read and not settled, and closes the stream: the next claim opens it
  /// again from the settled position, so those events come again.
  void reset_stream() noexcept {
    stream_.close();
    ready_.clear();
    current_.clear();
    in_tx_ = false;
    txs_.clear();
    first_tx_ = next_tx_;
    out_.reset();
    relations_.clear();  // a new stream describes its tables again
    // Positions seen on the old stream say nothing about what the new one will replay: the
    // settled position may move only past what the new stream shows settled.
    last_commit_end_ = 0;
    head_unclaimed_ = true;
    more_buffered_ = false;
  }

  /// Reads what the stream has, turning committed transactions into `ready_` events.
  void pump() {
    std::vector<detail::replication_stream::frame> frames;
    try {
      more_buffered_ = false;
      while (true) {
        if (ready_.size() >= options_.read_ahead) {
          more_buffered_ = true;  // may be in libpq's buffer already: the socket would not say
          break;
        }
        frames.clear();
        stream_.read(frames, 1'000);
        if (frames.empty()) break;
        for (const auto& f : frames) take(f);
      }
      if (stream_.server_draining() && !caught_up())
        throw error(errc::transient, "postgresql", {},
                    "the server is shutting down and waits for the slot to confirm the end of "
                    "its WAL: the stream is closed so that it can stop (the events after the "
                    "slot's position come again)");
    } catch (...) {
      reset_stream();
      throw;
    }
  }

  void take(const detail::replication_stream::frame& f) {
    const auto c = detail::wal::decode_pgoutput(f.data);
    if (!c)
      throw error(errc::transient, "postgresql", {},
                  "replication stream: a malformed pgoutput message at " +
                      detail::wal::format_lsn(f.start));
    using kind = detail::wal::change::kind;
    switch (c->what) {
      case kind::begin:
        in_tx_ = true;
        current_.clear();
        break;
      case kind::message: {
        if (c->prefix != detail::wal::message_prefix) break;
        event_in_log ev;
        ev.why = detail::wal::decode_event(c->content, ev.m);
        if (c->transactional && in_tx_) {
          current_.push_back(std::move(ev));
        } else {
          // Emitted outside a transaction (not by our writer): a transaction of its own.
          ev.tx = next_tx_++;
          txs_.push_back(tx_state{c->final_lsn, 1});
          ready_.push_back(std::move(ev));
        }
        break;
      }
      case kind::commit:
        in_tx_ = false;
        if (current_.empty()) {
          last_commit_end_ = std::max(last_commit_end_, c->end_lsn);
          break;
        }
        {
          // The transaction the relay had settled the first events of (before the stream
          // opened again): those are published or in the table, and are not handed out again.
          std::size_t skip = 0;
          if (c->end_lsn == within_end_)
            skip = static_cast<std::size_t>(
                std::min<std::int64_t>(within_events_, static_cast<std::int64_t>(current_.size())));
          txs_.push_back(
              tx_state{c->end_lsn, current_.size() - skip, static_cast<std::int64_t>(skip)});
          for (std::size_t i = skip; i < current_.size(); ++i) {
            current_[i].tx = next_tx_;
            ready_.push_back(std::move(current_[i]));
          }
        }
        ++next_tx_;
        current_.clear();
        break;
      case kind::relation:
        // This relay's outbox table only (its oid as the table session resolves it): another
        // schema's table of that name may be in the publication too (FOR ALL TABLES).
        if (c->relid == outbox_relid_) {
          if (auto cols = detail::wal::outbox_columns::of(c->names)) {
            relations_[c->relid] = *cols;
            break;
          }
        }
        relations_.erase(c->relid);
        break;
      case kind::insert: {
        const auto rel = relations_.find(c->relid);
        if (rel == relations_.end()) break;
        // Only the table-mode writer's rows: the relay's own parked rows come by here too.
        if (detail::wal::row_state(rel->second, c->values) != 3) break;
        event_in_log ev;
        ev.streamed_row = true;
        ev.why = detail::wal::decode_row(rel->second, c->values, ev.m);
        if (in_tx_) {
          current_.push_back(std::move(ev));
        } else {
          ev.tx = next_tx_++;
          txs_.push_back(tx_state{f.start, 1});
          ready_.push_back(std::move(ev));
        }
        break;
      }
      case kind::other:
        break;
    }
  }

  /// Transaction `tx`'s state, while it has events unsettled (nullptr after).
  tx_state* tx_of(std::uint64_t tx) {
    if (tx < first_tx_ || tx - first_tx_ >= txs_.size()) return nullptr;
    return &txs_[static_cast<std::size_t>(tx - first_tx_)];
  }

  /// One event of transaction `tx` is settled.
  void done(std::uint64_t tx) {
    if (tx_state* t = tx_of(tx); t && t->open > 0) --t->open;
  }

  /// Nothing read is unsettled: the settled position may follow the server's WAL end.
  [[nodiscard]] bool caught_up() const noexcept {
    return txs_.empty() && ready_.empty() && !in_tx_ && !out_;
  }

  /// Moves the settled position past the fully settled transactions at the front, and past
  /// WAL without events when nothing is outstanding; reports it when it moved (or when due).
  void advance() {
    while (!txs_.empty() && txs_.front().open == 0) {
      flushed_ = std::max(flushed_, txs_.front().end);
      settled_events_ = std::max(settled_events_, txs_.front().end);
      txs_.pop_front();
      ++first_tx_;
    }
    if (caught_up()) flushed_ = std::max({flushed_, last_commit_end_, stream_.server_end()});
    const auto now = std::chrono::steady_clock::now();
    if (!stream_.is_open()) return;
    if (flushed_ > acked_ || stream_.reply_requested() ||
        now - last_ack_ >= options_.status_interval) {
      try {
        stream_.acknowledge(flushed_);
      } catch (...) {
        reset_stream();
        throw;
      }
      acked_ = flushed_;
      last_ack_ = now;
    }
    // Inside the first unsettled transaction, with no batch out: every event handed out of
    // it is settled (published, or in the table), so a new stream skips them.
    if (!out_ && !txs_.empty() && txs_.front().next > 0 &&
        progress{0, txs_.front().end, txs_.front().next} >
            progress{0, within_end_, within_events_}) {
      within_end_ = txs_.front().end;
      within_events_ = txs_.front().next;
    }
    // Once per position: a save that failed is tried again when the position moves (or the
    // stream opens), not at each of the several advances of every claim (a save waiting out
    // a lock_timeout each time slowed a drain of 5,000 events from under 1 s to 27 s).
    if (const progress now_at = settled(); now_at > saved_ && now_at > save_tried_) {
      save_tried_ = now_at;
      save_position();
    }
  }

  /// What is settled: every event committed before `position`, and the first `within_events`
  /// of the transaction that ends at `within_end` (0, 0: none), compared in that order.
  struct progress {
    detail::wal::lsn position = 0;
    detail::wal::lsn within_end = 0;
    std::int64_t within_events = 0;
    auto operator<=>(const progress&) const = default;
  };
  [[nodiscard]] progress settled() const noexcept {
    if (within_end_ <= settled_events_) return {settled_events_, 0, 0};
    return {settled_events_, within_end_, within_events_};
  }

  /// Writes the end of the last transaction whose events are settled to outbox_tail_positions
  /// (the stream starts there again, whatever the slot says after a server restart). Only
  /// transactions with events move it: the write is itself WAL that the stream shows, and
  /// following those would write for ever. Never fails the settle it follows (the events are
  /// settled, the slot heard it): a failure only leaves the saved position behind (a restart
  /// would replay more, none is lost) until the next position (or the stream opening) writes it.
  /// One that is not transient (a right missing on the table, a read-only server) closes the
  /// stream, so that the next claim opens it again and meets the error there, where it stops or
  /// backs off the relay (open() writes the position before it streams).
  void save_position() noexcept {
    try {
      write_position(settled());
    } catch (const error& e) {
      if (e.code() != errc::transient) reset_stream();
    } catch (...) {
      reset_stream();
    }
  }

  void write_position(const progress& p) {
    table_.run("save the slot's settled position", [&](PGconn* c) {
      detail::exec(c, std::string(statements::tail_position_save),
                   detail::params()
                       .add(options_.slot)
                       .add(static_cast<std::int64_t>(p.position))
                       .add(static_cast<std::int64_t>(p.within_end))
                       .add(p.within_events),
                   "save the settled position");
      return 0;
    });
    saved_ = std::max(saved_, p);
  }

  /// Where the stream starts: the settled position this store knows, or the one saved in the
  /// table, whichever is later (the server starts at its slot's position when that is later).
  detail::wal::lsn start_position() {
    const auto [row, confirmed] = table_.run("read the slot's settled position", [&](PGconn* c) {
      auto r = detail::exec(c, std::string(statements::tail_position),
                            detail::params().add(options_.slot), "read the settled position");
      const auto lsn = [&](int column) {
        return static_cast<detail::wal::lsn>(std::max<std::int64_t>(r.int64(0, column), 0));
      };
      return std::pair{progress{lsn(0), lsn(2), std::max<std::int64_t>(r.int64(0, 3), 0)}, lsn(1)};
    });
    const detail::wal::lsn saved = row.position;
    // The progress inside the next transaction, saved or known here, whichever is further.
    if (row.within_end > std::max(saved, settled_events_) &&
        progress{0, row.within_end, row.within_events} > progress{0, within_end_, within_events_}) {
      within_end_ = row.within_end;
      within_events_ = row.within_events;
    }
    // What the server has: a slot behind the saved position (after a restart) hears it at the
    // first advance; one ahead of it (an idle relay follows the keepalives) is not set back.
    acked_ = confirmed;
    // Written back before the stream opens: the row exists from now on, and a right missing
    // on the table (or a read-only server) stops the relay here, not after its first batch. A
    // transient failure (a lock held, a lock_timeout) does not: the next position is saved.
    settled_events_ = std::max(settled_events_, saved);
    save_tried_ = settled();
    try {
      write_position(save_tried_);
    } catch (const error& e) {
      if (e.code() != errc::transient) throw;
    }
    // Confirmed to the server at once (acked_ is the slot's own position): it may stand behind (a
    // restart, or relays killed before they settled anything), and a slot confirmed ahead of
    // the WAL the walsender decodes moves its restart point with each of the server's
    // snapshots the walsender passes, so the next relay reads less WAL before its first event
    // (seen: relays killed every 3 s, each reading the same 34 MB for 3 s, none getting further).
    flushed_ = std::max(flushed_, saved);
    return flushed_;
  }

  parked_row unreadable_row(event_in_log ev, time_point) {
    parked_row r{std::move(ev.m), ev.tx, 2,
                 std::nullopt,    0,     "unreadable event in the WAL: " + ev.why};
    if (r.m.id.is_nil()) r.m.id = make_uuid_v7();
    for (std::string* s :
         {&r.m.aggregate_type, &r.m.aggregate_id, &r.m.event_type, &r.m.content_type})
      *s = outbox::store::storable_text(*s);
    return r;
  }

  /// Writes `rows` to the outbox table (one statement per 500), then counts them settled.
  void park(std::vector<parked_row>& rows, time_point now) {
    if (rows.empty()) return;
    // In stream (commit) order, whatever order the relay put the batch in: each row takes the
    // next seq, and the table claims an aggregate's rows by seq.
    std::stable_sort(rows.begin(), rows.end(), [](const parked_row& a, const parked_row& b) {
      return a.m.sequence < b.m.sequence;
    });
    // The relay's stamp is of this publish call, not of the event (the writer refuses it).
    for (auto& r : rows) {
      if (const auto it = r.m.headers.find(predecessor_header); it != r.m.headers.end())
        r.m.headers.erase(it);
    }
    // One row per event id in a statement (ON CONFLICT DO UPDATE refuses a second): an event
    // emitted twice (not by our writer) is parked once; both count as settled.
    std::vector<parked_row> once;
    std::vector<std::uint64_t> repeats;
    {
      std::unordered_set<uuid> seen;
      for (auto& r : rows) {
        if (seen.insert(r.m.id).second)
          once.push_back(std::move(r));
        else
          repeats.push_back(r.tx);
      }
    }
    rows = std::move(once);
    table_.run("park", [&](PGconn* c) {
      outbox::store::insert_in_chunks(
          statements::park, 13, std::span<const parked_row>(rows), 500,
          [&](const std::string& text, std::span<const parked_row> part) {
            detail::params p;
            for (const parked_row& r : part) {
              p.add(r.m.id.to_string())
                  .add(r.m.aggregate_type)
                  .add(r.m.aggregate_id)
                  .add(r.m.event_type)
                  .add_bytes(r.m.payload)
                  .add(r.state == 2 && r.m.headers.empty() ? std::string("{}")
                                                           : headers_to_json(r.m.headers))
                  .add(detail::to_us(r.m.created_at))
                  .add(r.m.content_type)
                  .add(std::int64_t{r.state});
              if (r.available_at)
                p.add(detail::to_us(*r.available_at));
              else
                p.add_null();
              p.add(std::int64_t{r.attempts});
              if (r.state == 2)
                p.add(detail::to_us(now)).add(outbox::store::storable_text(r.error));
              else
                p.add_null().add_null();
            }
            detail::exec(c, text, p, "park events in the outbox table");
          });
      return 0;
    });
    for (const parked_row& r : rows) {
      if (r.state != 2)
        parked_.insert(outbox::detail::aggregate_key(r.m.aggregate_type, r.m.aggregate_id));
      done(r.tx);
    }
    for (const auto tx : repeats) done(tx);
  }

  /// The first batch after the stream opened starts where the slot stands. A relay that dies
  /// while publishing it (a message that crashes the relay looks just like that) starts there
  /// again: the claims of that position are counted in the table (one statement per stream
  /// opened, not per batch), and each message of the batch carries the count as its attempts,
  /// so the relay dead-letters them, unsent, once the retry policy says they are spent, as it
  /// does with a polling store's rows. A claim that ends in a settle or a release is taken
  /// back (uncount_head_attempt) when the slot stays at the position: the count is of claims
  /// a relay died in. The place is the end of the batch's first transaction and the index of
  /// its first event there: a relay that died in a later batch of a transaction larger than a
  /// batch starts at that batch again (the events before it are settled, see settled()).
  void count_head_attempt(claimed_batch& batch, stream_batch& sb,
                          std::pair<std::int64_t, std::int64_t> head) {
    // Not a structured binding: clang 14 cannot capture one in the lambda.
    const std::int64_t position = head.first, within = head.second;
    const int claims = table_.run("count the head batch's attempt", [&](PGconn* c) {
      auto r = detail::exec(c, std::string(statements::tail_attempt),
                            detail::params().add(options_.slot).add(position).add(within),
                            "tail attempt");
      return static_cast<int>(r.int64(0, 0));
    });
    head_unclaimed_ = false;
    sb.head_position = position;
    sb.head_within = within;
    for (auto& m : batch.messages) m.attempts = std::max(1, claims);
  }

  /// The head batch's claim at `position` was no attempt (released, or settled while its first
  /// transaction goes on): its count goes back (tail_attempt_release.sql).
  void uncount_head_attempt(std::int64_t position, std::int64_t within) noexcept {
    try {
      table_.run("release the head batch's attempt", [&](PGconn* c) {
        detail::exec(c, std::string(statements::tail_attempt_release),
                     detail::params().add(options_.slot).add(position).add(within),
                     "tail attempt release");
        return 0;
      });
    } catch (...) {
      // Counted once too often: one attempt of the retry policy's, never an event.
    }
  }

  /// After a table claim found nothing due: the next look at `table_poll`, or at the earliest
  /// retry time parked since, if sooner.
  time_point next_look_after_empty(time_point now) {
    time_point next = now + options_.table_poll;
    std::erase_if(retry_times_, [&](time_point t) { return t <= now; });
    for (const auto t : retry_times_) next = std::min(next, t);
    return next;
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

  /// Reads which aggregates have pending rows in the table: all of them (`of` empty), or which
  /// of `of`'s (the rest leave `parked_`).
  void load_parked(const std::vector<const message*>& of) {
    table_.run("parked aggregates", [&](PGconn* c) {
      detail::result r;
      if (of.empty()) {
        r = detail::exec(c, std::string(statements::parked_aggregates_all), detail::params(),
                         "parked aggregates");
        parked_.clear();
      } else {
        detail::array_literal types, ids;
        for (const message* m : of) {
          types.add_text(m->aggregate_type);
          ids.add_text(m->aggregate_id);
        }
        r = detail::exec_prepared_once<detail::parked_aggregates_statement>(
            c, statements::parked_aggregates, detail::params().add(types.str()).add(ids.str()),
            "parked aggregates");
        for (const message* m : of)
          parked_.erase(outbox::detail::aggregate_key(m->aggregate_type, m->aggregate_id));
      }
      for (int i = 0; i < r.rows(); ++i)
        parked_.insert(outbox::detail::aggregate_key(r.text(i, 0), r.text(i, 1)));
      return 0;
    });
  }

  /// Adds to `parked_` the aggregates of `events` (readable, not known parked) that have
  /// pending rows in the table now (one prepared query, parked_aggregates.sql): the stream's events
  /// of those wait behind them.
  void learn_parked(const std::vector<event_in_log>& events) {
    std::unordered_set<std::string> asked;
    std::vector<const message*> of;
    for (const event_in_log& ev : events) {
      if (!ev.why.empty()) continue;
      auto key = outbox::detail::aggregate_key(ev.m.aggregate_type, ev.m.aggregate_id);
      if (parked_.contains(key) || !asked.insert(std::move(key)).second) continue;
      of.push_back(&ev.m);
    }
    if (!of.empty()) load_parked(of);
  }

  settle_result settle_table(const claimed_batch& batch, std::span<const settlement> fates,
                             time_point now) {
    settle_result r = table_.settle(batch, fates, now);
    std::vector<const message*> of;
    of.reserve(batch.messages.size());
    for (const auto& m : batch.messages) of.push_back(&m);
    if (!of.empty()) load_parked(of);
    for (const auto& f : fates) {
      if (f.what == settlement::kind::release) next_table_look_ = now;
      // A retry's time is not known to the table's claim: look again when it comes.
      if (f.what == settlement::kind::retry) {
        retry_times_.push_back(f.retry_at);
        next_table_look_ = std::min(next_table_look_, f.retry_at);
      }
    }
    return r;
  }

  std::string conninfo_;
  tailing_options options_;
  store table_;
  detail::replication_stream stream_;
  detail::wakeup wake_;

  std::deque<event_in_log> ready_;     // events of committed transactions, in commit order
  std::vector<event_in_log> current_;  // the transaction being received
  bool in_tx_ = false;
  std::deque<tx_state> txs_;  // transactions with events handed out or ready, oldest first
  std::uint64_t first_tx_ = 0, next_tx_ = 0;  // txs_.front() is first_tx_
  detail::wal::lsn flushed_ = 0, acked_ = 0, last_commit_end_ = 0;
  // The end of the last transaction with events settled, and the first events settled of the
  // transaction after it (the one that ends at within_end_); what outbox_tail_positions has,
  // and the last advance() tried to save (settled()).
  detail::wal::lsn settled_events_ = 0, within_end_ = 0;
  std::int64_t within_events_ = 0;
  progress saved_{}, save_tried_{};
  std::chrono::steady_clock::time_point last_ack_{};
  std::optional<stream_batch> out_;
  std::uint64_t stream_batches_ = 0;
  std::int64_t sequence_ = 0;
  // Aggregates with pending rows in the table, as far as this store knows: its own parks, the
  // table read as the stream opened and before each stream batch (learn_parked).
  std::unordered_set<std::string> parked_;
  time_point next_table_look_{};
  std::unordered_map<std::uint32_t, detail::wal::outbox_columns> relations_;  // outbox tables
  bool table_turn_ = false;     // the table's due rows go next, when the stream has some too
  bool head_unclaimed_ = true;  // the stream's first batch since it opened is not counted yet
  bool more_buffered_ = false;  // the last read stopped at read_ahead
  std::vector<time_point> retry_times_;  // of events parked for a retry, not yet looked at
  std::uint32_t outbox_relid_ = 0;       // the outbox table's oid (checked as the stream opens)
  std::optional<sweep_look> sweep_;      // waiting for the settled position to reach it
  std::chrono::steady_clock::time_point next_sweep_{};
  std::atomic<std::uint64_t> stranded_{0};
};

}  // namespace outbox::postgresql
