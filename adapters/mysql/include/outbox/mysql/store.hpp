#pragma once
/// @file
/// The MySQL store: outbox, inbox and dead letters in MySQL 8.0+ or MariaDB 10.6+ (InnoDB), over
/// SOCI sessions of the mysql backend.
///
/// Two claim policies (DESIGN.md):
/// - *locking* (default): `claim` opens a transaction and locks the batch with
///   `FOR UPDATE SKIP LOCKED`; `settle` updates (or deletes) and commits in the same transaction.
///   The row locks are the lease and the session is the fence: a dead relay's transaction is
///   rolled back by the server. MariaDB's `idle_transaction_timeout` (MySQL: `wait_timeout`)
///   cuts a stalled relay off.
/// - *leasing*: `claim` locks the same way and stamps owner, expiry and a fencing token in one
///   short transaction; the batch is published with no transaction open; `settle` touches only
///   rows still held under that token.
///
/// Layout (docs/writing-an-adapter.md, "Store kit"): the SQL is in sql/mysql/ (embedded as
/// `schema.hpp`), the connection layer in `detail/connection.hpp` and `detail/link.hpp`, what every
/// store shares in `include/outbox/sql/`; this file maps the store concepts onto those
/// statements.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
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
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <outbox/concepts/store.hpp>
#include <outbox/concepts/triage.hpp>
#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/mysql/appender.hpp>
#include <outbox/mysql/detail/connection.hpp>
#include <outbox/mysql/detail/link.hpp>
#include <outbox/mysql/detail/migration.hpp>
#include <outbox/mysql/detail/queries.hpp>
#include <outbox/mysql/detail/triage.hpp>
#include <outbox/mysql/schema.hpp>
#include <outbox/sql/backend.hpp>
#include <outbox/sql/migrate.hpp>
#include <outbox/sql/row.hpp>
#include <outbox/sql/server_store.hpp>
#include <outbox/sql/settle.hpp>
#include <outbox/sql/statements.hpp>
#include <outbox/store_options.hpp>
#include <outbox/validate.hpp>

namespace outbox::mysql {

/// The MySQL store. A view over one `soci::session` (the relay's or the consumer's own
/// connection, used by one thread); the writer's `append` runs on whatever session the
/// application passes it. The session must outlive the store.
///
/// Per-aggregate order: a row is claimed only if the pending row before it in its aggregate is
/// claimed by the same claim (or there is none), so a later event never overtakes one that is in
/// flight under another relay, locked, or waiting for a retry. Dead letters do not hold their
/// aggregate back.
///
/// Connection loss (2006, 2013, a `KILL`) throws `transient`; the next call reconnects the
/// session (SOCI `reconnect`) and sets it up again.
class store : public outbox::sql::server_store<detail::dialect, store> {
 public:
  /// What the writer needs: an append on the application's session, nothing else.
  using appender = mysql::appender;

  /// The session set-up of a store's session: utf8mb4, READ COMMITTED, the lock wait, no
  /// silent reconnects. Done by the store on each connection it makes when
  /// `store_options::configure_session`; call it yourself otherwise.
  /// @throws outbox::error `misconfigured` for a session of another backend.
  static void configure(session_type& sql, const session_options& o = {}) {
    detail::configure_connection(sql, detail::handle(sql), o);
  }

  /// The inbox's consumer column is VARCHAR(255) (`concepts::consumer_name_limited_store`): a
  /// longer name fails under a strict sql_mode (1406) and is cut without one.
  static constexpr name_limit consumer_name_limit{detail::max_name_characters, true};

  /// The SOCI backend of the store's sessions: `soci::session sql(Store::soci_backend, ...)`.
  static constexpr const char* soci_backend = "mysql";
  /// Opens `sql`, a session not yet open, with the store's SOCI backend on `connect_string`:
  /// `soci::session::open`, its failure classified as the store's statements' are.
  /// @throws outbox::error `transient` for a server away (2002, 2003), `misconfigured` for a
  ///         refused login (1045) or database (1044, 1049).
  static void connect(session_type& sql, const std::string& connect_string) {
    outbox::sql::open_session(sql, soci_backend, connect_string, detail::connect_error);
  }
  /// The schema version this library migrates to (the number of migration files).
  static constexpr int schema_version = static_cast<int>(std::size(migrations));

  /// Checks the server (MySQL 8.0+, MariaDB 10.6+, no Galera, not TiDB: `misconfigured`
  /// otherwise), then applies the migrations of `sql/mysql/` the database does not have yet (up
  /// to `target`), under a named lock (`outbox::sql::run_migrations`). Safe from several
  /// processes at once.
  /// @returns the schema version after the call.
  static int migrate(session_type& sql, int target = outbox::sql::latest_version) {
    detail::migration_host host(sql);
    return outbox::sql::run_migrations(host, migrations, "mysql", target);
  }

  /// @param sql the store's own connection (mysql backend); it must outlive the store. Not
  ///            migrated here: call `migrate` once. `claim_policy::store_default` is locking.
  /// @param options the store options.
  /// @throws outbox::error `misconfigured` for an `idle_in_transaction_timeout` outside
  ///         1 ms .. 1 year.
  explicit store(session_type& sql, store_options options = {})
      : server_store(sql, resolved(std::move(options)), [](const store_options& o) {
          return detail::dialect{.setup = {.configure = o.configure_session,
                                           .session = o.session,
                                           .idle = o.idle_in_transaction_timeout,
                                           .locking = o.policy == claim_policy::locking},
                                 .schema_version = schema_version};
        }) {}

  /// The server's id of the store's connection (`KILL <id>`; for operators and fault tests).
  [[nodiscard]] unsigned long connection_id() { return mysql_thread_id(link_->connection()); }
  /// Statements run again by the store after a deadlock (1213) or lock wait timeout (1205):
  /// claims (rolled back, nothing written), leasing settles and purges (by primary key, safe to
  /// repeat).
  [[nodiscard]] std::uint64_t lock_conflicts_retried() const noexcept { return retried_; }

  // ---- appending ------------------------------------------------------------------------------

  /// `appender::append`.
  void append(session_type& sql, std::span<const outgoing> rows) { appender{}.append(sql, rows); }

  // ---- claiming -------------------------------------------------------------------------------

  /// A claim chosen as a deadlock victim (1213) or timed out on a lock (1205) is run again, up
  /// to 3 times in all (counted in `lock_conflicts_retried`): its transaction is rolled back and
  /// it wrote nothing, so running it again is harmless (MariaDB reports the SKIP LOCKED read
  /// itself as a victim under concurrent writers and purges).
  claimed_batch claim(const claim_request& req) {
    return retrying(true, [&] { return claim_once(req); });
  }

 private:
  claimed_batch claim_once(const claim_request& req) {
    return link_->run("claim", [&](MYSQL* c) {
      link_->drop_open_claim(c);  // neither settled nor released
      auto& sql = link_->session();
      claimed_batch batch;
      batch.token = next_token();
      batch.lease_until = req.now + req.lease;
      const bool locking = options_.policy == claim_policy::locking;
      // Both policies claim in a transaction: the locking read keeps other relays off the rows
      // while the per-aggregate check runs; leasing then stamps them and commits at once.
      link_->begin_claim(batch.token);
      detail::exec(c, "START TRANSACTION", "claim");
      std::unordered_set<std::int64_t> taken;        // seqs this claim takes (readable or not)
      nlohmann::json bad = nlohmann::json::array();  // rows that cannot be read, and why
      std::set<std::pair<std::string, std::string>> blocked_set;
      std::string blocked;  // the aggregates left out, as claim.sql reads them
      long long after = 0;
      const long long now = detail::to_us(req.now);
      long long bound = std::numeric_limits<long long>::max();
      if (const std::int64_t scan = outbox::sql::scan_limit(req); scan > 0) {
        long long skip = scan - 1;
        long long seq = 0;
        ::soci::indicator ind = ::soci::i_null;
        sql << std::string(statements::claim_scan_bound), ::soci::use(now, "now"),
            ::soci::use(skip, "skip"), ::soci::into(seq, ind);
        if (sql.got_data() && ind == ::soci::i_ok) bound = seq;
      }
      // Another relay's open batch is invisible to the WHERE (its rows are locked, not stamped),
      // so rows behind its rows of an aggregate pass, fill the LIMIT, and are dropped by the
      // per-aggregate check; the same for a long run of rows behind a row waiting for a retry.
      // Then claim again after the last row seen, leaving those aggregates out, so the rest is
      // reached (at most `detail::claim_passes` statements; almost every claim is one).
      for (int pass = 0; pass < detail::claim_passes; ++pass) {
        const std::size_t have = batch.messages.size() + bad.size();
        const std::size_t want = req.limit - std::min(req.limit, have);
        if (want == 0) break;
        long long limit = static_cast<long long>(std::min<std::size_t>(want, 1u << 30));
        detail::message_rows rows;
        {
          ::soci::statement st(sql);
          detail::message_rows chunk;
          chunk.into(st);
          st.exchange(::soci::use(after, "after"));
          st.exchange(::soci::use(bound, "bound"));
          st.exchange(::soci::use(now, "now"));
          st.exchange(::soci::use(blocked, "blocked"));
          st.exchange(::soci::use(limit, "limit"));
          st.alloc();
          st.prepare(std::string(statements::claim));
          st.define_and_bind();
          const std::size_t fetch = std::min<std::size_t>(want, 1000);
          chunk.resize(fetch);
          bool got = st.execute(true);
          while (got) {
            detail::append_rows(rows, chunk);
            chunk.resize(fetch);
            got = st.fetch();
          }
        }
        if (rows.size() == 0) break;
        const auto prev = detail::previous_rows(sql, rows.seq);
        bool held_back = false;
        for (std::size_t i = 0; i < rows.size(); ++i) {
          const std::int64_t seq = rows.seq[i];
          after = std::max<long long>(after, seq);
          const auto p = prev.find(seq);
          if (p != prev.end() && (p->second == 0 || taken.count(p->second) > 0)) {
            taken.insert(seq);
            std::string why;
            message m = outbox::sql::read_message(detail::row{rows, i}, why);
            if (why.empty())
              batch.messages.push_back(std::move(m));
            else
              bad.push_back({{"s", seq},
                             {"e", outbox::sql::storable_text("unreadable row: " + why)},
                             {"c", cause_key("unreadable", why)}});
            continue;
          }
          held_back = true;
          if (blocked_set.emplace(rows.aggregate_type[i], rows.aggregate_id[i]).second) {
            blocked += ',';
            detail::append_hex(blocked, rows.aggregate_type[i]);
            blocked += ':';
            detail::append_hex(blocked, rows.aggregate_id[i]);
            blocked += ',';
          }
        }
        if (!held_back || rows.size() < want) break;
      }
      if (!bad.empty()) {
        // A row that cannot be read (written by another program) is dead-lettered with the
        // reason, in the claim's transaction; the rest of the batch flows.
        std::string list = bad.dump();
        batch.unreadable = static_cast<std::size_t>(detail::execute(
            sql, statements::dead_unreadable, ::soci::use(now, "now"), ::soci::use(list, "rows")));
      }
      if (!locking) {
        if (!batch.messages.empty()) {
          std::vector<std::int64_t> seqs;
          seqs.reserve(batch.messages.size());
          for (const auto& m : batch.messages) seqs.push_back(m.sequence);
          std::sort(seqs.begin(), seqs.end());
          long long until = detail::to_us(batch.lease_until);
          long long token = batch.token;
          std::string owner(req.owner);
          for (std::size_t off = 0; off < seqs.size(); off += detail::settle_chunk) {
            std::string list = detail::json_seqs(std::vector<std::int64_t>(
                seqs.begin() + static_cast<std::ptrdiff_t>(off),
                seqs.begin() + static_cast<std::ptrdiff_t>(
                                   std::min(seqs.size(), off + detail::settle_chunk))));
            detail::execute(sql, statements::claim_stamp, ::soci::use(until, "until"),
                            ::soci::use(owner, "owner"), ::soci::use(token, "token"),
                            ::soci::use(list, "seqs"));
          }
        }
        link_->commit_claim(c);
      } else if (batch.messages.empty()) {
        // Nothing held: end the claim transaction now (or commit its dead letters).
        link_->end_empty_claim(c, batch.unreadable > 0);
      }
      batch.sort_by_sequence();
      return batch;
    });
  }

 public:
  /// @param batch a batch this store claimed.
  /// @param fates one per message of `batch`, in its order (else `misconfigured`).
  /// @param now stamps published_at and dead_at (the relay's clock).
  settle_result settle(const claimed_batch& batch, std::span<const settlement> fates,
                       time_point now) {
    const auto plan = outbox::sql::settle_plan::of(batch, fates, "mysql");
    return link_->run("settle", [&](MYSQL* c) {
      const bool locking = options_.policy == claim_policy::locking;
      if (auto stale = stale_settle(batch, fates.size())) return *stale;
      auto& sql = link_->session();
      long long now_us = detail::to_us(now);
      long long token = batch.token;
      int lock = locking ? 1 : 0;
      settle_result out;
      // By primary key, in seq order, at most detail::settle_chunk rows per statement.
      std::vector<std::int64_t> published = plan.published;
      std::sort(published.begin(), published.end());
      detail::for_chunks(published, [&](std::string& list) {
        out.published += static_cast<std::size_t>(retrying(!locking, [&] {
          return options_.retention == retention::delete_on_publish
                     ? detail::execute(sql, statements::settle_published_delete,
                                       ::soci::use(list, "seqs"), ::soci::use(lock, "locking"),
                                       ::soci::use(token, "token"))
                     : detail::execute(sql, statements::settle_published_keep,
                                       ::soci::use(now_us, "now"), ::soci::use(list, "seqs"),
                                       ::soci::use(lock, "locking"), ::soci::use(token, "token"));
        }));
      });
      for (const auto code : {outbox::sql::fate_code::retry, outbox::sql::fate_code::dead}) {
        int dead = code == outbox::sql::fate_code::dead ? 1 : 0;
        for (auto& text : detail::fate_lists(plan, code))
          (dead ? out.dead : out.retried) += static_cast<std::size_t>(retrying(!locking, [&] {
            return detail::execute(sql, statements::settle_failed, ::soci::use(dead, "dead"),
                                   ::soci::use(dead, "dead2"), ::soci::use(lock, "locking"),
                                   ::soci::use(now_us, "now"), ::soci::use(text, "fates"),
                                   ::soci::use(token, "token"));
          }));
      }
      // Deferred (claimable at retry_at); under locking in the claim transaction, before its
      // commit.
      for (auto& text : detail::fate_lists(plan, outbox::sql::fate_code::defer))
        out.released += static_cast<std::size_t>(retrying(!locking, [&] {
          return detail::execute(sql, statements::settle_defer, ::soci::use(lock, "locking"),
                                 ::soci::use(lock, "locking2"), ::soci::use(text, "fates"),
                                 ::soci::use(token, "token"));
        }));
      if (locking) {
        link_->commit_claim(c);
        // Released rows are simply left alone: their locks go with the commit.
        out.released += plan.released.size();
      } else {
        std::vector<std::int64_t> released = plan.released;
        std::sort(released.begin(), released.end());
        detail::for_chunks(released, [&](std::string& list) {
          out.released += static_cast<std::size_t>(retrying(true, [&] {
            return detail::execute(sql, statements::settle_release, ::soci::use(list, "seqs"),
                                   ::soci::use(token, "token"));
          }));
        });
      }
      return plan.finish(out);
    });
  }

  // ---- inbox ----------------------------------------------------------------------------------

  /// Classifies an error of SOCI's mysql backend (a handler's own statement) by its error
  /// number: 1213 and 1205 transient, 1062 duplicate, and so on (`detail::classify`).
  [[nodiscard]] std::optional<errc> classify(const std::exception& e) const {
    if (const auto* m = dynamic_cast<const ::soci::mysql_soci_error*>(&e))
      return detail::classify(m->err_num_);
    return std::nullopt;
  }

  /// Records (`consumer`, `id`) in the open transaction: true the first time, false for a
  /// duplicate, which rolls back only its own statement (`concepts::inbox_store`).
  bool record_delivery(std::string_view consumer, const uuid& id, time_point now) {
    return link_->run("record_delivery", [&](MYSQL*) {
      std::string name(consumer), event = id.to_string();
      long long at = detail::to_us(now);
      try {
        detail::translated("record_delivery", [&] {
          detail::execute(link_->session(), statements::inbox_insert, ::soci::use(name, "consumer"),
                          ::soci::use(event, "event_id"), ::soci::use(at, "processed_at"));
        });
      } catch (const error& e) {
        // Only the statement is rolled back: the handler's transaction goes on.
        if (e.kind() == errc::duplicate) return false;
        throw;
      }
      return true;
    });
  }

  /// Whether `consumer` recorded `id` (`concepts::inbox_lookup_store`).
  bool recorded(std::string_view consumer, const uuid& id) {
    return link_->run("recorded", [&](MYSQL*) {
      auto& sql = link_->session();
      std::string name(consumer), event = id.to_string();
      int one = 0;
      ::soci::indicator ind = ::soci::i_null;
      sql << std::string(statements::inbox_recorded), ::soci::use(name, "consumer"),
          ::soci::use(event, "event_id"), ::soci::into(one, ind);
      return sql.got_data() && ind == ::soci::i_ok;
    });
  }

  /// In a transaction of its own: keeps `m` and `why` in the inbox dead letters, and records
  /// (`consumer`, `m.id`) so that redeliveries are skipped.
  void dead_letter_delivery(std::string_view consumer, const message& m, std::string_view why,
                            time_point now) {
    link_->run("dead_letter_delivery", [&](MYSQL* c) {
      auto& sql = link_->session();
      std::string name(consumer), event = m.id.to_string();
      std::string type = outbox::sql::storable_text(m.aggregate_type);
      std::string agg = outbox::sql::storable_text(m.aggregate_id);
      std::string etype = outbox::sql::storable_text(m.event_type);
      std::string headers = outbox::sql::storable_headers(m.headers);
      std::string reason = outbox::sql::storable_text(why);
      std::string ctype = outbox::sql::storable_text(m.content_type);
      long long at = detail::to_us(now);
      link_->in_own_transaction(c, [&] {
        detail::translated("dead_letter_delivery", [&] {
          detail::execute(sql, statements::inbox_dead, ::soci::use(name, "consumer"),
                          ::soci::use(event, "event_id"), ::soci::use(type, "aggregate_type"),
                          ::soci::use(agg, "aggregate_id"), ::soci::use(etype, "event_type"),
                          ::soci::use(m.payload, "payload"), ::soci::use(headers, "headers"),
                          ::soci::use(reason, "error"), ::soci::use(at, "failed_at"),
                          ::soci::use(ctype, "content_type"));
        });
        try {
          detail::translated("dead_letter_delivery", [&] {
            detail::execute(sql, statements::inbox_insert, ::soci::use(name, "consumer"),
                            ::soci::use(event, "event_id"), ::soci::use(at, "processed_at"));
          });
        } catch (const error& e) {
          if (e.kind() != errc::duplicate) throw;  // already recorded: skipped either way
        }
      });
      return 0;
    });
  }

  // ---- operations -----------------------------------------------------------------------------

  /// Under *locking* a claim writes nothing (its row locks are the claim), so rows in flight
  /// count as pending and `in_flight` is 0; under *leasing* it counts rows under a live lease.
  backlog_stats stats(time_point now) {
    return link_->run("stats", [&](MYSQL*) {
      const auto rows =
          detail::count_backlog(link_->session(), statements::stats, false, detail::to_us(now));
      return rows.empty() ? backlog_stats{} : rows.front().stats;  // one row: no GROUP BY
    });
  }

  /// When the next waiting row (a scheduled event, a retry) falls due, after `now`; nullopt when
  /// none waits (`concepts::due_telling_store`: an idle relay wakes then, not a poll later).
  std::optional<time_point> next_due(time_point now) {
    return link_->run("next_due", [&](MYSQL*) -> std::optional<time_point> {
      long long at = detail::to_us(now), us = 0;
      detail::translated("next_due", [&] {
        link_->session() << std::string(statements::next_due), ::soci::use(at, "now"),
            ::soci::into(us);
      });
      if (us <= 0) return std::nullopt;
      return detail::from_us(us);
    });
  }

  /// The backlog per aggregate type, in one statement (`concepts::aggregate_stats_store`); what
  /// `stats` says of locking holds per type too.
  std::vector<aggregate_type_stats> stats_by_aggregate_type(time_point now) {
    return link_->run("stats_by_aggregate_type", [&](MYSQL*) {
      return detail::count_backlog(link_->session(), statements::stats_by_type, true,
                                   detail::to_us(now));
    });
  }

  /// At most `limit` dead letters, oldest first.
  std::vector<dead_letter> dead_letters(std::size_t limit) {
    return link_->run("dead_letters",
                      [&](MYSQL*) { return detail::read_dead_letters(link_->session(), limit); });
  }

  /// Makes the dead letter `id` pending again, its attempts reset; false when `id` is not a
  /// dead letter.
  bool requeue(const uuid& id) {
    return link_->run("requeue", [&](MYSQL*) {
      std::string event = id.to_string();
      return detail::execute(link_->session(), statements::requeue,
                             ::soci::use(event, "event_id")) == 1;
    });
  }

  /// At most `n` groups of dead letters by cause key, the largest first
  /// (`concepts::triage_store`).
  std::vector<dead_letter_group> dead_letter_groups(std::size_t n) {
    return link_->run("dead_letter_groups",
                      [&](MYSQL*) { return detail::dead_letter_groups(link_->session(), n); });
  }
  /// Requeues at most `n` dead letters of cause `key`, oldest first; how many.
  std::size_t requeue_group(const std::string& key, time_point now, std::size_t n) {
    return link_->run("requeue_group", [&](MYSQL* c) {
      return retrying(true,
                      [&] { return detail::requeue_group(link_->session(), c, key, now, n); });
    });
  }
  /// Moves at most `n` dead letters matching `f`, oldest first, to the archive; how many.
  std::size_t discard(const dead_letter_filter& f, time_point now, std::size_t n) {
    return link_->run("discard", [&](MYSQL* c) {
      return retrying(true, [&] { return detail::discard(link_->session(), c, f, now, n); });
    });
  }
  /// Deletes at most `n` archived dead letters archived before `before`, oldest first.
  std::size_t purge_archive(time_point before, std::size_t n) {
    return link_->run("purge_archive", [&](MYSQL*) {
      long long at = detail::to_us(before);
      long long limit = static_cast<long long>(std::min<std::size_t>(n, 1u << 30));
      return static_cast<std::size_t>(retrying(true, [&] {
        return detail::execute(link_->session(), statements::purge_archive,
                               ::soci::use(at, "before"), ::soci::use(limit, "limit"));
      }));
    });
  }
  /// What `replay(f, ...)` would send (`concepts::replay_store`).
  replay_estimate replay_count(const replay_filter& f) {
    return link_->run("replay_count",
                      [&](MYSQL*) { return detail::replay_count(link_->session(), f); });
  }
  /// Makes at most `n` published events matching `f` pending again, oldest first; how many.
  std::size_t replay(const replay_filter& f, time_point now, std::size_t n) {
    return link_->run("replay", [&](MYSQL*) {
      return retrying(true, [&] { return detail::replay(link_->session(), f, now, n); });
    });
  }

  /// The most published rows `purge_published` chooses with one statement.
  static constexpr std::size_t purge_select_limit = 100'000;

  /// Chooses the rows with a plain read, then deletes them by primary key in seq order (see
  /// sql/mysql/purge_published.sql), repeating a statement after a lock conflict.
  std::size_t purge_published(time_point before, std::size_t limit) {
    return link_->run("purge_published", [&](MYSQL*) {
      auto& sql = link_->session();
      long long at = detail::to_us(before);
      // Chosen `purge_select_limit` rows at a time (a vector of seqs in memory), until `limit`
      // are deleted or a choice comes back short: the caller's loop ends only when it returns
      // less than `limit`.
      std::size_t deleted = 0;
      while (deleted < limit) {
        std::vector<long long> chosen(std::min(limit - deleted, purge_select_limit));
        const auto wanted = chosen.size();
        long long n = static_cast<long long>(wanted);
        sql << std::string(statements::purge_published_select), ::soci::use(at, "before"),
            ::soci::use(n, "limit"), ::soci::into(chosen);
        std::vector<std::int64_t> seqs(chosen.begin(), chosen.end());
        std::size_t round = 0;
        detail::for_chunks(seqs, [&](std::string& list) {
          round += static_cast<std::size_t>(retrying(true, [&] {
            return detail::execute(sql, statements::purge_published, ::soci::use(list, "seqs"),
                                   ::soci::use(at, "before"));
          }));
        });
        deleted += round;
        // Fewer chosen: no more rows old enough. None deleted: all changed since (requeued).
        if (chosen.size() < wanted || round == 0) break;
      }
      return deleted;
    });
  }

  /// Deletes at most `limit` inbox records processed before `before`, oldest first.
  /// @returns how many (call again while it returns `limit`).
  std::size_t purge_inbox(time_point before, std::size_t limit) {
    return link_->run("purge_inbox", [&](MYSQL*) {
      long long at = detail::to_us(before);
      long long n = static_cast<long long>(std::min<std::size_t>(limit, 1u << 30));
      return static_cast<std::size_t>(retrying(true, [&] {
        return detail::execute(link_->session(), statements::purge_inbox, ::soci::use(at, "before"),
                               ::soci::use(n, "limit"));
      }));
    });
  }

 private:
  /// Runs `f` and, when `may_retry`, runs it again (up to 3 times) after a deadlock or lock wait
  /// timeout: for statements on their own (autocommit), by primary key, whose repetition is
  /// harmless. Inside a locking claim a deadlock has rolled back the whole transaction: not
  /// retried there (the batch is claimable again).
  template <class F>
  std::invoke_result_t<F&> retrying(bool may_retry, F&& f) {
    for (int attempt = 1;; ++attempt) {
      try {
        return detail::translated("statement", f);
      } catch (const error& e) {
        if (!may_retry || attempt == 3 || !detail::lock_conflict(detail::native_number(e))) throw;
        ++retried_;
      }
    }
  }

  /// The options with `store_default` resolved to locking, checked.
  static store_options resolved(store_options o) {
    if (o.policy == claim_policy::store_default) o.policy = claim_policy::locking;
    const auto idle = o.idle_in_transaction_timeout.count();
    if (idle < 1 || idle > 31'536'000'000)  // MariaDB's limit: a year
      throw error(errc::misconfigured, "mysql", {},
                  "store_options.idle_in_transaction_timeout must be 1 ms .. 1 year, got " +
                      std::to_string(idle) + " ms");
    return o;
  }

  std::uint64_t retried_ = 0;
};

static_assert(outbox::sql::server_store_concepts<store>);
static_assert(concepts::triage_store<store> && concepts::replay_store<store>);

}  // namespace outbox::mysql
