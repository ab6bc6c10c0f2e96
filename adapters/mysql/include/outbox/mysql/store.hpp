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
/// store shares in `include/outbox/store/`; this file maps the store concepts onto those
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
#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/mysql/detail/connection.hpp>
#include <outbox/mysql/detail/link.hpp>
#include <outbox/mysql/schema.hpp>
#include <outbox/store/migrate.hpp>
#include <outbox/store/options.hpp>
#include <outbox/store/row.hpp>
#include <outbox/store/settle.hpp>
#include <outbox/store/statements.hpp>
#include <outbox/validate.hpp>

namespace outbox::mysql {

using outbox::claim_policy;
using outbox::retention;
using outbox::store_options;

namespace detail {

/// Runs a prepared-by-SOCI statement with the given use/into elements and returns the rows it
/// changed (matched: SOCI connects with CLIENT_FOUND_ROWS).
template <class... Elements>
long long execute(::soci::session& sql, std::string_view text, Elements&&... elements) {
  ::soci::statement st = ((sql.prepare << std::string(text)), ..., elements);
  st.execute(true);
  return st.get_affected_rows();
}

/// The session's max_allowed_packet: past it the server drops the connection (2006), and the
/// caller's transaction with it. One round trip; the value is fixed when the session connects.
[[nodiscard]] inline std::size_t max_allowed_packet(::soci::session& sql) {
  long long bytes = 0;
  translated("append: max_allowed_packet",
             [&] { sql << std::string(statements::max_allowed_packet), ::soci::into(bytes); });
  return bytes > 0 ? static_cast<std::size_t>(bytes) : 0;
}

/// The migration runner's host. MySQL commits DDL implicitly, so a migration is not one
/// transaction: a named lock keeps migrations apart, each file's statements run one by one
/// (each may run again after a failure half-way: IF NOT EXISTS), and the version is recorded
/// after the file.
class migration_host {
 public:
  explicit migration_host(::soci::session& sql) : sql_(sql), c_(handle(sql)) {}
  void begin_exclusive() {
    if (in_transaction(c_, "migrate"))
      throw error(errc::misconfigured, "mysql", {},
                  "migrate: the session is in a transaction; call migrate outside one (MySQL "
                  "commits DDL implicitly, so it would commit the caller's work)");
    std::string version, wsrep;
    translated("migrate: server version", [&] {
      sql_ << std::string(statements::server_version), ::soci::into(version), ::soci::into(wsrep);
    });
    require_supported_server(version, wsrep);
    long long got = 0;
    translated("migrate: lock",
               [&] { sql_ << std::string(statements::migrations_lock), ::soci::into(got); });
    if (got != 1)
      throw error(errc::transient, "mysql", {},
                  "migrate: another migration held the lock for 60 s; try again");
    locked_ = true;
  }
  std::vector<int> applied() {
    return translated("migrate", [&] {
      std::vector<int> out;
      long long exists = 0;
      sql_ << std::string(statements::migrations_table_exists), ::soci::into(exists);
      if (exists == 0) return out;
      ::soci::rowset<int> rs = (sql_.prepare << std::string(statements::migrations_applied));
      for (const int v : rs) out.push_back(v);
      return out;
    });
  }
  void apply(const migration& m) {
    for (const auto& s : split_statements(m.sql)) exec(c_, s, "migrate: " + std::string(m.name));
  }
  void record(const migration& m) {
    int version = m.version;
    std::string name(m.name);
    translated("migrate: record", [&] {
      execute(sql_, statements::migrations_record, ::soci::use(version, "version"),
              ::soci::use(name, "name"));
    });
  }
  void commit() { unlock(); }
  void rollback() noexcept {
    try {
      unlock();
    } catch (...) {
    }
  }

 private:
  void unlock() {
    if (!locked_) return;
    locked_ = false;
    long long released = 0;
    translated("migrate: unlock",
               [&] { sql_ << std::string(statements::migrations_unlock), ::soci::into(released); });
  }

  ::soci::session& sql_;
  MYSQL* c_;
  bool locked_ = false;
};

}  // namespace detail

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
class store {
 public:
  /// The connection type: a SOCI session with the mysql backend.
  using session_type = ::soci::session;

  /// A transaction on the store's session, bound to the connection that began it.
  using transaction = detail::link::transaction;

  /// What the writer needs: an append on the application's session, nothing else.
  class appender {
   public:
    using session_type = ::soci::session;  ///< The connection type of the application.
    /// Inserts `rows` on `sql` inside the caller's open transaction: one multi-row INSERT per
    /// 500 rows, every value bound, payloads as bytes. A statement is sized as it is sent
    /// (values quoted and escaped: a binary payload may take twice its bytes): at most 4 MiB,
    /// or one row alone, and never past the session's max_allowed_packet, which is read (one
    /// round trip) when the rows take more than 1 MiB as sent.
    /// @throws outbox::error `misconfigured` when the session's character set is not utf8mb4
    ///         (the text would be stored converted, not as written: utf8mb3 turns a 4-byte
    ///         character into '?' where sql_mode is not strict), or when its sql_mode has
    ///         NO_BACKSLASH_ESCAPES and a payload holds a NUL byte (SOCI cuts its text at a
    ///         NUL, which only backslash escaping keeps out of it); `invalid_input` for a text
    ///         longer than its column (writer limits raised past them: a session whose sql_mode
    ///         is not strict would store it cut), or for a row that alone takes more than
    ///         the session's max_allowed_packet as sent (the server would drop the connection,
    ///         and the transaction with it); nothing is sent then.
    void append(session_type& sql, std::span<const outgoing> rows) {
      MYSQL* c = detail::handle(sql);
      const std::string_view charset = mysql_character_set_name(c);
      if (charset != "utf8mb4")
        throw error(errc::misconfigured, "mysql", {},
                    "append: the session's character set is " + std::string(charset) +
                        "; connect with charset=utf8mb4 (outbox text is UTF-8, up to 4 bytes a "
                        "character)");
      const bool no_backslash_escapes =
          (c->server_status & SERVER_STATUS_NO_BACKSLASH_ESCAPES) != 0;
      for (const outgoing& r : rows) {
        detail::check_fits("aggregate_type", r.source->aggregate_type);
        detail::check_fits("aggregate_id", r.source->aggregate_id);
        detail::check_fits("event_type", r.source->event_type);
        if (r.headers_json.size() > detail::max_headers_bytes)
          throw_invalid("headers", "take " + std::to_string(r.headers_json.size()) +
                                       " bytes as JSON, the column holds " +
                                       std::to_string(detail::max_headers_bytes));
        if (no_backslash_escapes && r.source->payload.find('\0') != std::string::npos)
          throw error(errc::misconfigured, "mysql", {},
                      "append: the session's sql_mode has NO_BACKSLASH_ESCAPES, under which a "
                      "payload with a NUL byte cannot be sent; remove it from the session's "
                      "sql_mode");
      }
      constexpr int per_row = 8;
      constexpr std::size_t max_rows = 500;
      // The statement text without values: `head` once, then `tuple` (",(...)") per row.
      static const std::size_t one_row =
          outbox::store::multi_row_insert(statements::append, 1, per_row).size();
      static const std::size_t tuple =
          outbox::store::multi_row_insert(statements::append, 2, per_row).size() - one_row;
      const std::size_t head = one_row - tuple;
      // Each row's bytes as sent: its tuple and its values, quoted and escaped (the number is at
      // most 20 digits); the statement is `head` plus its rows'.
      std::vector<std::size_t> sizes(rows.size());
      std::size_t total = head, largest = 0;
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const outgoing& r = rows[i];
        const event& e = *r.source;
        sizes[i] = tuple + 36 + 2 + 20 + detail::sent_size(e.aggregate_type) +
                   detail::sent_size(e.aggregate_id) + detail::sent_size(e.event_type) +
                   detail::sent_size(e.payload) + detail::sent_size(r.headers_json) +
                   detail::sent_size(e.content_type);
        total += sizes[i];
        largest = std::max(largest, sizes[i]);
      }
      // Under 1 MiB the server's limit is not asked (no server default is below it); above,
      // every row must fit it alone, checked before anything is sent, so a refusal leaves the
      // caller's transaction as it was. The command byte and a margin come off the limit.
      std::size_t max_bytes = std::size_t{4} << 20;
      if (total > (std::size_t{1} << 20)) {
        const std::size_t packet = detail::max_allowed_packet(sql);
        const std::size_t room = packet > 1024 ? packet - 1024 : 0;
        if (head + largest > room)
          throw_invalid("payload", "and the rest of its event take " +
                                       std::to_string(head + largest) +
                                       " bytes in an INSERT as sent (quoted and escaped: a NUL, "
                                       "a quote, a backslash, CR, LF or Ctrl-Z takes two bytes), "
                                       "more than the session's max_allowed_packet of " +
                                       std::to_string(packet) +
                                       " allows; raise max_allowed_packet on the server (the "
                                       "MySQL adapter's README) or send a smaller payload");
        max_bytes = std::min(max_bytes, room);
      }
      std::size_t off = 0;
      while (off < rows.size()) {
        std::size_t n = 0, bytes = head;
        while (off + n < rows.size() && n < max_rows &&
               (n == 0 || bytes + sizes[off + n] <= max_bytes)) {
          bytes += sizes[off + n];
          ++n;
        }
        const auto part = rows.subspan(off, n);
        off += n;
        const std::string text = outbox::store::multi_row_insert(statements::append, n, per_row);
        detail::translated("append", [&] {
          ::soci::statement st(sql);
          std::vector<std::string> ids;  // alive until the statement ran
          std::vector<long long> times;
          ids.reserve(n);
          times.reserve(n);
          for (const outgoing& r : part) {
            ids.push_back(r.id.to_string());
            times.push_back(detail::to_us(r.created_at));
            st.exchange(::soci::use(ids.back()));
            st.exchange(::soci::use(r.source->aggregate_type));
            st.exchange(::soci::use(r.source->aggregate_id));
            st.exchange(::soci::use(r.source->event_type));
            st.exchange(::soci::use(r.source->payload));
            st.exchange(::soci::use(r.headers_json));
            st.exchange(::soci::use(times.back()));
            st.exchange(::soci::use(r.source->content_type));
          }
          st.alloc();
          st.prepare(text);
          st.define_and_bind();
          st.execute(true);
        });
      }
    }
  };

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
    try {
      sql.open(soci_backend, connect_string);
    } catch (const ::soci::soci_error& e) {
      throw detail::connect_error(e, "connect");
    }
  }
  /// The schema version this library migrates to (the number of migration files).
  static constexpr int schema_version = static_cast<int>(std::size(migrations));

  /// Checks the server (MySQL 8.0+, MariaDB 10.6+, no Galera, not TiDB: `misconfigured`
  /// otherwise), then applies the migrations of `sql/mysql/` the database does not have yet (up
  /// to `target`), under a named lock (`outbox::store::run_migrations`). Safe from several
  /// processes at once.
  /// @returns the schema version after the call.
  static int migrate(session_type& sql, int target = outbox::store::latest_version) {
    detail::migration_host host(sql);
    return outbox::store::run_migrations(host, migrations, "mysql", target);
  }

  /// @param sql the store's own connection (mysql backend); it must outlive the store. Not
  ///            migrated here: call `migrate` once. `claim_policy::store_default` is locking.
  /// @param options the store options.
  /// @throws outbox::error `misconfigured` for an `idle_in_transaction_timeout` outside
  ///         1 ms .. 1 year.
  explicit store(session_type& sql, store_options options = {}) : options_(std::move(options)) {
    if (options_.policy == claim_policy::store_default) options_.policy = claim_policy::locking;
    const auto idle = options_.idle_in_transaction_timeout.count();
    if (idle < 1 || idle > 31'536'000'000)  // MariaDB's limit: a year
      throw error(errc::misconfigured, "mysql", {},
                  "store_options.idle_in_transaction_timeout must be 1 ms .. 1 year, got " +
                      std::to_string(idle) + " ms");
    link_ = std::make_unique<detail::link>(
        sql,
        detail::session_setup{.configure = options_.configure_session,
                              .session = options_.session,
                              .idle = options_.idle_in_transaction_timeout,
                              .locking = options_.policy == claim_policy::locking},
        schema_version);
  }
  /// Moves the store; the moved-from store may only be destroyed or assigned to.
  store(store&&) noexcept = default;
  /// Moves the store; the moved-from store may only be destroyed or assigned to.
  store& operator=(store&&) noexcept = default;

  /// The connection the store was built on.
  [[nodiscard]] session_type& session() noexcept { return link_->session(); }
  /// The options in effect (`store_default` resolved to `locking`).
  [[nodiscard]] const store_options& options() const noexcept { return options_; }
  /// Leasing: several claims may be in flight on the session
  /// (`concepts::overlapping_claims_store`); locking: a claim holds the session's transaction until
  /// its settle.
  [[nodiscard]] bool claims_overlap() const noexcept {
    return options_.policy == claim_policy::leasing;
  }
  /// Locking: the claim's transaction stays open until its settle, and the server ends it once
  /// idle for `idle_in_transaction_timeout` (MariaDB's `idle_transaction_timeout`, MySQL 8's
  /// `wait_timeout`); leasing holds none
  /// (`concepts::idle_limited_claims_store`: the relay refuses a publish timeout that long).
  [[nodiscard]] static std::optional<std::chrono::milliseconds> claim_idle_limit(
      const store_options& o) noexcept {
    if (o.policy == claim_policy::leasing) return std::nullopt;
    return o.idle_in_transaction_timeout;
  }
  /// The server's id of the store's connection (`KILL <id>`; for operators and fault tests).
  [[nodiscard]] unsigned long connection_id() {
    link_->connection();
    return link_->connection_id();
  }
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
  /// it wrote nothing, so running it again is harmless. Seen on MariaDB 10.11 with 8 writers,
  /// 4 leasing relays and a purge: the SKIP LOCKED read itself reported as the victim, about
  /// once per 10 s.
  claimed_batch claim(const claim_request& req) {
    for (int attempt = 1;; ++attempt) {
      try {
        return claim_once(req);
      } catch (const error& e) {
        if (attempt == 3 || !detail::lock_conflict(detail::native_number(e))) throw;
        ++retried_;
      }
    }
  }

 private:
  claimed_batch claim_once(const claim_request& req) {
    return link_->run("claim", [&](MYSQL* c) {
      if (link_->in_claim()) link_->rollback_claim(c);  // neither settled nor released
      auto& sql = link_->session();
      claimed_batch batch;
      batch.token = static_cast<std::int64_t>(rng_() >> 1);
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
      if (const std::int64_t scan = outbox::store::scan_limit(req); scan > 0) {
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
      // reached (at most `claim_passes` statements; almost every claim is one).
      for (int pass = 0; pass < claim_passes; ++pass) {
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
            append_rows(rows, chunk);
            chunk.resize(fetch);
            got = st.fetch();
          }
        }
        if (rows.size() == 0) break;
        const auto prev = previous_rows(sql, rows.seq);
        bool held_back = false;
        for (std::size_t i = 0; i < rows.size(); ++i) {
          const std::int64_t seq = rows.seq[i];
          after = std::max<long long>(after, seq);
          const auto p = prev.find(seq);
          if (p != prev.end() && (p->second == 0 || taken.count(p->second) > 0)) {
            taken.insert(seq);
            std::string why;
            message m = outbox::store::read_message(detail::row{rows, i}, why);
            if (why.empty())
              batch.messages.push_back(std::move(m));
            else
              bad.push_back(
                  {{"s", seq}, {"e", outbox::store::storable_text("unreadable row: " + why)}});
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
          for (std::size_t off = 0; off < seqs.size(); off += settle_chunk) {
            std::string list = detail::json_seqs(std::vector<std::int64_t>(
                seqs.begin() + static_cast<std::ptrdiff_t>(off),
                seqs.begin() +
                    static_cast<std::ptrdiff_t>(std::min(seqs.size(), off + settle_chunk))));
            detail::execute(sql, statements::claim_stamp, ::soci::use(until, "until"),
                            ::soci::use(owner, "owner"), ::soci::use(token, "token"),
                            ::soci::use(list, "seqs"));
          }
        }
        detail::exec(c, "COMMIT", "claim");
        link_->end_claim();
      } else if (batch.messages.empty()) {
        // Nothing held: end the claim transaction now (or commit its dead letters).
        if (batch.unreadable > 0) {
          detail::exec(c, "COMMIT", "claim");
          link_->end_claim();
        } else {
          link_->rollback_claim(c);
        }
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
    const auto plan = outbox::store::settle_plan::of(batch, fates, "mysql");
    return link_->run("settle", [&](MYSQL* c) {
      const bool locking = options_.policy == claim_policy::locking;
      if (locking && !link_->in_claim())
        throw error(errc::transient, "mysql", {},
                    "settle: the claim transaction is gone (connection lost?); the batch is "
                    "claimable again");
      if (locking && !link_->is_open_claim(batch.token)) {
        settle_result stale;  // not the open claim: its rows are not ours to touch
        stale.fenced = fates.size();
        return stale;
      }
      auto& sql = link_->session();
      long long now_us = detail::to_us(now);
      long long token = batch.token;
      int lock = locking ? 1 : 0;
      settle_result out;
      // By primary key, in seq order, at most settle_chunk rows per statement.
      std::vector<std::int64_t> published = plan.published;
      std::sort(published.begin(), published.end());
      for_chunks(published, [&](std::string& list) {
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
      for (const auto code : {outbox::store::fate_code::retry, outbox::store::fate_code::dead}) {
        std::vector<const outbox::store::settle_plan::failure*> failed;
        for (const auto& f : plan.failed)
          if (f.code == code) failed.push_back(&f);
        std::sort(failed.begin(), failed.end(), [](auto* a, auto* b) { return a->seq < b->seq; });
        int dead = code == outbox::store::fate_code::dead ? 1 : 0;
        for (std::size_t off = 0; off < failed.size(); off += settle_chunk) {
          nlohmann::json list = nlohmann::json::array();
          for (std::size_t i = off; i < std::min(failed.size(), off + settle_chunk); ++i)
            list.push_back({{"s", failed[i]->seq},
                            {"a", detail::to_us(failed[i]->retry_at)},
                            {"e", failed[i]->error}});
          std::string text = list.dump();
          const auto n = static_cast<std::size_t>(retrying(!locking, [&] {
            return detail::execute(sql, statements::settle_failed, ::soci::use(dead, "dead"),
                                   ::soci::use(lock, "locking"), ::soci::use(now_us, "now"),
                                   ::soci::use(text, "fates"), ::soci::use(token, "token"));
          }));
          (dead ? out.dead : out.retried) += n;
        }
      }
      if (locking) {
        detail::exec(c, "COMMIT", "settle");
        link_->end_claim();
        // Released rows are simply left alone: their locks go with the commit.
        out.released = plan.released.size();
      } else {
        std::vector<std::int64_t> released = plan.released;
        std::sort(released.begin(), released.end());
        for_chunks(released, [&](std::string& list) {
          out.released += static_cast<std::size_t>(retrying(true, [&] {
            return detail::execute(sql, statements::settle_release, ::soci::use(list, "seqs"),
                                   ::soci::use(token, "token"));
          }));
        });
      }
      return plan.finish(out);
    });
  }

  /// Returns the rows of `batch` to pending, their attempt given back: locking rolls the claim
  /// transaction back; leasing settles every row still under its token as `release`.
  void release(const claimed_batch& batch) {
    if (options_.policy == claim_policy::locking) {
      // Rolling back undoes the claim and drops the row locks.
      link_->run("release", [&](MYSQL* c) {
        if (link_->is_open_claim(batch.token)) link_->rollback_claim(c);
        return 0;
      });
      return;
    }
    std::vector<settlement> fates(batch.size());
    settle(batch, fates, batch.lease_until);  // nothing is stamped by a release
  }

  // ---- inbox ----------------------------------------------------------------------------------

  /// A transaction on `session()` for the consumer (`concepts::inbox_store`); its `commit`
  /// fails, rather than commit nothing, when the connection that began it was lost.
  [[nodiscard]] transaction begin() { return transaction(*link_); }

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
      std::string type = outbox::store::storable_text(m.aggregate_type);
      std::string agg = outbox::store::storable_text(m.aggregate_id);
      std::string etype = outbox::store::storable_text(m.event_type);
      std::string headers = outbox::store::storable_headers(m.headers);
      std::string reason = outbox::store::storable_text(why);
      std::string ctype = outbox::store::storable_text(m.content_type);
      long long at = detail::to_us(now);
      detail::exec(c, "START TRANSACTION", "dead_letter_delivery");
      try {
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
        detail::exec(c, "COMMIT", "dead_letter_delivery");
      } catch (...) {
        mysql_real_query(c, "ROLLBACK", 8);
        throw;
      }
      return 0;
    });
  }

  // ---- operations -----------------------------------------------------------------------------

  /// Under *locking* a claim writes nothing (its row locks are the claim), so rows in flight
  /// count as pending and `in_flight` is 0; under *leasing* it counts rows under a live lease.
  backlog_stats stats(time_point now) {
    return link_->run("stats", [&](MYSQL*) {
      const auto rows = count_backlog(statements::stats, false, detail::to_us(now));
      return rows.empty() ? backlog_stats{} : rows.front().stats;  // one row: no GROUP BY
    });
  }

  /// The backlog per aggregate type, in one statement (`concepts::aggregate_stats_store`); what
  /// `stats` says of locking holds per type too.
  std::vector<aggregate_type_stats> stats_by_aggregate_type(time_point now) {
    return link_->run("stats_by_aggregate_type", [&](MYSQL*) {
      return count_backlog(statements::stats_by_type, true, detail::to_us(now));
    });
  }

  /// At most `limit` dead letters, oldest first.
  std::vector<dead_letter> dead_letters(std::size_t limit) {
    return link_->run("dead_letters", [&](MYSQL*) {
      std::vector<dead_letter> out;
      long long n = static_cast<long long>(std::min<std::size_t>(limit, 1u << 30));
      ::soci::statement st(link_->session());
      detail::message_rows chunk;
      chunk.into(st, true);
      st.exchange(::soci::use(n, "limit"));
      st.alloc();
      st.prepare(std::string(statements::dead_letters));
      st.define_and_bind();
      const std::size_t fetch = std::min<std::size_t>(std::max<std::size_t>(limit, 1), 1000);
      chunk.resize(fetch, true);
      bool got = limit > 0 && st.execute(true);
      while (got) {
        for (std::size_t i = 0; i < chunk.size(); ++i)
          out.push_back(outbox::store::read_dead_letter(detail::row{chunk, i}));
        chunk.resize(fetch, true);
        got = st.fetch();
      }
      return out;
    });
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
        for_chunks(seqs, [&](std::string& list) {
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
  /// Runs a backlog count at `now` (Unix us): stats.sql (one row, no aggregate type) or, with
  /// `by_type`, stats_by_type.sql (a row per type).
  std::vector<aggregate_type_stats> count_backlog(std::string_view text, bool by_type,
                                                  long long now) {
    long long at = now, at2 = now, at3 = now;
    std::vector<aggregate_type_stats> out;
    ::soci::statement st(link_->session());
    detail::stats_rows chunk;
    chunk.into(st, by_type);
    st.exchange(::soci::use(at, "now"));
    st.exchange(::soci::use(at2, "now2"));
    st.exchange(::soci::use(at3, "now3"));
    st.alloc();
    st.prepare(std::string(text));
    st.define_and_bind();
    constexpr std::size_t fetch = 100;
    chunk.resize(fetch, by_type);
    bool got = st.execute(true);
    while (got) {
      for (std::size_t i = 0; i < chunk.size(); ++i)
        out.push_back(
            {by_type ? chunk.aggregate_type[i] : std::string(),
             outbox::store::read_backlog<std::micro>(detail::stats_row{chunk, i}, 0, now)});
      chunk.resize(fetch, by_type);
      got = st.fetch();
    }
    return out;
  }

  /// Statements a claim may run to get past aggregates held back behind other relays' rows or
  /// rows waiting for a retry.
  static constexpr int claim_passes = 4;
  /// Rows per settle, stamp or purge statement: bounded, so no statement holds a long run of
  /// row locks or sends a list the server plans badly.
  static constexpr std::size_t settle_chunk = 1000;

  static void append_rows(detail::message_rows& to, detail::message_rows& from) {
    const auto move_all = [](auto& dst, auto& src) {
      dst.insert(dst.end(), std::make_move_iterator(src.begin()),
                 std::make_move_iterator(src.end()));
    };
    move_all(to.seq, from.seq);
    move_all(to.attempts, from.attempts);
    move_all(to.created_at, from.created_at);
    move_all(to.event_id, from.event_id);
    move_all(to.aggregate_type, from.aggregate_type);
    move_all(to.aggregate_id, from.aggregate_id);
    move_all(to.event_type, from.event_type);
    move_all(to.payload, from.payload);
    move_all(to.headers, from.headers);
    move_all(to.content_type, from.content_type);
  }

  /// For each seq, the seq of the pending row before it in its aggregate, 0 for none
  /// (sql/mysql/claim_previous.sql).
  static std::unordered_map<std::int64_t, std::int64_t> previous_rows(
      ::soci::session& sql, const std::vector<long long>& seqs) {
    std::unordered_map<std::int64_t, std::int64_t> out;
    out.reserve(seqs.size());
    for (std::size_t off = 0; off < seqs.size(); off += settle_chunk) {
      std::vector<std::int64_t> part(
          seqs.begin() + static_cast<std::ptrdiff_t>(off),
          seqs.begin() + static_cast<std::ptrdiff_t>(std::min(seqs.size(), off + settle_chunk)));
      std::string list = detail::json_seqs(part);
      std::vector<long long> seq(part.size()), prev(part.size());
      sql << std::string(statements::claim_previous), ::soci::use(list, "seqs"), ::soci::into(seq),
          ::soci::into(prev);
      for (std::size_t i = 0; i < seq.size(); ++i) out.emplace(seq[i], prev[i]);
    }
    return out;
  }

  /// Calls `f(list)` for each run of at most settle_chunk seqs, `list` their JSON array.
  template <class F>
  static void for_chunks(const std::vector<std::int64_t>& seqs, F&& f) {
    for (std::size_t off = 0; off < seqs.size(); off += settle_chunk) {
      std::string list = detail::json_seqs(std::vector<std::int64_t>(
          seqs.begin() + static_cast<std::ptrdiff_t>(off),
          seqs.begin() + static_cast<std::ptrdiff_t>(std::min(seqs.size(), off + settle_chunk))));
      f(list);
    }
  }

  /// Runs `f` and, when `may_retry`, runs it again (up to 3 times) after a deadlock or lock wait
  /// timeout: for statements on their own (autocommit), by primary key, whose repetition is
  /// harmless. Inside a locking claim a deadlock has rolled back the whole transaction: not
  /// retried there (the batch is claimable again).
  template <class F>
  long long retrying(bool may_retry, F&& f) {
    for (int attempt = 1;; ++attempt) {
      try {
        return detail::translated("statement", f);
      } catch (const error& e) {
        if (!may_retry || attempt == 3 || !detail::lock_conflict(detail::native_number(e))) throw;
        ++retried_;
      }
    }
  }

  store_options options_;
  std::unique_ptr<detail::link> link_;
  std::mt19937_64 rng_{std::random_device{}() ^
                       (static_cast<std::uint64_t>(std::random_device{}()) << 32)};
  std::uint64_t retried_ = 0;
};

static_assert(concepts::store<store>);
static_assert(concepts::inbox_lookup_store<store>);
static_assert(concepts::aggregate_stats_store<store>);
static_assert(concepts::consumer_name_limited_store<store>);
static_assert(concepts::idle_limited_claims_store<store>);

/// `store::migrate`.
inline int migrate(::soci::session& sql, int target = outbox::store::latest_version) {
  return store::migrate(sql, target);
}

}  // namespace outbox::mysql
