#pragma once
/// @file
/// How a relay keeps each aggregate's order inside a batch: waves, predecessor stamps and the
/// hold-back after a failure. Pure functions over a claimed batch (in the store's order), no I/O;
/// `relay::publish_batch` composes them.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <outbox/message.hpp>

namespace outbox::ordering {

/// Half-open index ranges `[begin, end)` of a batch, one per wave, in publish order.
using wave_ranges = std::vector<std::pair<std::size_t, std::size_t>>;

/// Orders `msgs` into waves: wave k holds the k-th message of each aggregate, and the waves are
/// published one after another, so a later message of an aggregate is sent only after the
/// earlier one was confirmed. Stable: each wave keeps the batch's order. Almost every batch is a
/// single wave (no aggregate twice), and is then left as it is.
inline wave_ranges arrange_waves(std::span<message> msgs) {
  if (msgs.empty()) return {};
  std::vector<std::uint32_t> wave(msgs.size());
  // Keys view the messages' own strings: no allocation per message on this hot path.
  struct key_hash {
    std::size_t operator()(const std::pair<std::string_view, std::string_view>& k) const noexcept {
      const std::hash<std::string_view> h;
      return h(k.first) * 31 + h(k.second);
    }
  };
  std::unordered_map<std::pair<std::string_view, std::string_view>, std::uint32_t, key_hash> seen;
  seen.reserve(msgs.size());
  std::uint32_t max_wave = 0;
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    auto [it, fresh] = seen.try_emplace({msgs[i].aggregate_type, msgs[i].aggregate_id}, 0);
    if (!fresh) max_wave = std::max(max_wave, ++it->second);
    wave[i] = it->second;
  }
  if (max_wave == 0) return {{0, msgs.size()}};
  std::vector<std::size_t> order(msgs.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return wave[a] < wave[b]; });
  std::vector<message> sorted;
  sorted.reserve(msgs.size());
  for (auto i : order) sorted.push_back(std::move(msgs[i]));
  std::move(sorted.begin(), sorted.end(), msgs.begin());
  wave_ranges ranges;
  std::size_t start = 0;
  for (std::size_t i = 1; i <= order.size(); ++i) {
    if (i == order.size() || wave[order[i]] != wave[order[start]]) {
      ranges.emplace_back(start, i);
      start = i;
    }
  }
  return ranges;
}

/// Moves the messages of `wave` whose aggregate failed in an earlier wave behind the others
/// (stable), so that none overtakes its failed predecessor. Returns how many lead the wave: the
/// ones to send; the rest stay unsettled (released).
inline std::size_t defer_behind_failed(std::span<message> wave,
                                       const std::unordered_set<std::string>& failed_aggregates) {
  if (failed_aggregates.empty()) return wave.size();
  const auto mid = std::stable_partition(wave.begin(), wave.end(), [&](const message& m) {
    return !failed_aggregates.contains(detail::aggregate_key(m));
  });
  return static_cast<std::size_t>(mid - wave.begin());
}

/// Stamps each message of `msgs` that has an earlier one of its aggregate among them with that
/// one's id (`predecessor_header`); the first of each aggregate carries none (its predecessor was
/// confirmed before it was claimed), and a stale stamp on it is removed.
inline void stamp_predecessors(std::span<message> msgs) {
  std::unordered_map<std::string, std::size_t> last;
  last.reserve(msgs.size());
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    message& m = msgs[i];
    auto [it, fresh] = last.try_emplace(detail::aggregate_key(m), i);
    if (fresh) {
      if (auto h = m.headers.find(predecessor_header); h != m.headers.end()) m.headers.erase(h);
      continue;
    }
    m.headers.insert_or_assign(std::string(predecessor_header), msgs[it->second].id.to_string());
    it->second = i;
  }
}

/// Of a batch sent in one call (`fates[i]` is what became of `msgs[i]`): after the first message
/// of an aggregate that failed and will be retried, its later messages that were not confirmed
/// are released (they follow after the retry, their attempt given back: they did not fail on
/// their own account), as the waves do. A dead letter does not hold its aggregate back. Returns
/// how many later messages were confirmed all the same (a transport that broke its
/// `keeps_publish_order` promise, or stamped messages the consumer puts back in order).
inline std::size_t hold_back_after_failures(std::span<const message> msgs,
                                            std::span<settlement> fates) {
  std::unordered_set<std::string> failed;
  std::size_t reordered = 0;
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    auto& fate = fates[i];
    if (fate.what == settlement::kind::dead) continue;
    const bool behind = !failed.empty() && failed.contains(detail::aggregate_key(msgs[i]));
    if (fate.what == settlement::kind::published) {
      reordered += behind ? 1 : 0;
    } else if (behind) {
      fate = settlement{};  // release
    } else {
      failed.insert(detail::aggregate_key(msgs[i]));
    }
  }
  return reordered;
}

}  // namespace outbox::ordering
