#pragma once
/// @file
/// Label values Prometheus can read, and label sets that stay bounded: an aggregate type is
/// application data, and a scrape with one label value that is not UTF-8, or with a series per
/// type of an open-ended set, fails or swamps the server.

#include <algorithm>
#include <cstddef>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <outbox/message.hpp>
#include <outbox/validate.hpp>

namespace outbox::prometheus {

/// The label value of the series that sums what is past a bound (`bounded_labels`,
/// `cap_types`).
inline constexpr std::string_view other_label = "_other";

/// `v` as a label value Prometheus reads: valid UTF-8 without control characters (an invalid
/// byte, or a control character other than line feed, becomes U+FFFD; one such byte fails the
/// whole scrape). Not escaped: `prometheus::TextSerializer` escapes backslash, double quote and
/// line feed.
inline std::string label_value(std::string_view v) {
  static constexpr std::string_view replacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size();) {
    const auto c = static_cast<unsigned char>(v[i]);
    if (c == '\n' || (c >= 0x20 && c < 0x7F)) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    const std::size_t n = c >= 0xC2 && c <= 0xDF   ? 2
                          : c >= 0xE0 && c <= 0xEF ? 3
                          : c >= 0xF0 && c <= 0xF4 ? 4
                                                   : 0;
    if (n != 0 && i + n <= v.size() && outbox::is_valid_utf8(v.substr(i, n))) {
      out.append(v, i, n);
      i += n;
    } else {
      out += replacement;
      ++i;
    }
  }
  return out;
}

/// Label values for an open-ended set (aggregate types seen by a consumer): the first
/// `max_values` distinct values (after `label_value`) get their own, every later one
/// `other_label`, so the series stay bounded however many values come. A value equal to
/// `other_label` is summed there too. Thread-safe.
class bounded_labels {
 public:
  /// @param max_values how many values get a label of their own (0: all go to `other_label`).
  explicit bounded_labels(std::size_t max_values) : max_(max_values) {}

  /// The label for `value`: its own while there is room or once it has one, else `other_label`.
  std::string operator()(std::string_view value) {
    std::string label = label_value(value);
    if (label == other_label) return label;
    std::lock_guard lock(mutex_);
    if (seen_.count(label) != 0) return label;
    if (seen_.size() < max_) {
      seen_.insert(label);
      return label;
    }
    return std::string(other_label);
  }

 private:
  std::size_t max_;
  std::mutex mutex_;
  std::set<std::string, std::less<>> seen_;
};

/// A backlog per aggregate type by label value: types whose labels are the same once made valid
/// UTF-8 (`label_value`) are one series, their counts added and the oldest age kept (two
/// samples of one series would fail the whole scrape). In label order.
inline std::vector<outbox::aggregate_type_stats> by_label(
    const std::vector<outbox::aggregate_type_stats>& types) {
  std::map<std::string, outbox::backlog_stats> merged;
  for (const auto& t : types) merged[label_value(t.aggregate_type)] += t.stats;
  std::vector<outbox::aggregate_type_stats> out;
  out.reserve(merged.size());
  for (auto& [label, stats] : merged) out.push_back({label, stats});
  return out;
}

/// `labelled` (from `by_label`) cut to the `max_types` types with the largest backlog (most
/// pending, then the label), in label order, then one `other_label` series summing the rest
/// (counts added, the oldest age kept) when there is a rest: bounded however many types the
/// outbox holds. A type labelled `_other` is summed there too, so the label stays unique.
inline std::vector<outbox::aggregate_type_stats> cap_types(
    std::vector<outbox::aggregate_type_stats> labelled, std::size_t max_types) {
  if (labelled.size() <= max_types) return labelled;
  std::sort(labelled.begin(), labelled.end(), [](const auto& a, const auto& b) {
    const bool a_other = a.aggregate_type == other_label;
    const bool b_other = b.aggregate_type == other_label;
    if (a_other != b_other) return b_other;  // a type named "_other" last: in the rest
    if (a.stats.pending != b.stats.pending) return a.stats.pending > b.stats.pending;
    return a.aggregate_type < b.aggregate_type;
  });
  outbox::aggregate_type_stats other{std::string(other_label), {}};
  for (auto t = labelled.begin() + static_cast<std::ptrdiff_t>(max_types); t != labelled.end(); ++t)
    other.stats += t->stats;
  labelled.resize(max_types);
  std::sort(labelled.begin(), labelled.end(),
            [](const auto& a, const auto& b) { return a.aggregate_type < b.aggregate_type; });
  labelled.push_back(std::move(other));
  return labelled;
}

}  // namespace outbox::prometheus
