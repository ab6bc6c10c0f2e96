#pragma once
/// @file
/// The PostgreSQL store: outbox, inbox and dead letters over SOCI sessions, with the libpq
/// handle underneath for prepared hot statements, arrays and LISTEN/NOTIFY.
///
/// Two claim policies (DESIGN.md):
/// - *locking* (default): `claim` opens a transaction and locks the batch with
///   `FOR UPDATE SKIP LOCKED`; `settle` updates (or deletes) and commits in the same transaction.
///   The row locks are the lease and the session is the fence: a dead relay's transaction can
///   never commit, and its batch is claimable again as soon as the server notices. The relay
///   bounds the open time by its publish timeout, and the session's
///   `idle_in_transaction_session_timeout` cuts a stalled relay off.
/// - *leasing*: `claim` stamps owner, expiry and a fencing token in one autocommit statement;
///   the batch is published with no transaction open; `settle` touches only rows still held
///   under that token. For very slow brokers, or when an open transaction is unwelcome.

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <outbox/concepts/store.hpp>
#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/postgresql/detail/native.hpp>
#include <outbox/postgresql/schema.hpp>
#include <outbox/validate.hpp>

namespace outbox::postgresql {

/// How a relay holds a claimed batch; see the file comment.
enum class claim_policy { locking, leasing };

/// What becomes of a row once its publish is confirmed.
enum class retention {
  keep,               ///< Marked published; `purge_published` removes it later, in batches.
  delete_on_publish,  ///< Deleted by the settle (about 2x the throughput: no index churn).
};

/// Options of a store.
struct store_options {
  claim_policy policy = claim_policy::locking;
  enum retention retention = retention::keep;
  /// Locking: the server ends a claim transaction left idle this long
  /// (`SET LOCAL idle_in_transaction_session_timeout`); keep it above the relay's publish
  /// timeout, or every batch is cut off mid-publish.
  std::chrono::milliseconds idle_in_transaction_timeout{60'000};
  bool listen = true;  ///< Wake an idle relay by LISTEN/NOTIFY (channel `outbox`); false = poll.
};

/// Applies the migrations of `sql/postgresql/` the database does not have yet, in one
/// transaction serialized by an advisory lock (safe from several processes at once).
/// @returns the schema version after the call.
inline int migrate(::soci::session& sql) {
  PGconn* c = detail::handle(sql);
  detail::exec(c, "BEGIN");
  try {
    detail::exec(c, "SELECT pg_advisory_xact_lock(7231350017261240901)");
    int current = 0;
    auto exists = detail::exec(c, "SELECT to_regclass('outbox_schema_migrations') IS NOT NULL");
    if (exists.text(0, 0) == "t") {
      auto v = detail::exec(c, "SELECT coalesce(max(version), 0) FROM outbox_schema_migrations");
      current = static_cast<int>(v.int64(0, 0));
    }
    for (const auto& m : migrations) {
      if (m.version <= current) continue;
      detail::exec(c, std::string(m.sql).c_str());
      detail::exec(c, "INSERT INTO outbox_schema_migrations (version, name) VALUES ($1, $2)",
                   detail::params().add(std::int64_t{m.version}).add(m.name), "migrate");
      current = m.version;
    }
    detail::exec(c, "COMMIT");
    return current;
  } catch (...) {
    PQclear(PQexec(c, "ROLLBACK"));
    throw;
  }
}

/// The PostgreSQL store. A view over one `soci::session` (the relay's or the consumer's own
/// connection, used by one thread); the writer's `append` runs on whatever session the
/// application passes it. The session must outlive the store.
///
/// Per-aggregate order: a row is claimed only if every earlier pending row of its aggregate is
/// claimed by the same statement, so a later event never overtakes one that is in flight under
/// another relay, locked, or waiting for a retry. (Conservative under races: a row may wait one
/// more poll, never go early.) Dead letters do not hold their aggregate back.
///
/// Connection loss (SQLSTATE class 08, 57P0x, or a broken socket) throws `transient`; the next
/// call reconnects the session (SOCI `reconnect`) and prepares its statements again.
class store {
 public:
  using session_type = ::soci::session;

  /// A transaction on the store's session; rolls back on destruction unless committed.
  ///
  /// It belongs to the connection that began it: if that connection is lost (and the store
  /// reconnects), `commit` fails instead of sending COMMIT on a new session where it would
  /// commit nothing and report success.
  class transaction {
   public:
    explicit transaction(store& s) : s_(&s) {
      s_->run("begin", [&](PGconn* c) { detail::exec(c, "BEGIN"); });
      generation_ = s_->generation_;
    }
    transaction(transaction&& o) noexcept
        : s_(std::exchange(o.s_, nullptr)), generation_(o.generation_) {}
    transaction& operator=(transaction&&) = delete;
    ~transaction() {
      if (s_ && still_ours()) PQclear(PQexec(s_->conn_, "ROLLBACK"));
    }

    /// Commits, after checking that the transaction is the one this object began and that no
    /// statement in it failed. A handler that caught a SQL error and carried on leaves the
    /// transaction aborted; PostgreSQL then answers COMMIT with the tag ROLLBACK and no error,
    /// which would report an effect as applied that was thrown away.
    /// @throws outbox::error `transient` (the connection was lost before COMMIT: nothing was
    ///         committed), `in_doubt` (lost during COMMIT: the inbox makes a redelivery
    ///         harmless), `permanent` (a statement failed inside the transaction: rolled back).
    void commit() {
      store* s = std::exchange(s_, nullptr);
      if (s->generation_ != generation_ || s->broken_ || PQstatus(s->conn_) != CONNECTION_OK) {
        s->broken_ = true;
        throw error(errc::transient, "postgresql", {},
                    "commit: the connection of this transaction was lost; nothing was committed");
      }
      PGconn* c = s->conn_;
      const auto status = PQtransactionStatus(c);
      if (status != PQTRANS_INTRANS) {
        const bool failed = status == PQTRANS_INERROR;
        if (failed) PQclear(PQexec(c, "ROLLBACK"));
        throw error(errc::permanent, "postgresql", {},
                    failed ? "commit: a statement failed inside the transaction (its error was "
                             "caught and not rethrown), so PostgreSQL rolled it back; nothing "
                             "was committed"
                           : "commit: no transaction is open on the session (it was ended "
                             "behind the store's back); nothing was committed");
      }
      detail::result r(PQexec(c, "COMMIT"));
      const auto rs = r.get() ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
      if (rs != PGRES_COMMAND_OK) {
        if (PQstatus(c) != CONNECTION_OK) {
          s->broken_ = true;
          throw error(errc::in_doubt, "postgresql", {},
                      "commit: the connection was lost during COMMIT; the outcome is unknown");
        }
        detail::throw_pg(c, r, "commit");  // e.g. a deferred constraint: rolled back
      }
      if (std::string_view(PQcmdStatus(r.get())) != "COMMIT")
        throw error(errc::permanent, "postgresql", {},
                    std::string("commit: the server answered ") + PQcmdStatus(r.get()) +
                        "; nothing was committed");
    }

   private:
    [[nodiscard]] bool still_ours() const noexcept {
      return s_->generation_ == generation_ && !s_->broken_ && s_->conn_ != nullptr &&
             PQstatus(s_->conn_) == CONNECTION_OK;
    }

    store* s_;
    std::uint64_t generation_ = 0;
  };

  explicit store(::soci::session& sql, store_options options = {})
      : sql_(&sql),
        conn_(detail::handle(sql)),
        options_(std::move(options)),
        rng_(std::random_device{}() ^ (static_cast<std::uint64_t>(std::random_device{}()) << 32)),
        wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (wake_fd_ < 0) throw error(errc::transient, "postgresql", "errno", "eventfd failed");
  }
  store(const store&) = delete;
  store& operator=(const store&) = delete;
  ~store() {
    if (in_claim_ && !broken_ && conn_ && PQstatus(conn_) == CONNECTION_OK)
      PQclear(PQexec(conn_, "ROLLBACK"));
    ::close(wake_fd_);
  }

  [[nodiscard]] session_type& session() noexcept { return *sql_; }
  [[nodiscard]] const store_options& options() const noexcept { return options_; }
  /// The server process of the store's connection (for operators, and for fault tests).
  [[nodiscard]] int backend_pid() { return PQbackendPID(connection()); }

  // ---- appending ------------------------------------------------------------------------------

  /// Inserts `rows` on `sql` inside the caller's open transaction: one multi-row INSERT per 500
  /// rows, every value bound (never spliced into the SQL text).
  void append(session_type& sql, std::span<const outgoing> rows) {
    PGconn* c = detail::handle(sql);
    constexpr std::size_t chunk = 500;
    for (std::size_t off = 0; off < rows.size(); off += chunk) {
      const std::size_t n = std::min(chunk, rows.size() - off);
      std::string text =
          "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, "
          "headers, created_at) VALUES ";
      detail::params p;
      for (std::size_t i = 0; i < n; ++i) {
        const int b = static_cast<int>(i) * 7;
        text += i ? ",(" : "(";
        text += "$" + std::to_string(b + 1) + "::uuid,$" + std::to_string(b + 2) + ",$" +
                std::to_string(b + 3) + ",$" + std::to_string(b + 4) + ",$" +
                std::to_string(b + 5) + "::jsonb,$" + std::to_string(b + 6) +
                "::jsonb,outbox_ts($" + std::to_string(b + 7) + "::bigint))";
        const outgoing& r = rows[off + i];
        p.add(r.id.to_string())
            .add(r.source->aggregate_type)
            .add(r.source->aggregate_id)
            .add(r.source->event_type)
            .add(r.source->payload)
            .add(r.headers_json)
            .add(detail::to_us(r.created_at));
      }
      detail::exec(c, text, p, "append");
    }
  }

  // ---- claiming -------------------------------------------------------------------------------

  claimed_batch claim(const claim_request& req) {
    return run("claim", [&](PGconn* c) {
      if (in_claim_) rollback_claim(c);  // a previous claim was neither settled nor released
      claimed_batch batch;
      batch.token = static_cast<std::int64_t>(rng_() >> 1);
      batch.lease_until = req.now + req.lease;
      const bool locking = options_.policy == claim_policy::locking;
      if (locking) {
        // The limit applies to this claim transaction only (not to other uses of the session).
        detail::exec(c, ("BEGIN; SET LOCAL idle_in_transaction_session_timeout = " +
                         std::to_string(options_.idle_in_transaction_timeout.count()))
                            .c_str());
        in_claim_ = true;
        claim_token_ = batch.token;
      }
      detail::array_literal bad_seqs, bad_errors;  // rows that cannot be read, and why
      const auto take = [&](const detail::result& r, int i) {
        std::string why;
        message m = read_message(r, i, why);
        if (why.empty()) {
          batch.messages.push_back(std::move(m));
          return;
        }
        bad_seqs.add(m.sequence);
        bad_errors.add_text("unreadable row: " + why);
      };
      if (!locking) {
        detail::params p;
        p.add(detail::to_us(batch.lease_until)).add(req.owner).add(batch.token);
        p.add(detail::to_us(req.now)).add(static_cast<std::int64_t>(req.limit));
        auto r = detail::exec_prepared(c, "outbox_claim", p, "claim");
        batch.messages.reserve(static_cast<std::size_t>(r.rows()));
        for (int i = 0; i < r.rows(); ++i) take(r, i);
      } else {
        // Another locking relay's open batch is invisible to SQL (its rows are locked, not
        // stamped), so rows behind its rows of an aggregate pass the claim's filters, fill the
        // LIMIT, and are dropped by the per-aggregate check. When that happens, claim again
        // after the last row seen, leaving those aggregates out, so the rest is reached
        // (at most `claim_passes` statements; almost every claim is one).
        detail::array_literal types, ids;  // of the aggregates in `blocked`
        std::set<std::pair<std::string, std::string>, std::less<>> blocked;
        std::int64_t after = 0;
        for (int pass = 0; pass < claim_passes; ++pass) {
          const std::size_t taken = batch.messages.size() + bad_seqs.size();
          const std::size_t want = req.limit - std::min(req.limit, taken);
          if (want == 0) break;
          detail::params p;
          p.add(detail::to_us(req.now)).add(static_cast<std::int64_t>(want)).add(after);
          p.add(types.str()).add(ids.str());
          auto r = detail::exec_prepared(c, "outbox_claim", p, "claim");
          bool held_back = false;
          for (int i = 0; i < r.rows(); ++i) {
            after = std::max(after, r.int64(i, 0));
            if (r.text(i, 9) == "t") {
              take(r, i);
              continue;
            }
            held_back = true;
            if (blocked.emplace(r.text(i, 2), r.text(i, 3)).second) {
              types.add_text(r.text(i, 2));
              ids.add_text(r.text(i, 3));
            }
          }
          if (!held_back || static_cast<std::size_t>(r.rows()) < want) break;
        }
      }
      if (bad_seqs.size() > 0) {
        // A row that cannot be read (written by another program) is dead-lettered with the
        // reason, in the claim's transaction (locking) or fenced by the claim's token
        // (leasing); the rest of the batch flows.
        detail::params bad;
        bad.add(bad_seqs.str()).add(bad_errors.str()).add(std::int64_t{locking ? 1 : 0});
        if (locking)
          bad.add_null();
        else
          bad.add(batch.token);
        batch.unreadable = static_cast<std::size_t>(
            detail::exec(c,
                         "UPDATE outbox o SET state = 2, dead_at = now(), last_error = u.err, "
                         "attempts = least(o.attempts, 2147483646) + $3, lease_owner = NULL, "
                         "lease_token = NULL "
                         "FROM unnest($1::bigint[], $2::text[]) AS u(seq, err) "
                         "WHERE o.seq = u.seq AND o.state = 0 "
                         "AND ($4::bigint IS NULL OR o.lease_token = $4::bigint)",
                         bad, "claim: dead-letter unreadable rows")
                .affected());
      }
      // Nothing held: end the claim transaction now (or commit its dead letters).
      if (locking && batch.messages.empty()) {
        if (batch.unreadable > 0) {
          detail::exec(c, "COMMIT");
          in_claim_ = false;
        } else {
          rollback_claim(c);
        }
      }
      batch.sort_by_sequence();
      return batch;
    });
  }

  settle_result settle(const claimed_batch& batch, std::span<const settlement> fates) {
    batch.require_one_fate_each(fates.size(), "postgresql");
    return run("settle", [&](PGconn* c) {
      if (options_.policy == claim_policy::locking && !in_claim_)
        throw error(errc::transient, "postgresql", {},
                    "settle: the claim transaction is gone (connection lost?); the batch is "
                    "claimable again");
      if (options_.policy == claim_policy::locking && batch.token != claim_token_) {
        settle_result stale;  // not the open claim: its rows are not ours to touch
        stale.fenced = fates.size();
        return stale;
      }
      detail::array_literal published, others, kinds, ats, errors;
      for (std::size_t i = 0; i < fates.size(); ++i) {
        const auto seq = batch.messages[i].sequence;
        const auto& f = fates[i];
        if (f.what == settlement::kind::published) {
          published.add(seq);
          continue;
        }
        others.add(seq);
        kinds.add(kind_code(f.what));
        ats.add(detail::to_us(f.retry_at));
        errors.add_text(f.error);
      }
      const bool locking = options_.policy == claim_policy::locking;
      detail::params p;
      if (!locking) p.add(batch.token);
      p.add(detail::to_us(std::chrono::system_clock::now()))
          .add(published.str())
          .add(others.str())
          .add(kinds.str())
          .add(ats.str())
          .add(errors.str());
      auto r = detail::exec_prepared(c, "outbox_settle", p, "settle");
      settle_result out;
      out.published = static_cast<std::size_t>(r.int64(0, 0));
      out.retried = static_cast<std::size_t>(r.int64(0, 1));
      out.dead = static_cast<std::size_t>(r.int64(0, 2));
      out.released = static_cast<std::size_t>(r.int64(0, 3));
      if (locking) {
        detail::exec(c, "COMMIT");
        in_claim_ = false;
        // Released rows are simply left alone: their locks go with the commit.
        out.released = static_cast<std::size_t>(
            std::count_if(fates.begin(), fates.end(),
                          [](const settlement& f) { return f.what == settlement::kind::release; }));
      }
      out.fenced = fates.size() - (out.published + out.retried + out.dead + out.released);
      return out;
    });
  }

  void release(const claimed_batch& batch) {
    if (options_.policy == claim_policy::locking) {
      // Rolling back undoes the claim (attempts included) and drops the row locks.
      run("release", [&](PGconn* c) {
        if (in_claim_ && batch.token == claim_token_) rollback_claim(c);
        return 0;
      });
      return;
    }
    std::vector<settlement> fates(batch.size());
    settle(batch, fates);
  }

  // ---- waking (LISTEN/NOTIFY) ----------------------------------------------------------------

  /// Sleeps until a NOTIFY on the channel arrives (a commit that inserted events), `interrupt`
  /// is called, or `timeout` passes. Listens on the store's own connection (lazily, so a
  /// consumer's store never queues notifications). Never throws: a broken connection degrades
  /// to a plain sleep and the next claim reconnects.
  /// @returns true when woken by a notification or an interrupt.
  bool wait_for_work(std::chrono::milliseconds timeout) {
    int sock = -1;
    if (options_.listen) {
      try {
        PGconn* c = connection();
        if (!listening_) {
          detail::exec(c, "LISTEN outbox");
          listening_ = true;
        }
        if (drain_notifications(c)) return true;
        sock = PQsocket(c);
      } catch (const error&) {
        sock = -1;  // degrade to a plain sleep; the next claim reconnects
      }
    }
    pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {sock, POLLIN, 0}};
    const int n = ::poll(fds, sock >= 0 ? 2 : 1, static_cast<int>(timeout.count()));
    bool woken = false;
    if (n > 0 && (fds[0].revents & POLLIN)) {
      std::uint64_t v;
      [[maybe_unused]] auto rd = ::read(wake_fd_, &v, sizeof v);
      woken = true;
    }
    if (n > 0 && sock >= 0 && fds[1].revents != 0) {
      if (PQconsumeInput(conn_) == 0) {
        broken_ = true;  // the next claim reconnects
      } else {
        woken = drain_notifications(conn_) || woken;
      }
    }
    return woken;
  }

  /// Wakes a `wait_for_work` in progress (from any thread).
  void interrupt() noexcept {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto wr = ::write(wake_fd_, &one, sizeof one);
  }

  // ---- inbox ----------------------------------------------------------------------------------

  [[nodiscard]] transaction begin() { return transaction(*this); }

  /// Classifies an error of SOCI's postgresql backend (a handler's own statement) by its
  /// SQLSTATE: 40001 and 40P01 transient, 23505 duplicate, and so on (see `detail::classify`;
  /// `concepts::classifying_store`).
  [[nodiscard]] std::optional<errc> classify(const std::exception& e) const {
    if (const auto* p = dynamic_cast<const ::soci::postgresql_soci_error*>(&e))
      return detail::classify(p->sqlstate());
    return std::nullopt;
  }

  bool record_delivery(std::string_view consumer, const uuid& id, time_point now) {
    return run("record_delivery", [&](PGconn* c) {
      auto r = detail::exec_prepared(
          c, "outbox_inbox_insert",
          detail::params().add(consumer).add(id.to_string()).add(detail::to_us(now)),
          "record_delivery");
      return r.affected() == 1;
    });
  }

  void dead_letter_delivery(std::string_view consumer, const message& m, std::string_view why,
                            time_point now) {
    run("dead_letter_delivery", [&](PGconn* c) {
      detail::exec(c, "BEGIN");
      try {
        detail::exec(c,
                     "INSERT INTO outbox_inbox_dead (consumer, event_id, aggregate_type, "
                     "aggregate_id, event_type, payload, headers, error, failed_at) VALUES "
                     "($1, $2::uuid, $3, $4, $5, $6::bytea, $7, $8, outbox_ts($9::bigint)) "
                     "ON CONFLICT (consumer, event_id) DO UPDATE SET error = EXCLUDED.error, "
                     "failed_at = EXCLUDED.failed_at",
                     // What a peer delivered is kept whatever it is: the payload as bytes (hex
                     // input of bytea: exact, NUL bytes included), the texts made storable.
                     detail::params()
                         .add(consumer)
                         .add(m.id.to_string())
                         .add(sanitize_text(m.aggregate_type))
                         .add(sanitize_text(m.aggregate_id))
                         .add(sanitize_text(m.event_type))
                         .add(bytea_hex(m.payload))
                         .add(sanitize_text(headers_to_json(m.headers), max_dead_header_bytes))
                         .add(sanitize_text(why))
                         .add(detail::to_us(now)),
                     "dead_letter_delivery");
        detail::exec_prepared(
            c, "outbox_inbox_insert",
            detail::params().add(consumer).add(m.id.to_string()).add(detail::to_us(now)),
            "dead_letter_delivery");
        detail::exec(c, "COMMIT");
      } catch (...) {
        if (PQstatus(c) == CONNECTION_OK) PQclear(PQexec(c, "ROLLBACK"));
        throw;
      }
      return 0;
    });
  }

  // ---- operations -----------------------------------------------------------------------------

  /// Under *locking* a claim writes nothing (its row locks are the claim), so rows in flight
  /// count as pending and `in_flight` is 0; under *leasing* it counts rows under a live lease.
  backlog_stats stats(time_point now) {
    return run("stats", [&](PGconn* c) {
      auto r = detail::exec(
          c,
          "SELECT count(*) FILTER (WHERE NOT (lease_token IS NOT NULL AND available_at > "
          "outbox_ts($1::bigint))), count(*) FILTER (WHERE lease_token IS NOT NULL AND "
          "available_at > outbox_ts($1::bigint)), coalesce(outbox_us(min(created_at)), 0), "
          "(SELECT count(*) FROM outbox WHERE state = 2) FROM outbox WHERE state = 0",
          detail::params().add(detail::to_us(now)), "stats");
      backlog_stats s;
      s.pending = r.int64(0, 0);
      s.in_flight = r.int64(0, 1);
      s.dead = r.int64(0, 3);
      if (s.pending + s.in_flight > 0) {
        s.oldest_pending_age =
            std::chrono::milliseconds(elapsed(detail::to_us(now), r.int64(0, 2)) / 1000);
      }
      return s;
    });
  }

  std::vector<dead_letter> dead_letters(std::size_t limit) {
    return run("dead_letters", [&](PGconn* c) {
      auto r = detail::exec(
          c,
          "SELECT seq, event_id, aggregate_type, aggregate_id, event_type, payload::text, "
          "headers::text, attempts, outbox_us(created_at), coalesce(last_error, ''), "
          "coalesce(outbox_us(dead_at), 0) FROM outbox WHERE state = 2 ORDER BY seq LIMIT $1",
          detail::params().add(static_cast<std::int64_t>(limit)), "dead_letters");
      std::vector<dead_letter> out;
      for (int i = 0; i < r.rows(); ++i) {
        dead_letter d;
        std::string why;  // listed as far as it can be read; the claim kept the reason
        d.msg = read_message(r, i, why);
        d.last_error = r.text(i, 9);
        d.dead_at = detail::from_us(r.int64(i, 10));
        out.push_back(std::move(d));
      }
      return out;
    });
  }

  bool requeue(const uuid& id) {
    return run("requeue", [&](PGconn* c) {
      return detail::exec(c,
                          "UPDATE outbox SET state = 0, attempts = 0, available_at = '-infinity', "
                          "lease_owner = NULL, lease_token = NULL, dead_at = NULL "
                          "WHERE event_id = $1::uuid AND state = 2",
                          detail::params().add(id.to_string()), "requeue")
                 .affected() == 1;
    });
  }

  std::size_t purge_published(time_point before, std::size_t limit) {
    return run("purge_published", [&](PGconn* c) {
      return static_cast<std::size_t>(
          detail::exec(
              c,
              "DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox WHERE state = 1 "
              "AND published_at < outbox_ts($1::bigint) ORDER BY seq LIMIT $2)",
              detail::params().add(detail::to_us(before)).add(static_cast<std::int64_t>(limit)),
              "purge_published")
              .affected());
    });
  }

  std::size_t purge_inbox(time_point before, std::size_t limit) {
    return run("purge_inbox", [&](PGconn* c) {
      return static_cast<std::size_t>(
          detail::exec(
              c,
              "DELETE FROM outbox_inbox WHERE ctid = ANY(ARRAY(SELECT ctid FROM "
              "outbox_inbox WHERE processed_at < outbox_ts($1::bigint) "
              "ORDER BY processed_at LIMIT $2))",
              detail::params().add(detail::to_us(before)).add(static_cast<std::int64_t>(limit)),
              "purge_inbox")
              .affected());
    });
  }

  // ---- the SQL ---------------------------------------------------------------------------------

  /// The claim, one statement. `c` locks candidates (skipping rows locked by other claims);
  /// a candidate is kept only if every earlier pending row of its aggregate is a candidate too.
  /// That test is a scalar subquery on purpose: written as NOT EXISTS, the planner turned it
  /// into a hash anti-join over a scan of the whole outbox (55 ms per claim of 500 on 100,000
  /// rows); as a scalar subquery it stays one index probe per candidate.
  ///
  /// Before its LIMIT, `c` already leaves out rows behind an earlier row of their aggregate
  /// that waits (for a retry, or under another relay's lease): otherwise a long run of such rows
  /// fills every batch and is then filtered away, and the claim comes back empty while other
  /// aggregates further down wait (migration 0003). That probe goes to the small partial index
  /// `outbox_waiting_by_aggregate`, hence the literal `available_at > '-infinity'`. It costs
  /// about 1.5 us a row (a 500-row claim went from 0.64 to 1.4 ms, about 30% of the bare-SQL
  /// rate), so an uncorrelated EXISTS, run once per claim (an InitPlan), skips it when no row
  /// waits at all, the usual case for one relay. Under
  /// locking, a row whose earlier row is locked by another relay's batch is still left to the
  /// post-filter; it waits at most for that batch, and rows further down are reached.
  ///
  /// - leasing: $1 lease expiry (us), $2 owner, $3 fencing token, $4 now (us), $5 limit; the
  ///   kept rows are stamped (expiry, owner, token, attempts + 1) and returned.
  /// - locking: $1 now (us), $2 limit, $3 only rows after this seq, $4/$5 aggregates
  ///   (types, ids) to leave out; every locked candidate is returned, with a tenth column that
  ///   says whether it passed the per-aggregate check (the others stay locked, unused, until
  ///   the claim ends). Nothing is written (the row locks are the claim, and a rollback would
  ///   undo a stamp anyway), so a claim costs no row version.
  static std::string claim_sql(claim_policy policy) {
    const bool lease = policy == claim_policy::leasing;
    const std::string now = lease ? "$4" : "$1";
    const std::string limit = lease ? "$5" : "$2";
    // Locking claims again, after the rows already seen and without the aggregates held back
    // behind another relay's batch (see `claim`): $3, $4 and $5.
    const std::string again =
        lease ? ""
              : " AND o.seq > $3::bigint AND (o.aggregate_type, o.aggregate_id) NOT IN"
                " (SELECT x.t, x.i FROM unnest($4::text[], $5::text[]) AS x(t, i))";
    const std::string claimable =
        " FROM outbox o WHERE o.state = 0 AND o.available_at <= outbox_ts(" + now + "::bigint)" +
        again +
        " AND (NOT EXISTS (SELECT 1 FROM outbox w0 WHERE w0.state = 0"
        " AND w0.available_at > '-infinity' AND w0.available_at > outbox_ts(" +
        now +
        "::bigint))"
        " OR (SELECT 1 FROM outbox w WHERE w.state = 0 AND w.available_at > '-infinity'"
        " AND w.aggregate_type = o.aggregate_type AND w.aggregate_id = o.aggregate_id"
        " AND w.seq < o.seq AND w.available_at > outbox_ts(" +
        now +
        "::bigint) LIMIT 1) IS NULL)"
        " ORDER BY o.seq LIMIT " +
        limit + " FOR UPDATE SKIP LOCKED";
    const std::string first_in_aggregate =
        "(SELECT p.seq FROM outbox p WHERE p.state = 0 AND p.aggregate_type = c.aggregate_type"
        " AND p.aggregate_id = c.aggregate_id AND p.seq < c.seq"
        " AND NOT EXISTS (SELECT 1 FROM c c2 WHERE c2.seq = p.seq) LIMIT 1) IS NULL";
    if (!lease)
      return "WITH c AS (SELECT o.seq, o.event_id, o.aggregate_type, o.aggregate_id,"
             " o.event_type, o.payload, o.headers, o.attempts, o.created_at" +
             claimable +
             ")"
             " SELECT c.seq, c.event_id, c.aggregate_type, c.aggregate_id, c.event_type,"
             " c.payload::text, c.headers::text, least(c.attempts, 2147483646) + 1,"
             " outbox_us(c.created_at), " +
             first_in_aggregate + " FROM c";
    return "WITH c AS (SELECT o.seq, o.aggregate_type, o.aggregate_id" + claimable +
           "),"
           " ok AS (SELECT c.seq FROM c WHERE " +
           first_in_aggregate +
           ")"
           " UPDATE outbox o SET available_at = outbox_ts($1::bigint), lease_owner = $2,"
           " lease_token = $3, attempts = least(o.attempts, 2147483646) + 1"
           " FROM ok WHERE o.seq = ok.seq"
           " RETURNING o.seq, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type,"
           " o.payload::text, o.headers::text, o.attempts, outbox_us(o.created_at)";
  }

  /// The settle, one statement: published rows by array, the other fates by unnest. Parameters:
  /// [leasing only: the fencing token,] now (us), published seqs, other seqs, their kinds
  /// (2 retry, 3 dead, 4 release), retry times (us), errors. Returns the four counts.
  /// Leasing touches only rows still under the token (the fence) and gives a released row its
  /// attempt back; locking needs no fence (the row locks) and counts the attempt of a failed row
  /// here, since its claim wrote nothing.
  static std::string settle_sql(claim_policy policy, retention r) {
    const bool lease = policy == claim_policy::leasing;
    const int o = lease ? 1 : 0;
    const auto arg = [o](int n) { return "$" + std::to_string(n + o); };
    const std::string fence = lease ? " AND lease_token = $1" : "";
    const std::string published =
        r == retention::keep
            ? "UPDATE outbox SET state = 1, published_at = outbox_ts(" + arg(1) +
                  "::bigint), lease_owner = NULL, lease_token = NULL WHERE seq = ANY(" + arg(2) +
                  "::bigint[])" + fence + " AND state = 0 RETURNING 1"
            : "DELETE FROM outbox WHERE seq = ANY(" + arg(2) + "::bigint[])" + fence +
                  " AND state = 0 RETURNING 1";
    const std::string attempts =
        lease ? "CASE WHEN f.kind = 4 THEN greatest(o.attempts, 1) - 1 ELSE o.attempts END"
              : "CASE WHEN f.kind IN (2, 3) THEN least(o.attempts, 2147483646) + 1"
                " ELSE o.attempts END";
    return "WITH pub AS (" + published + "), f AS (SELECT * FROM unnest(" + arg(3) +
           "::bigint[], " + arg(4) + "::int[], " + arg(5) + "::bigint[], " + arg(6) +
           "::text[]) AS f(seq, kind, at, err)), "
           "oth AS (UPDATE outbox o SET "
           "state = CASE WHEN f.kind = 3 THEN 2 ELSE 0 END, "
           "available_at = CASE f.kind WHEN 2 THEN outbox_ts(f.at) WHEN 4 THEN '-infinity' "
           "ELSE o.available_at END, "
           "attempts = " +
           attempts +
           ", "
           "dead_at = CASE WHEN f.kind = 3 THEN outbox_ts(" +
           arg(1) +
           "::bigint) ELSE o.dead_at END, "
           "last_error = CASE WHEN f.kind IN (2, 3) THEN f.err ELSE o.last_error END, "
           "lease_owner = NULL, lease_token = NULL "
           "FROM f WHERE o.seq = f.seq" +
           (lease ? " AND o.lease_token = $1" : " AND f.kind <> 4") +
           " AND o.state = 0 RETURNING f.kind) "
           "SELECT (SELECT count(*) FROM pub), "
           "(SELECT count(*) FROM oth WHERE kind = 2), "
           "(SELECT count(*) FROM oth WHERE kind = 3), "
           "(SELECT count(*) FROM oth WHERE kind = 4)";
  }

 private:
  /// Row `i` of a result whose first nine columns are seq, event_id, aggregate_type,
  /// aggregate_id, event_type, payload, headers, attempts, created_at (us): claim and
  /// dead_letters both select them in this order. Never throws on content: what cannot be
  /// read (a row written by another program) is left empty and `why` says what it was.
  static message read_message(const detail::result& r, int i, std::string& why) {
    message m;
    m.sequence = r.int64(i, 0);
    m.id = uuid::parse(r.text(i, 1)).value_or(uuid{});
    m.aggregate_type = r.text(i, 2);
    m.aggregate_id = r.text(i, 3);
    m.event_type = r.text(i, 4);
    m.payload = r.text(i, 5);
    m.attempts = clamp_attempts(r.int64(i, 7));
    m.created_at = detail::from_us(r.int64(i, 8));
    why = read_stored_headers(m, r.text(i, 6));
    return m;
  }

  /// Statements a locking claim may run to get past aggregates held by other relays.
  static constexpr int claim_passes = 4;

  /// Headers of a consumer's dead letter are cut to this many bytes (they came from a peer).
  static constexpr std::size_t max_dead_header_bytes = 1 << 20;

  /// `bytes` in bytea's hex input form ("\x..."): any bytes, exactly.
  static std::string bytea_hex(std::string_view bytes) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(2 + bytes.size() * 2);
    out += "\\x";
    for (const char ch : bytes) {
      const auto b = static_cast<unsigned char>(ch);
      out += digits[b >> 4];
      out += digits[b & 0xF];
    }
    return out;
  }

  static int kind_code(settlement::kind k) {
    switch (k) {
      case settlement::kind::retry:
        return 2;
      case settlement::kind::dead:
        return 3;
      default:
        return 4;
    }
  }

  bool drain_notifications(PGconn* c) {
    bool any = false;
    while (PGnotify* n = PQnotifies(c)) {
      any = true;
      PQfreemem(n);
    }
    return any;
  }

  void rollback_claim(PGconn* c) {
    in_claim_ = false;
    PQclear(PQexec(c, "ROLLBACK"));
  }

  /// The connection, re-established after a loss and with its statements prepared.
  ///
  /// SOCI's `reconnect` closes the old backend before it opens the new one, so a reconnect
  /// that fails (the server still away) leaves the session with no backend at all. That is
  /// still our lost connection, not a misconfiguration: each call tries again, and fails as
  /// `transient` until the server is back.
  PGconn* connection() {
    const bool gone = sql_->get_backend() == nullptr;
    if (broken_ || gone || PQstatus(detail::handle(*sql_)) != CONNECTION_OK) {
      broken_ = true;
      in_claim_ = false;
      listening_ = false;
      conn_ = nullptr;  // freed by the reconnect below, whether it succeeds or not
      try {
        sql_->reconnect();
      } catch (const std::exception& e) {
        throw error(errc::transient, "postgresql", {},
                    std::string("reconnect: ") + sanitize_text(e.what()));
      }
      broken_ = false;
      // A new connection, even if the allocator handed back the same address: nothing of the
      // old one (prepared statements, LISTEN, an open claim) exists on it.
      prepared_ = false;
      ++generation_;
    }
    PGconn* c = detail::handle(*sql_);
    if (c != conn_ || !prepared_) {
      if (c != conn_) ++generation_;
      conn_ = c;
      prepared_ = false;
      listening_ = false;
      in_claim_ = false;
      // Idempotent: a preparation cut short by an error may have left some of them behind.
      auto left = detail::exec(c,
                               "SELECT name FROM pg_prepared_statements WHERE name IN "
                               "('outbox_claim', 'outbox_settle', 'outbox_inbox_insert')");
      for (int i = 0; i < left.rows(); ++i)
        detail::exec(c, ("DEALLOCATE " + std::string(left.text(i, 0))).c_str());
      detail::prepare(c, "outbox_claim", claim_sql(options_.policy));
      detail::prepare(c, "outbox_settle", settle_sql(options_.policy, options_.retention));
      detail::prepare(c, "outbox_inbox_insert",
                      "INSERT INTO outbox_inbox (consumer, event_id, processed_at) VALUES "
                      "($1, $2::uuid, outbox_ts($3::bigint)) ON CONFLICT DO NOTHING");
      prepared_ = true;
    }
    return c;
  }

  /// Runs `f` on the live connection; on a connection loss, marks the store for reconnection
  /// (the open claim, if any, is gone with it) and rethrows as `transient`.
  template <class F>
  std::invoke_result_t<F&, PGconn*> run(std::string_view what, F&& f) {
    PGconn* c = connection();
    try {
      return f(c);
    } catch (const error& e) {
      if (detail::connection_lost(c, e.native_code())) {
        broken_ = true;
        in_claim_ = false;
        if (e.kind() != errc::transient)
          throw error(errc::transient, "postgresql", e.native_code(),
                      std::string(what) + ": connection lost");
      } else if (in_claim_ && options_.policy == claim_policy::locking) {
        // A failed statement aborts the claim transaction: end it so the batch is free again.
        rollback_claim(c);
      }
      throw;
    }
  }

  ::soci::session* sql_;
  PGconn* conn_;  // the connection statements were prepared on; null while it is lost
  std::uint64_t generation_ = 0;  // counts connections: a transaction belongs to one
  store_options options_;
  std::mt19937_64 rng_;
  int wake_fd_;
  bool prepared_ = false;
  bool broken_ = false;
  bool listening_ = false;
  bool in_claim_ = false;
  std::int64_t claim_token_ = 0;  // the open locking claim's
};

static_assert(concepts::store<store>);

}  // namespace outbox::postgresql
