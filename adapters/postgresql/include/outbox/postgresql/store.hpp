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

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <outbox/concepts/store.hpp>
#include <outbox/concepts/triage.hpp>
#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/postgresql/appender.hpp>
#include <outbox/postgresql/detail/connection.hpp>
#include <outbox/postgresql/detail/link.hpp>
#include <outbox/postgresql/detail/migration.hpp>
#include <outbox/postgresql/detail/triage.hpp>
#include <outbox/postgresql/detail/wakeup.hpp>
#include <outbox/postgresql/schema.hpp>
#include <outbox/schedule.hpp>
#include <outbox/sql/backend.hpp>
#include <outbox/sql/migrate.hpp>
#include <outbox/sql/row.hpp>
#include <outbox/sql/server_store.hpp>
#include <outbox/sql/settle.hpp>
#include <outbox/sql/statements.hpp>
#include <outbox/store_options.hpp>
#include <outbox/validate.hpp>
#include <outbox/writer.hpp>

namespace outbox::postgresql {

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
class store : public outbox::sql::server_store<detail::dialect, store> {
 public:
  /// What the writer needs: an append on the application's session, nothing else (no store, no
  /// eventfd, no statement prepared). `outbox::writer<postgresql::store>` uses it.
  using appender = postgresql::appender;

  /// The session set-up of a store's session: PostgreSQL needs none (the claim sets its own
  /// `idle_in_transaction_session_timeout`); checks the session's backend.
  /// @throws outbox::error `misconfigured` for a session of another backend.
  static void configure(session_type& sql, const session_options& = {}) { detail::handle(sql); }

  /// The inbox's consumer names (`concepts::consumer_name_limited_store`): the column is text,
  /// but its primary key (consumer, event_id) is a btree, whose entry holds 2,704 bytes at most
  /// (54000, for every delivery); 2,048 bytes of name always fit, however they compress.
  static constexpr name_limit consumer_name_limit{2048, false};

  /// The SOCI backend of the store's sessions: `soci::session sql(Store::soci_backend, ...)`.
  static constexpr const char* soci_backend = "postgresql";
  /// Opens `sql`, a session not yet open, with the store's SOCI backend on `connect_string`:
  /// `soci::session::open`, its failure classified as the store's statements' are.
  /// @throws outbox::error `transient` for a server away (08001: libpq gives no SQLSTATE for a
  ///         connection it could not make), `misconfigured` for a refused login (28P01, 28000),
  ///         database (3D000) or a connection string libpq refuses (22023: `sslmode=bogus`).
  static void connect(session_type& sql, const std::string& connect_string) {
    outbox::sql::open_session(sql, soci_backend, connect_string, detail::connect_error);
  }
  /// The schema version this library migrates to (the number of migration files).
  static constexpr int schema_version = static_cast<int>(std::size(migrations));

  /// Applies the migrations of `sql/postgresql/` the database does not have yet (up to
  /// `target`), in one transaction serialized by an advisory lock
  /// (`outbox::sql::run_migrations`). Safe from several processes at once.
  /// @returns the schema version after the call.
  static int migrate(session_type& sql, int target = outbox::sql::latest_version) {
    detail::migration_host host(detail::handle(sql));
    return outbox::sql::run_migrations(host, migrations, "postgresql", target);
  }

  /// @param sql the store's own connection (postgresql backend); it must outlive the store.
  ///            Not migrated here: call `migrate` once. `claim_policy::store_default` is
  ///            locking.
  /// @param options the store options.
  /// @throws outbox::error `misconfigured` for an `idle_in_transaction_timeout` outside
  ///         1 ms .. 2^31-1 ms.
  explicit store(session_type& sql, store_options options = {})
      : server_store(sql, resolved(std::move(options)), [](const store_options& o) {
          return detail::dialect{
              .statements = {{"outbox_claim", claim_statement(o.policy)},
                             {"outbox_settle", settle_statement()},
                             {"outbox_inbox_insert", statements::inbox_insert},
                             {"outbox_inbox_recorded", statements::inbox_recorded}},
              .version_check = statements::schema_version,
              .schema_version = schema_version};
        }) {}

  /// The server process of the store's connection (for operators, and for fault tests).
  [[nodiscard]] int backend_pid() { return PQbackendPID(link_->connection()); }

  /// Runs `f(PGconn*)` on the store's connection, reconnected after a loss (for stores built on
  /// this one: the tailing store writes its parked events so). A lost connection throws
  /// `transient` and is re-established by the next call.
  template <class F>
  auto run(std::string_view what, F&& f) {
    return link_->run(what, std::forward<F>(f));
  }

  // ---- appending ------------------------------------------------------------------------------

  /// `appender::append`.
  void append(session_type& sql, std::span<const outgoing> rows, const writer_options& o = {}) {
    appender{}.append(sql, rows, o);
  }
  /// `appender::commit`: the rows and COMMIT in one round trip.
  void commit(session_type& sql, std::span<const outgoing> rows, const writer_options& o = {}) {
    appender{}.commit(sql, rows, o);
  }

  // ---- claiming -------------------------------------------------------------------------------

  /// Claims at most `req.limit` rows under a new token (`concepts::claiming_store`): locking
  /// holds their row locks in a transaction until the settle (a claim made while one is open
  /// rolls that one back); leasing stamps them. A row it cannot read is dead-lettered.
  claimed_batch claim(const claim_request& req) {
    return link_->run("claim", [&](PGconn* c) {
      link_->drop_open_claim(c);  // neither settled nor released
      claimed_batch batch;
      batch.token = next_token();
      batch.lease_until = req.now + req.lease;
      const bool locking = options_.policy == claim_policy::locking;
      if (locking) {
        // Open before BEGIN: a failure from here on (BEGIN, SET, the claim) rolls it back.
        link_->begin_claim(batch.token);
        // The limit applies to this claim transaction only (not to other uses of the session).
        detail::exec(c, ("BEGIN; SET LOCAL idle_in_transaction_session_timeout = " +
                         std::to_string(options_.idle_in_transaction_timeout.count()))
                            .c_str());
      }
      detail::array_literal bad_seqs, bad_errors, bad_causes;  // unreadable rows, and why
      const auto take = [&](const detail::result& r, int i) {
        std::string why;
        message m = outbox::sql::read_message(detail::row{r, i}, why);
        if (why.empty()) {
          batch.messages.push_back(std::move(m));
          return;
        }
        bad_seqs.add(m.sequence);
        bad_errors.add_text("unreadable row: " + why);
        bad_causes.add_text(cause_key("unreadable", why));
      };
      if (!locking) {
        detail::params p;
        p.add(detail::to_us(batch.lease_until)).add(req.owner).add(batch.token);
        p.add(detail::to_us(req.now)).add(static_cast<std::int64_t>(req.limit));
        p.add(outbox::sql::scan_limit(req));
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
        constexpr int passed = outbox::sql::column::after_message;
        for (int pass = 0; pass < claim_passes; ++pass) {
          const std::size_t taken = batch.messages.size() + bad_seqs.size();
          const std::size_t want = req.limit - std::min(req.limit, taken);
          if (want == 0) break;
          detail::params p;
          p.add(detail::to_us(req.now)).add(static_cast<std::int64_t>(want)).add(after);
          p.add(types.str()).add(ids.str()).add(outbox::sql::scan_limit(req));
          auto r = detail::exec_prepared(c, "outbox_claim", p, "claim");
          bool held_back = false;
          for (int i = 0; i < r.rows(); ++i) {
            after = std::max(after, r.int64(i, outbox::sql::column::seq));
            if (r.text(i, passed) == "t") {
              take(r, i);
              continue;
            }
            held_back = true;
            const auto type = r.text(i, outbox::sql::column::aggregate_type);
            const auto id = r.text(i, outbox::sql::column::aggregate_id);
            if (blocked.emplace(type, id).second) {
              types.add_text(type);
              ids.add_text(id);
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
        bad.add(detail::to_us(req.now)).add(bad_causes.str());
        batch.unreadable =
            static_cast<std::size_t>(detail::exec(c, std::string(statements::dead_unreadable), bad,
                                                  "claim: dead-letter unreadable rows")
                                         .affected());
      }
      // Nothing held: end the claim transaction now (or commit its dead letters).
      if (locking && batch.messages.empty()) link_->end_empty_claim(c, batch.unreadable > 0);
      batch.sort_by_sequence();
      return batch;
    });
  }

  /// @param batch a batch this store claimed.
  /// @param fates one per message of `batch`, in its order (else `misconfigured`).
  /// @param now stamps published_at and dead_at (the relay's clock).
  settle_result settle(const claimed_batch& batch, std::span<const settlement> fates,
                       time_point now) {
    const auto plan = outbox::sql::settle_plan::of(batch, fates, "postgresql");
    return link_->run("settle", [&](PGconn* c) {
      const bool locking = options_.policy == claim_policy::locking;
      if (auto stale = stale_settle(batch, fates.size())) return *stale;
      detail::array_literal published, others, kinds, ats, errors, causes;
      for (const auto seq : plan.published) published.add(seq);
      for (const auto seq : plan.released) {
        others.add(seq);
        kinds.add(static_cast<int>(outbox::sql::fate_code::release));
        ats.add(0);
        errors.add_text({});
        causes.add_text({});
      }
      for (const auto& d : plan.deferred) {  // claimable at retry_at, never before (rounded up)
        others.add(d.seq);
        kinds.add(static_cast<int>(outbox::sql::fate_code::defer));
        ats.add(outbox::detail::to_unix_ceil<std::chrono::microseconds>(d.retry_at));
        errors.add_text(d.error);  // kept only by a row with no last error
        causes.add_text({});
      }
      for (const auto& f : plan.failed) {
        others.add(f.seq);
        kinds.add(static_cast<int>(f.code));
        ats.add(detail::to_us(f.retry_at));
        errors.add_text(f.error);
        causes.add_text(f.cause);
      }
      detail::params p;
      if (locking)
        p.add_null();  // no fence: the row locks
      else
        p.add(batch.token);
      p.add(detail::to_us(now))
          .add(published.str())
          .add(others.str())
          .add(kinds.str())
          .add(ats.str())
          .add(errors.str())
          .add(options_.retention == retention::delete_on_publish ? "t" : "f")
          .add(causes.str());
      auto r = detail::exec_prepared(c, "outbox_settle", p, "settle");
      settle_result out;
      out.published = static_cast<std::size_t>(r.int64(0, 0));
      out.retried = static_cast<std::size_t>(r.int64(0, 1));
      out.dead = static_cast<std::size_t>(r.int64(0, 2));
      out.released = static_cast<std::size_t>(r.int64(0, 3));
      if (locking) {
        link_->commit_claim(c);
        // Released rows are simply left alone: their locks go with the commit. Deferred ones
        // were given their time (counted above).
        out.released += plan.released.size();
      }
      return plan.finish(out);
    });
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
        PGconn* c = link_->connection();
        if (listening_on_ != link_->generation()) {
          detail::exec(c, "LISTEN outbox");
          listening_on_ = link_->generation();
        }
        if (drain_notifications(c)) return true;
        sock = PQsocket(c);
      } catch (const error&) {
        sock = -1;  // degrade to a plain sleep; the next claim reconnects
      }
    }
    const auto o = wake_.wait(sock, timeout);
    bool woken = o.interrupted;
    if (o.socket_ready) {
      PGconn* c = link_->current();
      if (c == nullptr || PQconsumeInput(c) == 0) {
        link_->mark_broken();  // the next claim reconnects
      } else {
        woken = drain_notifications(c) || woken;
      }
    }
    return woken;
  }

  /// Wakes a `wait_for_work` in progress (from any thread).
  void interrupt() noexcept { wake_.interrupt(); }

  // ---- inbox ----------------------------------------------------------------------------------

  /// Classifies an error of SOCI's postgresql backend (a handler's own statement) by its
  /// SQLSTATE: 40001 and 40P01 transient, 23505 duplicate, and so on (see `detail::classify`;
  /// `concepts::classifying_store`).
  [[nodiscard]] std::optional<errc> classify(const std::exception& e) const {
    if (const auto* p = dynamic_cast<const ::soci::postgresql_soci_error*>(&e))
      return detail::classify(p->sqlstate());
    return std::nullopt;
  }

  /// Records (`consumer`, `id`) in the open transaction: true the first time, false for a
  /// duplicate, which does not abort the transaction (`concepts::inbox_store`).
  bool record_delivery(std::string_view consumer, const uuid& id, time_point now) {
    return link_->run("record_delivery", [&](PGconn* c) {
      auto r = detail::exec_prepared(
          c, "outbox_inbox_insert",
          detail::params().add(consumer).add(id.to_string()).add(detail::to_us(now)),
          "record_delivery");
      return r.affected() == 1;
    });
  }

  /// Whether `consumer` recorded `id` (`concepts::inbox_lookup_store`).
  bool recorded(std::string_view consumer, const uuid& id) {
    return link_->run("recorded", [&](PGconn* c) {
      return detail::exec_prepared(c, "outbox_inbox_recorded",
                                   detail::params().add(consumer).add(id.to_string()), "recorded")
                 .rows() > 0;
    });
  }

  /// In a transaction of its own: keeps `m` and `why` in the inbox dead letters, and records
  /// (`consumer`, `m.id`) so that redeliveries are skipped.
  void dead_letter_delivery(std::string_view consumer, const message& m, std::string_view why,
                            time_point now) {
    link_->run("dead_letter_delivery", [&](PGconn* c) {
      link_->in_own_transaction(c, [&] {
        // What a peer delivered is kept whatever it is: the payload as bytes (exact, NUL bytes
        // included), the texts made storable.
        detail::exec(c, std::string(statements::inbox_dead),
                     detail::params()
                         .add(consumer)
                         .add(m.id.to_string())
                         .add(outbox::sql::storable_text(m.aggregate_type))
                         .add(outbox::sql::storable_text(m.aggregate_id))
                         .add(outbox::sql::storable_text(m.event_type))
                         .add_bytes(m.payload)
                         .add(outbox::sql::storable_headers(m.headers))
                         .add(outbox::sql::storable_text(why))
                         .add(detail::to_us(now))
                         .add(outbox::sql::storable_text(m.content_type)),
                     "dead_letter_delivery");
        detail::exec_prepared(
            c, "outbox_inbox_insert",
            detail::params().add(consumer).add(m.id.to_string()).add(detail::to_us(now)),
            "dead_letter_delivery");
      });
      return 0;
    });
  }

  // ---- operations -----------------------------------------------------------------------------

  /// Under *locking* a claim writes nothing (its row locks are the claim), so rows in flight
  /// count as pending and `in_flight` is 0; under *leasing* it counts rows under a live lease.
  backlog_stats stats(time_point now) {
    return link_->run("stats", [&](PGconn* c) {
      const auto t = detail::to_us(now);
      auto r = detail::exec(c, std::string(statements::stats), detail::params().add(t), "stats");
      return outbox::sql::read_backlog<std::micro>(detail::row{r, 0}, 0, t);
    });
  }

  /// When the next waiting row (a scheduled event, a retry) falls due, after `now`; nullopt when
  /// none waits (`concepts::due_telling_store`: an idle relay wakes then, not a poll later).
  std::optional<time_point> next_due(time_point now) {
    return link_->run("next_due", [&](PGconn* c) -> std::optional<time_point> {
      auto r = detail::exec(c, std::string(statements::next_due),
                            detail::params().add(detail::to_us(now)), "next_due");
      const std::int64_t us = r.int64(0, 0);
      if (us <= 0) return std::nullopt;
      return detail::from_us(us);
    });
  }

  /// The backlog per aggregate type, in one statement (`concepts::aggregate_stats_store`); what
  /// `stats` says of locking holds per type too.
  std::vector<aggregate_type_stats> stats_by_aggregate_type(time_point now) {
    return link_->run("stats_by_aggregate_type", [&](PGconn* c) {
      const auto t = detail::to_us(now);
      auto r = detail::exec(c, std::string(statements::stats_by_type), detail::params().add(t),
                            "stats_by_aggregate_type");
      std::vector<aggregate_type_stats> out;
      out.reserve(static_cast<std::size_t>(r.rows()));
      for (int i = 0; i < r.rows(); ++i) {
        const detail::row row{r, i};
        out.push_back({std::string(row.text(0)), outbox::sql::read_backlog<std::micro>(row, 1, t)});
      }
      return out;
    });
  }

  /// At most `limit` dead letters, oldest first.
  std::vector<dead_letter> dead_letters(std::size_t limit) {
    return link_->run("dead_letters", [&](PGconn* c) {
      auto r = detail::exec(c, std::string(statements::dead_letters),
                            detail::params().add(static_cast<std::int64_t>(limit)), "dead_letters");
      std::vector<dead_letter> out;
      for (int i = 0; i < r.rows(); ++i)
        out.push_back(outbox::sql::read_dead_letter(detail::row{r, i}));
      return out;
    });
  }

  /// Makes the dead letter `id` pending again, its attempts reset; false when `id` is not a
  /// dead letter.
  bool requeue(const uuid& id) {
    return link_->run("requeue", [&](PGconn* c) {
      return detail::exec(c, std::string(statements::requeue), detail::params().add(id.to_string()),
                          "requeue")
                 .affected() == 1;
    });
  }

  /// Deletes at most `limit` rows published before `before`, oldest first.
  /// @returns how many (call again while it returns `limit`).
  std::size_t purge_published(time_point before, std::size_t limit) {
    return purge("purge_published", statements::purge_published, before, limit);
  }

  /// Deletes at most `limit` inbox records processed before `before`, oldest first.
  /// @returns how many (call again while it returns `limit`).
  std::size_t purge_inbox(time_point before, std::size_t limit) {
    return purge("purge_inbox", statements::purge_inbox, before, limit);
  }

  /// At most `n` groups of dead letters by cause key, the largest first
  /// (`concepts::triage_store`).
  std::vector<dead_letter_group> dead_letter_groups(std::size_t n) {
    return link_->run("dead_letter_groups",
                      [&](PGconn* c) { return detail::dead_letter_groups(c, n); });
  }
  /// Requeues at most `n` dead letters of cause `key`, oldest first; how many.
  std::size_t requeue_group(const std::string& key, time_point now, std::size_t n) {
    return link_->run("requeue_group",
                      [&](PGconn* c) { return detail::requeue_group(c, key, now, n); });
  }
  /// Moves at most `n` dead letters matching `f`, oldest first, to the archive; how many.
  std::size_t discard(const dead_letter_filter& f, time_point now, std::size_t n) {
    return link_->run("discard", [&](PGconn* c) { return detail::discard(c, f, now, n); });
  }
  /// Deletes at most `n` archived dead letters archived before `before`, oldest first.
  std::size_t purge_archive(time_point before, std::size_t n) {
    return purge("purge_archive", statements::purge_archive, before, n);
  }
  /// What `replay(f, ...)` would send (`concepts::replay_store`).
  replay_estimate replay_count(const replay_filter& f) {
    return link_->run("replay_count", [&](PGconn* c) { return detail::replay_count(c, f); });
  }
  /// Makes at most `n` published events matching `f` pending again, oldest first; how many.
  std::size_t replay(const replay_filter& f, time_point now, std::size_t n) {
    return link_->run("replay", [&](PGconn* c) { return detail::replay(c, f, now, n); });
  }

  /// The statement the store prepares as its claim under `policy` (sql/postgresql/claim_*.sql).
  [[nodiscard]] static constexpr std::string_view claim_statement(claim_policy policy) noexcept {
    return policy == claim_policy::leasing ? statements::claim_leasing : statements::claim_locking;
  }
  /// The statement the store prepares as its settle (sql/postgresql/settle.sql: one for every
  /// policy and retention, told apart by its parameters).
  [[nodiscard]] static constexpr std::string_view settle_statement() noexcept {
    return statements::settle;
  }

 private:
  std::size_t purge(std::string_view what, std::string_view sql, time_point before,
                    std::size_t limit) {
    return link_->run(what, [&](PGconn* c) {
      return static_cast<std::size_t>(
          detail::exec(
              c, std::string(sql),
              detail::params().add(detail::to_us(before)).add(static_cast<std::int64_t>(limit)),
              what)
              .affected());
    });
  }

  /// Statements a locking claim may run to get past aggregates held by other relays.
  static constexpr int claim_passes = 4;

  static bool drain_notifications(PGconn* c) {
    bool any = false;
    while (PGnotify* n = PQnotifies(c)) {
      any = true;
      PQfreemem(n);
    }
    return any;
  }

  /// The options with `store_default` resolved to locking, checked.
  static store_options resolved(store_options o) {
    if (o.policy == claim_policy::store_default) o.policy = claim_policy::locking;
    // PostgreSQL takes 1 ms .. INT_MAX ms (0 would mean "never": a stalled relay kept forever).
    const auto idle = o.idle_in_transaction_timeout.count();
    if (idle < 1 || idle > std::numeric_limits<int>::max())
      throw error(errc::misconfigured, "postgresql", {},
                  "store_options.idle_in_transaction_timeout must be 1 ms .. 2^31-1 ms, got " +
                      std::to_string(idle) + " ms");
    return o;
  }

  detail::wakeup wake_;
  std::uint64_t listening_on_ = 0;  // the link generation LISTEN ran on (0: none)
};

static_assert(outbox::sql::server_store_concepts<store>);
static_assert(concepts::committing_store<store> && concepts::committing_store<appender>);
static_assert(concepts::triage_store<store> && concepts::replay_store<store>);

}  // namespace outbox::postgresql
