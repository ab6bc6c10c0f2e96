#pragma once
/// @file
/// How a relay decides each message's fate from what the transport said: published, retried at
/// a time, or dead-lettered. Pure functions over a batch and the transport's results, no I/O;
/// `relay::publish_batch` composes them with the ordering policy (`outbox/relay/order.hpp`).

#include <algorithm>
#include <cstddef>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <outbox/cause.hpp>
#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/retry.hpp>
#include <outbox/uuid.hpp>
#include <outbox/validate.hpp>

namespace outbox::fates {

/// Moves the messages whose earlier attempts never settled and are spent to the end of `msgs`
/// (stable) and makes them dead letters in `fates` (same indexes): a message that crashes the
/// relay would otherwise take down every relay that claims it. Returns how many may be sent.
template <concepts::retry_policy Retry>
std::size_t set_aside_spent(std::vector<message>& msgs, std::span<settlement> fates,
                            const Retry& retry) {
  const auto spent = std::stable_partition(
      msgs.begin(), msgs.end(), [&](const message& m) { return !retry.exhausted(m.attempts - 1); });
  const auto sendable = static_cast<std::size_t>(spent - msgs.begin());
  for (std::size_t i = sendable; i < msgs.size(); ++i) {
    fates[i].what = settlement::kind::dead;
    fates[i].error = "gave up after " + std::to_string(msgs[i].attempts - 1) +
                     " attempts that never settled (a relay stopped or crashed while "
                     "publishing it)";
    fates[i].cause = cause_key("spent", fates[i].error);
  }
  return sendable;
}

/// Decides the fate of each message of `wave` from the transport's `results` (matched by id, in
/// any order; a message without one had no confirm before the deadline): a confirm, or the
/// broker's `duplicate`, is published; `in_doubt` (sent, or not sent, and no answer from the
/// broker: it may have it) is deferred to `now` plus the policy's delay with its attempt given
/// back, never dead-lettered; `permanent`, or a spent retry policy, is dead; anything else is
/// retried at `now` plus the policy's delay. `fates` has the wave's indexes. Each failed or
/// deferred message's aggregate joins `failed_aggregates` (when given).
/// @throws outbox::error `misconfigured` when the transport reports a configuration error:
///         retrying cannot help, and dead-lettering would empty the outbox for nothing.
template <concepts::retry_policy Retry>
void decide(std::span<const message> wave, std::span<const publish_result> results,
            std::span<settlement> fates, const Retry& retry, std::mt19937_64& rng, time_point now,
            std::unordered_set<std::string>* failed_aggregates = nullptr) {
  // Results in the wave's order (the usual case) are read in place: no allocation between one
  // batch's confirms and the next batch's send.
  bool in_order = results.size() == wave.size();
  for (std::size_t i = 0; in_order && i < wave.size(); ++i) in_order = results[i].id == wave[i].id;
  std::vector<const publish_result*> by_pos;
  if (!in_order) {  // confirms came back in another order, or some are missing
    by_pos.assign(wave.size(), nullptr);
    std::unordered_map<uuid, std::size_t> index;
    index.reserve(wave.size());
    for (std::size_t i = 0; i < wave.size(); ++i) index.emplace(wave[i].id, i);
    for (const auto& r : results) {
      auto it = index.find(r.id);
      if (it != index.end() && by_pos[it->second] == nullptr) by_pos[it->second] = &r;
    }
  }
  for (std::size_t i = 0; i < wave.size(); ++i) {
    settlement& fate = fates[i];
    const publish_result* r = in_order ? &results[i] : by_pos[i];
    if (r != nullptr && (r->confirmed || r->error_class == errc::duplicate)) {
      fate.what = settlement::kind::published;
      continue;
    }
    const errc cls = r ? r->error_class : errc::transient;
    if (cls == errc::misconfigured)
      throw error(errc::misconfigured, "core", {},
                  "the transport reports a configuration error: " + (r ? r->error : ""));
    fate.error = r ? sanitize_text(r->error) : "no confirm before the publish timeout";
    const int attempt = wave[i].attempts;
    if (cls == errc::in_doubt) {
      // The broker's silence, not this message's failure, is not charged: a broker that froze
      // mid-batch would dead-letter events it stored. The row keeps its last error, else gets
      // this one. (Brokers answer out of send order, so the silence cannot be blamed on the
      // message from the other answers: a transport that can tell reports its own class.)
      fate.what = settlement::kind::release;
      fate.retry_at = now + retry.delay(attempt, rng);
    } else if (cls == errc::permanent || retry.exhausted(attempt)) {
      fate.what = settlement::kind::dead;
      fate.cause = cause_key(cause_class(cls), fate.error);
    } else {
      fate.what = settlement::kind::retry;
      fate.retry_at = now + retry.delay(attempt, rng);
    }
    if (failed_aggregates) failed_aggregates->insert(detail::aggregate_key(wave[i]));
  }
}

}  // namespace outbox::fates
