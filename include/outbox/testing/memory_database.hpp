#pragma once
/// @file
/// The in-memory database behind `memory_store`: outbox, inbox, inbox dead letters and small
/// business tables in one thread-safe object, and `memory_session`, the connection an
/// application (or a consumer's handler) writes on, with real transactions.
///
/// A unit test of a service creates one `memory_database`, opens a `memory_session` per
/// "connection" (the application's, the relay's, the consumer's) and builds `memory_store`s on
/// them. Everything a session writes inside a transaction (outbox rows, inbox records, business
/// rows, on-commit callbacks) becomes visible to the others at `commit`, all at once, or never.
///
/// Behaviour chosen to match the strictest SQL store, so that a service tested here behaves the
/// same on PostgreSQL:
/// - a statement that fails inside a transaction (a duplicate key, an injected fault) aborts the
///   transaction: later statements throw, and `commit` rolls back and throws `permanent`;
/// - a statement outside a transaction commits on its own (autocommit);
/// - two transactions that write the same key (the same inbox record, the same business key)
///   both proceed; the one that commits second fails (`transient`, a serialization failure)
///   and is rolled back.

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/retry.hpp>
#include <outbox/testing/memory_rows.hpp>
#include <outbox/uuid.hpp>

namespace outbox::testing {

template <concepts::clock Clock>
class memory_store;

/// The operations of a memory database a fault can be injected into (a bit mask).
enum class memory_operation : std::uint32_t {
  append = 1U << 0,                ///< `memory_store::append` (the writer's enqueue).
  claim = 1U << 1,                 ///< `memory_store::claim`.
  settle = 1U << 2,                ///< `memory_store::settle` and `release`.
  begin = 1U << 3,                 ///< Starting a transaction on a session.
  commit = 1U << 4,                ///< Committing a transaction on a session.
  record_delivery = 1U << 5,       ///< `memory_store::record_delivery` (the consumer's inbox).
  dead_letter_delivery = 1U << 6,  ///< `memory_store::dead_letter_delivery`.
  /// `stats`, `stats_by_aggregate_type`, `dead_letters`, `requeue`, `purge_published`,
  /// `purge_inbox`.
  operations = 1U << 7,
  statement = 1U << 8,  ///< A session's own business statements (`insert`, `put`, `erase`, `find`).
  any = ~0U,
};

/// The union of two masks: `memory_operation::claim | memory_operation::settle`, say.
[[nodiscard]] constexpr memory_operation operator|(memory_operation a,
                                                   memory_operation b) noexcept {
  return static_cast<memory_operation>(static_cast<std::uint32_t>(a) |
                                       static_cast<std::uint32_t>(b));
}
/// True when the masks `a` and `b` share an operation.
[[nodiscard]] constexpr bool overlaps(memory_operation a, memory_operation b) noexcept {
  return (static_cast<std::uint32_t>(a) & static_cast<std::uint32_t>(b)) != 0;
}

/// What a session's business statements throw: the memory database's "client library error"
/// (the counterpart of `soci::soci_error`), not an `outbox::error`, so that a consumer learns
/// its class through `memory_store::classify`, as it would from a SQL store.
class memory_statement_error : public std::runtime_error {
 public:
  /// @param kind the class `memory_store::classify` reports.
  /// @param code a short native code: "duplicate_key", "aborted", "injected", ...
  /// @param what the text of the error; `what()` reads `memory [code]: what`.
  memory_statement_error(errc kind, std::string code, const std::string& what)
      : std::runtime_error("memory [" + code + "]: " + what), kind_(kind), code_(std::move(code)) {}
  /// The class of the failure (what `memory_store::classify` reports).
  [[nodiscard]] errc kind() const noexcept { return kind_; }
  /// The short native code ("duplicate_key", "aborted", "injected", ...).
  [[nodiscard]] const std::string& code() const noexcept { return code_; }

 private:
  errc kind_;
  std::string code_;
};

/// A business table: key -> value, in key order.
using memory_table = std::map<std::string, std::string, std::less<>>;

class memory_session;

// clang-format off
/// The shared state. Thread-safe: sessions and stores on any threads refer to one database.
/// Not copyable or movable (sessions and stores keep a pointer to it).
///
/// | operation                      | returns                 | guarantees                            |
/// |--------------------------------|-------------------------|---------------------------------------|
/// | `db.outbox()`                  | `std::vector<memory_row>` | committed outbox rows, in store order |
/// | `db.inbox()`                   | `std::vector<memory_inbox_record>` | committed inbox records    |
/// | `db.inbox_dead()`              | `std::vector<memory_inbox_dead_record>` | dead-lettered deliveries |
/// | `db.table(name)`               | `memory_table`          | the committed rows of a business table (empty if none) |
/// | `db.insert_raw(row)`           | `std::int64_t`          | commits `row` unchecked, as another program would; returns its sequence; `duplicate` if its id exists |
/// | `db.update_rows(f)`            | `std::size_t`           | applies `f` to every committed outbox row (as an `UPDATE outbox ...` of another program) |
/// | `db.fail_next(n, kind, where)` | `void`                  | the next `n` operations in `where` throw `kind` (see `memory_operation`) |
/// | `db.fail_after(k, n, kind, where)` | `void`              | the `n` operations in `where` after the next `k` ones throw `kind` |
/// | `db.heal()`                    | `void`                  | no more injected failures             |
/// | `db.failures_injected()`       | `std::size_t`           | how many operations an injected fault failed so far |
///
/// Injected faults: a store operation throws `outbox::error(kind, "memory", "injected", ...)`; a
/// business statement throws `memory_statement_error(kind, "injected", ...)`. Inside a
/// transaction either aborts it. An injected `commit` fault rolls the transaction back, except
/// for `in_doubt`: then the transaction IS committed and the error reports that the answer was
/// lost (what a client sees when the connection dies right after COMMIT).
// clang-format on
class memory_database {
 public:
  memory_database() = default;
  memory_database(const memory_database&) = delete;
  memory_database& operator=(const memory_database&) = delete;

  /// The committed outbox rows, in store order (a copy).
  [[nodiscard]] std::vector<memory_row> outbox() const {
    std::lock_guard lock(mutex_);
    std::vector<memory_row> out;
    out.reserve(rows_.size());
    for (const auto& [seq, row] : rows_) out.push_back(row);
    return out;
  }

  /// The committed inbox records, by consumer name and event id (a copy).
  [[nodiscard]] std::vector<memory_inbox_record> inbox() const {
    std::lock_guard lock(mutex_);
    std::vector<memory_inbox_record> out;
    out.reserve(inbox_.size());
    for (const auto& [key, at] : inbox_) out.push_back({key.first, key.second, at});
    return out;
  }

  /// The deliveries consumers dead-lettered, by consumer name and event id (a copy).
  [[nodiscard]] std::vector<memory_inbox_dead_record> inbox_dead() const {
    std::lock_guard lock(mutex_);
    std::vector<memory_inbox_dead_record> out;
    out.reserve(inbox_dead_.size());
    for (const auto& [key, record] : inbox_dead_) out.push_back(record);
    return out;
  }

  /// The committed rows of business table `name` (a copy); empty when there is no such table.
  [[nodiscard]] memory_table table(std::string_view name) const {
    std::lock_guard lock(mutex_);
    const auto it = tables_.find(name);
    return it == tables_.end() ? memory_table{} : it->second;
  }

  /// Commits `row` as it is (no validation: names may be empty, headers anything), as a program
  /// that writes into the outbox table directly would. `row.sequence` is assigned.
  /// @returns the row's sequence.
  /// @throws outbox::error `duplicate` when a row with its id exists.
  std::int64_t insert_raw(memory_row row) {
    std::int64_t seq = 0;
    {
      std::lock_guard lock(mutex_);
      if (by_id_.contains(row.id))
        throw error(errc::duplicate, "memory", "duplicate_key",
                    "insert_raw: event id " + row.id.to_string() + " exists");
      seq = row.sequence = next_seq_++;
      by_id_.emplace(row.id, seq);
      rows_.emplace(seq, std::move(row));
      ++appended_;
    }
    cv_.notify_all();
    return seq;
  }

  /// Applies `f` to every committed outbox row, in store order, as one atomic update (an
  /// `UPDATE outbox SET ...` of another program). `f` must not change `sequence` or `id`.
  /// @returns how many rows there were.
  std::size_t update_rows(const std::function<void(memory_row&)>& f) {
    std::lock_guard lock(mutex_);
    for (auto& [seq, row] : rows_) f(row);
    return rows_.size();
  }

  /// The next `n` operations in `where` fail with `kind` (`fail_after(0, n, kind, where)`).
  void fail_next(std::size_t n, errc kind = errc::transient,
                 memory_operation where = memory_operation::any) {
    fail_after(0, n, kind, where);
  }
  /// After the next `skip` operations in `where` (which go through), the `n` after them fail
  /// with `kind`: a fault keyed to a count of operations, armed before the work it targets, so
  /// a test does not race the threads doing that work. Each call adds a rule of its own; an
  /// operation counts towards every rule it is in, and the first rule due fails it.
  void fail_after(std::size_t skip, std::size_t n, errc kind = errc::transient,
                  memory_operation where = memory_operation::any) {
    std::lock_guard lock(mutex_);
    if (n > 0) faults_.push_back({skip, n, kind, where});
  }
  /// Removes every injected fault.
  void heal() {
    std::lock_guard lock(mutex_);
    faults_.clear();
  }
  /// How many operations an injected fault failed so far.
  [[nodiscard]] std::size_t failures_injected() const {
    std::lock_guard lock(mutex_);
    return injected_;
  }

 private:
  friend class memory_session;
  friend struct memory_triage;
  template <concepts::clock Clock>
  friend class memory_store;

  using inbox_key = std::pair<std::string, uuid>;
  using inbox_map = std::map<inbox_key, time_point>;

  /// The class of the injected failure `op` must throw now, if any. Caller holds `mutex_`.
  std::optional<errc> take_fault(memory_operation op) {
    std::optional<errc> out;
    for (auto& f : faults_) {
      if (!overlaps(op, f.where)) continue;
      if (f.skip > 0) {
        --f.skip;
      } else if (!out) {
        --f.n;
        out = f.kind;
      }
    }
    if (!out) return std::nullopt;
    std::erase_if(faults_, [](const fault_rule& f) { return f.n == 0; });
    ++injected_;
    return out;
  }
  /// Throws the injected failure of `op`, if any. Caller holds `mutex_`.
  void check_fault(memory_operation op, std::string_view what) {
    if (const auto kind = take_fault(op))
      throw error(*kind, "memory", "injected", "injected failure in " + std::string(what));
  }

  mutable std::mutex mutex_;
  std::condition_variable cv_;  ///< New outbox rows, requeues, interrupts.
  std::map<std::int64_t, memory_row> rows_;
  std::unordered_map<uuid, std::int64_t> by_id_;
  inbox_map inbox_;
  std::map<inbox_key, memory_inbox_dead_record> inbox_dead_;
  std::map<std::int64_t, memory_archived_row> archive_;  ///< Discarded dead letters, by seq.
  std::map<std::string, memory_table, std::less<>> tables_;
  std::int64_t next_seq_ = 1;
  std::int64_t next_token_ = 1;
  std::uint64_t appended_ = 0;  ///< Bumped whenever rows become claimable (wake-ups).

  /// An injected fault: the `n` operations in `where` after `skip` more of them throw `kind`.
  struct fault_rule {
    std::size_t skip;
    std::size_t n;
    errc kind;
    memory_operation where;
  };
  std::vector<fault_rule> faults_;
  std::size_t injected_ = 0;
};

// clang-format off
/// A connection to a `memory_database`: what a SQL session is to a SQL store. One thread at a
/// time (like a SQL connection); many sessions may work on one database concurrently.
///
/// Business rows: named tables of key -> value (strings), written inside the session's
/// transaction, visible to other sessions (and `memory_database::table`) once it commits:
///
/// | operation                      | returns | guarantees                                      | errors |
/// |--------------------------------|---------|-------------------------------------------------|--------|
/// | `s.begin()`                    | `void`  | opens a transaction (or use `memory_session::transaction`) | `outbox::error`: `permanent` if one is open; injected |
/// | `s.commit()`                   | `void`  | everything written since `begin` becomes visible at once | `outbox::error`: `permanent` (aborted, or no transaction), `transient` (a concurrent commit wrote the same key), `duplicate` (an event id another commit used), injected |
/// | `s.rollback()`                 | `void`  | everything written since `begin` is discarded   | - |
/// | `s.insert(table, key, value)`  | `void`  | a new row                                       | `memory_statement_error` `duplicate` ("duplicate_key") when `key` exists |
/// | `s.put(table, key, value)`     | `void`  | inserts or replaces                             | injected |
/// | `s.erase(table, key)`          | `bool`  | removes; false if there was no such row         | injected |
/// | `s.find(table, key)`           | `std::optional<std::string>` | the row as this session sees it (its own writes included) | injected |
/// | `s.on_commit(f)`               | `void`  | `f` runs after the transaction committed (not on rollback); with no transaction open, at once. `f` must not throw | - |
///
/// A statement that throws inside a transaction aborts it (later statements throw
/// `memory_statement_error` "aborted", `commit` rolls back and throws `permanent`). Outside a
/// transaction each statement commits on its own.
// clang-format on
class memory_session {
 public:
  /// A transaction on a session; rolls back on destruction unless `commit()` ran (the shape of
  /// `soci::transaction`).
  class transaction {
   public:
    /// Begins a transaction on `s`.
    explicit transaction(memory_session& s) : s_(&s) { s.begin(); }
    /// Takes over the transaction of `other`, which is then over (its destructor does nothing).
    transaction(transaction&& other) noexcept : s_(std::exchange(other.s_, nullptr)) {}
    transaction& operator=(transaction&&) = delete;
    ~transaction() {
      if (s_) s_->rollback();
    }
    /// @throws as `memory_session::commit`; the transaction is over either way.
    void commit() {
      if (!s_) throw error(errc::permanent, "memory", {}, "commit: the transaction is over");
      std::exchange(s_, nullptr)->commit();
    }
    /// Rolls the transaction back; nothing happens when it is over. Never throws.
    void rollback() {
      if (s_) std::exchange(s_, nullptr)->rollback();
    }

   private:
    memory_session* s_;
  };

  /// A session on `db`, which must outlive it; no transaction is open.
  explicit memory_session(memory_database& db) : db_(&db) {}
  memory_session(const memory_session&) = delete;
  memory_session& operator=(const memory_session&) = delete;
  ~memory_session() { rollback(); }

  /// The database the session works on.
  [[nodiscard]] memory_database& database() const noexcept { return *db_; }
  /// True while a transaction is open (aborted or not).
  [[nodiscard]] bool in_transaction() const noexcept { return open_; }

  /// Opens a transaction.
  /// @throws outbox::error `permanent` when one is open, or an injected fault (`begin`).
  void begin() {
    if (open_)
      throw error(errc::permanent, "memory", {},
                  "begin: a transaction is already open on this session");
    {
      std::lock_guard lock(db_->mutex_);
      db_->check_fault(memory_operation::begin, "begin");
    }
    open_ = true;
    aborted_ = false;
  }

  /// Makes everything written since `begin` visible at once, then runs the `on_commit`
  /// callbacks. @throws outbox::error as the class table says; the transaction is over either
  /// way (rolled back, except after an injected `in_doubt`: committed).
  void commit() {
    if (!open_) throw error(errc::permanent, "memory", {}, "commit: no transaction is open");
    std::vector<std::function<void()>> callbacks;
    bool notify = false;
    std::optional<errc> lost_answer;
    try {
      std::lock_guard lock(db_->mutex_);
      if (aborted_)
        throw error(errc::permanent, "memory", "aborted",
                    "commit: the transaction was aborted by a failed statement; rolled back");
      if (const auto kind = db_->take_fault(memory_operation::commit)) {
        if (*kind != errc::in_doubt)
          throw error(*kind, "memory", "injected", "injected failure in commit; rolled back");
        lost_answer = kind;
      }
      notify = apply_locked();
      callbacks = std::move(on_commit_);
    } catch (...) {
      rollback();
      throw;
    }
    clear();
    if (notify) db_->cv_.notify_all();
    for (auto& f : callbacks) f();
    if (lost_answer)
      throw error(errc::in_doubt, "memory", "injected",
                  "injected failure in commit after it was applied (the answer was lost)");
  }

  /// Discards the open transaction (nothing happens without one). Never throws.
  void rollback() noexcept { clear(); }

  // ---- business statements --------------------------------------------------------------------

  /// Inserts the row `key` = `value` into business table `table`.
  /// @throws memory_statement_error `duplicate` when `key` exists as this session sees it.
  void insert(std::string_view table, std::string_view key, std::string value) {
    run<true>(memory_operation::statement, "insert", [&] {
      if (current(table, key))
        throw memory_statement_error(
            errc::duplicate, "duplicate_key",
            "insert: key '" + std::string(key) + "' exists in table '" + std::string(table) + "'");
      writes_.push_back({std::string(table), std::string(key), std::move(value), true});
    });
  }

  /// Inserts or replaces the row `key` = `value` of business table `table`.
  void put(std::string_view table, std::string_view key, std::string value) {
    run<true>(memory_operation::statement, "put", [&] {
      writes_.push_back({std::string(table), std::string(key), std::move(value), false});
    });
  }

  /// Removes the row `key` of business table `table`; false when there was no such row.
  bool erase(std::string_view table, std::string_view key) {
    bool found = false;
    run<true>(memory_operation::statement, "erase", [&] {
      found = current(table, key).has_value();
      if (found) writes_.push_back({std::string(table), std::string(key), std::nullopt, false});
    });
    return found;
  }

  /// The value of the row `key` of business table `table` as this session sees it (its own
  /// writes included); `nullopt` when there is none.
  [[nodiscard]] std::optional<std::string> find(std::string_view table, std::string_view key) {
    std::optional<std::string> out;
    run<true>(memory_operation::statement, "find", [&] { out = current(table, key); });
    return out;
  }

  /// Runs `f` once the open transaction has committed (not on rollback); with no transaction
  /// open, at once. `f` must not throw.
  void on_commit(std::function<void()> f) {
    if (!open_) {
      f();
      return;
    }
    on_commit_.push_back(std::move(f));
  }

 private:
  template <concepts::clock Clock>
  friend class memory_store;

  struct table_write {
    std::string table;
    std::string key;
    std::optional<std::string> value;  ///< nullopt: erased.
    bool must_be_new = false;          ///< an `insert`: the key must not exist at commit.
  };

  /// The value of (table, key) as this session sees it. Caller holds the database's mutex.
  std::optional<std::string> current(std::string_view table, std::string_view key) const {
    for (auto it = writes_.rbegin(); it != writes_.rend(); ++it)
      if (it->table == table && it->key == key) return it->value;
    const auto t = db_->tables_.find(table);
    if (t == db_->tables_.end()) return std::nullopt;
    const auto r = t->second.find(key);
    if (r == t->second.end()) return std::nullopt;
    return r->second;
  }

  /// Runs a statement on this session: in the open transaction (a failure aborts it), or on its
  /// own (autocommit). `body` runs under the database's mutex. A business statement (`Native`)
  /// fails with `memory_statement_error`, as a client library would; a store operation (the
  /// writer's append, the consumer's inbox record) with `outbox::error`, as a store reports it.
  template <bool Native, class Body>
  void run(memory_operation op, const char* what, Body&& body) {
    const auto fail = [&](errc kind, const char* code, const std::string& text) {
      if constexpr (Native)
        throw memory_statement_error(kind, code, text);
      else
        throw error(kind, "memory", code, text);
    };
    const bool implicit = !open_;
    if (implicit) open_ = true;
    bool notify = false;
    try {
      std::lock_guard lock(db_->mutex_);
      if (aborted_)
        fail(errc::permanent, "aborted",
             std::string(what) +
                 ": the transaction was aborted by an earlier failed statement; roll it back");
      if (const auto kind = db_->take_fault(op))
        fail(*kind, "injected", "injected failure in " + std::string(what));
      body();
      if (implicit) notify = apply_locked();
    } catch (...) {
      if (implicit)
        clear();
      else
        aborted_ = true;
      throw;
    }
    if (implicit) {
      auto callbacks = std::move(on_commit_);
      clear();
      if (notify) db_->cv_.notify_all();
      for (auto& f : callbacks) f();
    }
  }

  /// Checks the transaction against what committed meanwhile, then applies it, all or nothing.
  /// Caller holds the database's mutex. @returns true when outbox rows were added.
  bool apply_locked() {
    auto& db = *db_;
    for (const auto& row : appended_)
      if (db.by_id_.contains(row.id))
        throw error(errc::duplicate, "memory", "duplicate_key",
                    "commit: event id " + row.id.to_string() +
                        " was committed by another transaction; rolled back");
    for (const auto& r : delivered_)
      if (db.inbox_.contains({r.consumer, r.id}))
        throw error(errc::transient, "memory", "serialization",
                    "commit: another transaction recorded the same delivery first; rolled back");
    // Business writes in order against an overlay, so that an insert conflicts only with a key
    // that exists at commit (committed by another transaction since the statement ran).
    std::map<std::pair<std::string_view, std::string_view>, bool> exists;
    for (const auto& w : writes_) {
      const std::pair<std::string_view, std::string_view> k{w.table, w.key};
      auto it = exists.find(k);
      if (it == exists.end()) {
        const auto t = db.tables_.find(w.table);
        it = exists.emplace(k, t != db.tables_.end() && t->second.contains(w.key)).first;
      }
      if (w.must_be_new && it->second)
        throw error(errc::transient, "memory", "serialization",
                    "commit: another transaction inserted key '" + w.key + "' into table '" +
                        w.table + "' first; rolled back");
      it->second = w.value.has_value();
    }
    for (auto& w : writes_) {
      auto& t = db.tables_[w.table];
      if (w.value)
        t.insert_or_assign(w.key, std::move(*w.value));
      else
        t.erase(w.key);
    }
    for (auto& r : delivered_) db.inbox_.emplace(std::pair{r.consumer, r.id}, r.processed_at);
    for (auto& row : appended_) {
      row.sequence = db.next_seq_++;
      db.by_id_.emplace(row.id, row.sequence);
      const auto seq = row.sequence;
      db.rows_.emplace(seq, std::move(row));
    }
    const bool added = !appended_.empty();
    if (added) ++db.appended_;
    return added;
  }

  void clear() noexcept {
    open_ = false;
    aborted_ = false;
    writes_.clear();
    appended_.clear();
    delivered_.clear();
    on_commit_.clear();
  }

  memory_database* db_;
  bool open_ = false;
  bool aborted_ = false;
  std::vector<table_write> writes_;
  std::vector<memory_row> appended_;
  std::vector<memory_inbox_record> delivered_;
  std::vector<std::function<void()>> on_commit_;
};

}  // namespace outbox::testing
