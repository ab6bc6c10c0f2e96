#pragma once
/// @file
/// The settle plan: a batch's fates split the way every settle statement consumes them, and the
/// one place `settle_result::fenced` is counted. Deferrals (releases until a time) count as
/// released.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <outbox/cause.hpp>
#include <outbox/message.hpp>
#include <outbox/sql/row.hpp>

namespace outbox::sql {

/// The fates of one batch, by kind. Error texts are made storable (`storable_text`) here, once.
struct settle_plan {
  /// A retry or a dead letter.
  struct failure {
    std::int64_t seq;     ///< The sequence of the row (`message::sequence`).
    fate_code code;       ///< `retry` or `dead`.
    time_point retry_at;  ///< For `retry`.
    std::string error;    ///< Storable.
    std::string cause{};  ///< For `dead`: its cause key (`settlement::cause`, or one of `error`).
  };

  /// A release with `settlement::retry_at` set: not attempted, claimable again at `retry_at`
  /// (its attempt given back; later rows of its aggregate wait behind it).
  struct deferral {
    std::int64_t seq;     ///< The sequence of the row (`message::sequence`).
    time_point retry_at;  ///< When the row is claimable again.
    /// Storable: the last error the row gets if it has none (`settlement::deferral_error`),
    /// the mark that tells the stats a deferred row from a scheduled event.
    std::string error;
  };

  std::vector<std::int64_t> published;  ///< Sequences confirmed by the transport.
  std::vector<std::int64_t> released;   ///< Sequences not attempted, claimable at once.
  std::vector<deferral> deferred;       ///< Not attempted, claimable later, in batch order.
  std::vector<failure> failed;          ///< Retries and dead letters, in batch order.

  /// Splits `fates` (index-aligned with `batch.messages`).
  /// @throws outbox::error `misconfigured` unless there is one fate per message.
  static settle_plan of(const claimed_batch& batch, std::span<const settlement> fates,
                        const char* adapter) {
    batch.require_one_fate_each(fates.size(), adapter);
    settle_plan p;
    p.published.reserve(fates.size());
    for (std::size_t i = 0; i < fates.size(); ++i) {
      const auto seq = batch.messages[i].sequence;
      const auto& f = fates[i];
      switch (f.what) {
        case settlement::kind::published:
          p.published.push_back(seq);
          break;
        case settlement::kind::release:
          if (f.retry_at > time_point{})
            p.deferred.push_back({seq, f.retry_at, storable_text(f.deferral_error())});
          else
            p.released.push_back(seq);
          break;
        case settlement::kind::retry:
          p.failed.push_back({seq, fate_code::retry, f.retry_at, storable_text(f.error)});
          break;
        case settlement::kind::dead:
          p.failed.push_back(
              {seq, fate_code::dead, f.retry_at, storable_text(f.error),
               f.cause.empty() ? cause_key("unknown", f.error) : storable_text(f.cause)});
          break;
      }
    }
    return p;
  }

  /// How many fates the plan holds.
  [[nodiscard]] std::size_t size() const noexcept {
    return published.size() + released.size() + deferred.size() + failed.size();
  }

  /// `r` with `fenced` counted: the fates that touched no row were no longer held under the
  /// batch's claim (another claim took them over), and were left untouched.
  [[nodiscard]] settle_result finish(settle_result r) const noexcept {
    const std::size_t applied = r.published + r.retried + r.dead + r.released;
    r.fenced = size() > applied ? size() - applied : 0;
    return r;
  }
};

}  // namespace outbox::sql
