#pragma once
/// @file
/// A server store's connection: the native handle under its SOCI session, re-established after
/// a loss and set up again, the open claim transaction, and the transactions that belong to one
/// connection. The dialect (a small traits class) says how to reach the handle and talk to it;
/// the rules here are the same for every server. Not movable: a store owns its link by pointer,
/// so transactions and claims keep their link when the store moves.

#include <concepts>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <outbox/error.hpp>
#include <outbox/validate.hpp>

namespace soci {
class session;
}

namespace outbox::sql {

/// What `link` needs of a server dialect. `handle` is the native connection (`PGconn*`,
/// `MYSQL*`); `set_up` runs on each new connection (session settings, schema check, prepared
/// statements); `commit` checks that its transaction is still open and commits it, throwing
/// `outbox::error` (the link then marks a lost connection or rolls back what is left).
// clang-format off
template <class D>
concept link_dialect = requires(D& d, ::soci::session& s, typename D::handle c, const error& e,
                                const std::exception& x) {
  { D::adapter } -> std::convertible_to<const char*>;
  { D::check(s) };                                                // misconfigured: another backend
  { D::reconnect(s) };                                            // SOCI's reconnect
  { D::current(s) } noexcept -> std::same_as<typename D::handle>;  // null: the session has none
  { D::alive(c) } noexcept -> std::same_as<bool>;
  { D::reconnect_code(x) } -> std::convertible_to<std::string>;
  { D::lost(c, e) } noexcept -> std::same_as<bool>;
  { D::rollback(c) } noexcept -> std::same_as<bool>;  // false: the transaction may still be open
  { D::begin(c) };
  { D::commit(c) };
  { D::finish(c) };  // COMMIT without `commit`'s checks: every statement was seen to succeed
  { d.set_up(s, c) };
  { D::guard(std::string_view{}, [] { return 0; }) } -> std::same_as<int>;
};
// clang-format on

/// A server store's connection under `Dialect` (see the file's description).
template <link_dialect Dialect>
class link {
 public:
  /// The native connection (`PGconn*`, `MYSQL*`).
  using handle = typename Dialect::handle;

  /// @throws outbox::error `misconfigured` when `sql` is not connected with the dialect's
  ///         backend.
  link(::soci::session& sql, Dialect dialect) : sql_(&sql), dialect_(std::move(dialect)) {
    Dialect::check(sql);
  }
  link(const link&) = delete;
  link& operator=(const link&) = delete;
  ~link() {
    if (in_claim_ && !broken_ && conn_ != nullptr && Dialect::alive(conn_))
      (void)Dialect::rollback(conn_);
  }

  /// The SOCI session the link reconnects.
  [[nodiscard]] ::soci::session& session() noexcept { return *sql_; }

  /// The connection, re-established after a loss and set up. SOCI's `reconnect` closes the old
  /// connection before it opens the new one, so a reconnect that fails (the server still away)
  /// leaves the session without one: each call tries again, `transient` until it is back.
  handle connection() {
    handle c = Dialect::current(*sql_);
    if (broken_ || c == nullptr || !Dialect::alive(c)) {
      broken_ = true;
      in_claim_ = false;
      conn_ = nullptr;  // freed by the reconnect below, whether it succeeds or not
      try {
        Dialect::reconnect(*sql_);
      } catch (const std::exception& e) {
        // Transient whatever the server said (it took this connection before), with its code.
        throw error(errc::transient, Dialect::adapter, Dialect::reconnect_code(e),
                    std::string("reconnect: ") + sanitize_text(e.what()));
      }
      broken_ = false;
      ready_ = false;
      ++generation_;
      c = Dialect::current(*sql_);
      if (c == nullptr)
        throw error(errc::transient, Dialect::adapter, {},
                    "reconnect: the session has no connection");
    }
    if (c != conn_ || !ready_) {
      // A new connection, even if the allocator handed back the same address: nothing of the
      // old one (session settings, prepared statements, an open claim) exists on it.
      if (c != conn_) ++generation_;
      conn_ = c;
      ready_ = false;
      in_claim_ = false;
      try {
        dialect_.set_up(*sql_, c);
      } catch (const error& e) {
        if (Dialect::lost(c, e)) broken_ = true;
        throw;
      }
      ready_ = true;
    }
    return c;
  }

  /// Runs `f(handle)` on the live connection; on a connection loss, marks the link for
  /// reconnection (the open claim, if any, is gone with it) and rethrows as `transient`. A
  /// failed statement inside an open claim transaction ends it, so the batch is free again.
  template <class F>
  std::invoke_result_t<F&, handle> run(std::string_view what, F&& f) {
    handle c = connection();
    try {
      return Dialect::guard(what, [&]() -> decltype(auto) { return f(c); });
    } catch (const error& e) {
      if (Dialect::lost(c, e)) {
        broken_ = true;
        in_claim_ = false;
        if (e.kind() != errc::transient)
          throw error(errc::transient, Dialect::adapter, e.native_code(),
                      std::string(what) + ": connection lost");
      } else if (in_claim_) {
        rollback_claim(c);
      }
      throw;
    }
  }

  /// Counts connections: a value names one connection, so state kept per connection (LISTEN)
  /// is current when its generation is this one.
  [[nodiscard]] std::uint64_t generation() const noexcept { return generation_; }
  /// The connection the last call used (null while lost): for reading input after a wait.
  [[nodiscard]] handle current() const noexcept { return conn_; }
  /// Makes the next call reconnect (the connection was found lost outside `run`).
  void mark_broken() noexcept { broken_ = true; }

  // ---- the open claim transaction ------------------------------------------------------------

  /// Notes the claim transaction of `token`'s batch as open on the connection.
  void begin_claim(std::int64_t token) noexcept {
    in_claim_ = true;
    claim_token_ = token;
  }
  /// Whether a claim transaction is open.
  [[nodiscard]] bool in_claim() const noexcept { return in_claim_; }
  /// Whether the open claim transaction is `token`'s batch's.
  [[nodiscard]] bool is_open_claim(std::int64_t token) const noexcept {
    return in_claim_ && claim_token_ == token;
  }
  /// Notes the claim transaction as ended (committed by the store).
  void end_claim() noexcept { in_claim_ = false; }
  /// Rolls back a claim transaction left open (neither settled nor released) before a new
  /// claim. @throws outbox::error `transient` when the ROLLBACK failed: the claim must not begin
  /// on that connection (its BEGIN would commit what was left); the next call reconnects.
  void drop_open_claim(handle c) {
    if (!in_claim_) return;
    rollback_claim(c);
    if (broken_)
      throw error(errc::transient, Dialect::adapter, {},
                  "claim: the previous claim transaction could not be rolled back; reconnecting");
  }
  /// Commits the open claim transaction (a settle under locking, a claim that kept rows).
  void commit_claim(handle c) {
    Dialect::finish(c);
    in_claim_ = false;
  }
  /// Ends a claim transaction that holds no batch: committed when it wrote something to keep
  /// (`wrote`: dead letters of unreadable rows), rolled back otherwise.
  void end_empty_claim(handle c, bool wrote) {
    if (wrote)
      commit_claim(c);
    else
      rollback_claim(c);
  }
  /// Runs `f()` in a transaction of its own on `c`: committed when `f` returns, rolled back
  /// when it throws.
  template <class F>
  void in_own_transaction(handle c, F&& f) {
    Dialect::begin(c);
    try {
      std::forward<F>(f)();
      Dialect::finish(c);
    } catch (...) {
      // A ROLLBACK that fails may leave the transaction open: the next begin would commit it.
      if (!Dialect::alive(c) || !Dialect::rollback(c)) broken_ = true;
      throw;
    }
  }
  /// Under locking, whether the batch of `token` holds the open claim transaction (false: a
  /// stale batch, whose rows are not ours to touch).
  /// @throws outbox::error `transient` when the claim transaction is gone (its connection was
  ///         lost): the batch is claimable again.
  [[nodiscard]] bool holds_claim(std::int64_t token, std::string_view what) const {
    if (!in_claim_)
      throw error(errc::transient, Dialect::adapter, {},
                  std::string(what) +
                      ": the claim transaction is gone (connection lost?); the batch is "
                      "claimable again");
    return claim_token_ == token;
  }
  /// Under locking, releases the batch of `token`: rolling its claim transaction back undoes
  /// the claim (attempts included) and drops the row locks.
  void release_claim(std::int64_t token) {
    run("release", [&](handle c) {
      if (is_open_claim(token)) rollback_claim(c);
      return 0;
    });
  }
  /// Rolls back the open transaction. A ROLLBACK that fails leaves it possibly open (MySQL's
  /// KILL QUERY), and the next begin could commit it: the connection is made again instead
  /// (the server rolls back what a closed one left).
  void rollback_claim(handle c) noexcept {
    in_claim_ = false;
    if (!Dialect::rollback(c)) broken_ = true;
  }

  // ---- transactions --------------------------------------------------------------------------

  /// A transaction on the link's session; rolls back on destruction unless committed. It
  /// belongs to the connection that began it: after a reconnect, `commit` fails instead of
  /// sending COMMIT on a new session, where it would commit nothing and report success.
  class transaction {
   public:
    /// Begins a transaction on `l`'s connection (reconnecting it first if it was lost).
    explicit transaction(link& l) : l_(&l) {
      l_->run("begin", [](handle c) { Dialect::begin(c); });
      generation_ = l_->generation_;
    }
    /// Takes over `o`'s transaction.
    transaction(transaction&& o) noexcept
        : l_(std::exchange(o.l_, nullptr)), generation_(o.generation_) {}
    transaction& operator=(transaction&&) = delete;
    ~transaction() {
      if (l_ && still_ours()) l_->rollback_claim(l_->conn_);
    }

    /// Commits, after checking that the transaction is still the one this object began
    /// (`Dialect::commit` checks that no statement inside it ended it).
    /// @throws outbox::error `transient` (the connection was lost before COMMIT: nothing was
    ///         committed), `in_doubt` (lost during COMMIT: the inbox makes a redelivery
    ///         harmless), or the dialect's error (`permanent`: nothing was committed).
    void commit() {
      link* s = std::exchange(l_, nullptr);
      if (s->generation_ != generation_ || s->broken_ || s->conn_ == nullptr ||
          !Dialect::alive(s->conn_)) {
        s->broken_ = true;
        throw error(errc::transient, Dialect::adapter, {},
                    "commit: the connection of this transaction was lost; nothing was committed");
      }
      handle c = s->conn_;
      try {
        Dialect::commit(c);
      } catch (const error& e) {
        // Whatever is left of the transaction is rolled back, not committed by the next begin.
        if (Dialect::lost(c, e))
          s->broken_ = true;
        else
          s->rollback_claim(c);
        throw;
      }
    }

   private:
    [[nodiscard]] bool still_ours() const noexcept {
      return l_->generation_ == generation_ && !l_->broken_ && l_->conn_ != nullptr &&
             Dialect::alive(l_->conn_);
    }

    link* l_;
    std::uint64_t generation_ = 0;
  };

 private:
  ::soci::session* sql_;
  Dialect dialect_;
  handle conn_ = nullptr;         // the connection that was set up; null while it is lost
  std::uint64_t generation_ = 0;  // counts connections: a transaction belongs to one
  bool ready_ = false;
  bool broken_ = false;
  bool in_claim_ = false;
  std::int64_t claim_token_ = 0;  // the open claim's
};

}  // namespace outbox::sql
