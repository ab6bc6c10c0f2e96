#pragma once
/// @file
/// What the server stores (PostgreSQL, MySQL) share around their link: the options, the
/// session, the claim policy's consequences and the consumer's transactions. A store derives
/// from it and adds its statements.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include <outbox/concepts/store.hpp>
#include <outbox/sql/link.hpp>
#include <outbox/store_options.hpp>

namespace outbox::sql {

/// What every server store models.
template <class S>
concept server_store_concepts =
    concepts::store<S> && concepts::inbox_lookup_store<S> && concepts::aggregate_stats_store<S> &&
    concepts::consumer_name_limited_store<S> && concepts::idle_limited_claims_store<S>;

/// The base of a server store `Store` over `Dialect`'s link (see the file's description).
template <link_dialect Dialect, class Store>
class server_store {
 public:
  /// The connection type: a SOCI session with the dialect's backend.
  using session_type = ::soci::session;
  /// A transaction on the store's session, bound to the connection that began it.
  using transaction = typename link<Dialect>::transaction;

  /// Movable: its connection, open claim and transactions stay valid (they live in the link).
  server_store(server_store&&) noexcept = default;
  /// Moves the store; the moved-from store may only be destroyed or assigned to.
  server_store& operator=(server_store&&) noexcept = default;

  /// The connection the store was built on.
  [[nodiscard]] session_type& session() noexcept { return link_->session(); }
  /// The options in effect (`store_default` resolved to `locking`).
  [[nodiscard]] const store_options& options() const noexcept { return options_; }
  /// Leasing: several claims may be in flight on the session
  /// (`concepts::overlapping_claims_store`); locking: a claim holds the session's transaction
  /// until its settle.
  [[nodiscard]] bool claims_overlap() const noexcept {
    return options_.policy == claim_policy::leasing;
  }
  /// Locking: the claim's transaction stays open until its settle, and the server ends it once
  /// idle for `idle_in_transaction_timeout`; leasing holds none
  /// (`concepts::idle_limited_claims_store`: the relay refuses a publish timeout that long).
  [[nodiscard]] static std::optional<std::chrono::milliseconds> claim_idle_limit(
      const store_options& o) noexcept {
    if (o.policy == claim_policy::leasing) return std::nullopt;
    return o.idle_in_transaction_timeout;
  }
  /// A transaction on `session()` for the consumer (`concepts::inbox_store`); its `commit`
  /// fails, rather than commit nothing, when the connection that began it was lost.
  [[nodiscard]] transaction begin() { return transaction(*link_); }

  /// Returns the rows of `batch` to pending, their attempt given back: locking rolls the claim
  /// transaction back; leasing settles every row still under its token as `release`.
  void release(const claimed_batch& batch) {
    if (locking()) {
      link_->release_claim(batch.token);
      return;
    }
    std::vector<settlement> fates(batch.size());
    // Nothing is stamped by a release.
    static_cast<Store*>(this)->settle(batch, fates, batch.lease_until);
  }

 protected:
  /// @param sql the store's own connection; it must outlive the store.
  /// @param options with the policy resolved.
  /// @param make_dialect makes the link's dialect from the options.
  template <class MakeDialect>
  server_store(session_type& sql, store_options options, MakeDialect&& make_dialect)
      : options_(std::move(options)),
        link_(std::make_unique<link<Dialect>>(sql, make_dialect(options_))) {}
  ~server_store() = default;

  /// Whether the claim policy is locking.
  [[nodiscard]] bool locking() const noexcept { return options_.policy == claim_policy::locking; }
  /// Under locking, the outcome of a settle of a batch that is not the open claim: every fate
  /// fenced (its rows are not ours to touch); none for the open claim's batch, or under leasing.
  /// @throws outbox::error `transient` when the claim transaction is gone (connection lost).
  [[nodiscard]] std::optional<settle_result> stale_settle(const claimed_batch& batch,
                                                          std::size_t fates) const {
    if (!locking() || link_->holds_claim(batch.token, "settle")) return std::nullopt;
    settle_result stale;
    stale.fenced = fates;
    return stale;
  }
  /// A claim's token: random, non-negative, so two relays' batches never share one.
  [[nodiscard]] std::int64_t next_token() noexcept {
    return static_cast<std::int64_t>(rng_() >> 1);
  }

  store_options options_;  ///< The options in effect.
  /// The connection, on the heap: claims and transactions keep it when the store moves.
  std::unique_ptr<link<Dialect>> link_;
  /// Draws the claims' tokens.
  std::mt19937_64 rng_{std::random_device{}() ^
                       (static_cast<std::uint64_t>(std::random_device{}()) << 32)};
};

}  // namespace outbox::sql
