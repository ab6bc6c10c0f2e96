#pragma once
// Prometheus text exposition (format 0.0.4) for `outbox relay`: counters, gauges and histograms
// with fixed buckets, written by the relays' threads and read by the metrics server's.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <outbox/message.hpp>
#include <outbox/validate.hpp>

namespace outbox_tool {

/// The length of the valid UTF-8 sequence of 2 to 4 bytes at `s[i]`; 0 when there is none.
inline std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const auto lead = static_cast<unsigned char>(s[i]);
  const std::size_t n = lead >= 0xC2 && lead <= 0xDF   ? 2
                        : lead >= 0xE0 && lead <= 0xEF ? 3
                        : lead >= 0xF0 && lead <= 0xF4 ? 4
                                                       : 0;
  if (n == 0 || i + n > s.size() || !outbox::is_valid_utf8(s.substr(i, n))) return 0;
  return n;
}

/// A Prometheus number: integral values without a fraction, others with enough digits.
inline std::string prom_number(double v) {
  char buf[64];
  if (v == static_cast<double>(static_cast<std::int64_t>(v)) && v < 1e15 && v > -1e15)
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  else
    std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

/// A label value, escaped (backslash, double quote, line feed), as valid UTF-8.
inline std::string prom_label(const std::string& v) {
  // Valid UTF-8 without control characters, or Prometheus refuses the whole scrape: an invalid
  // byte or a control character (other than \n, escaped) becomes U+FFFD.
  static constexpr std::string_view replacement = "\xEF\xBF\xBD";
  std::string out;
  for (std::size_t i = 0; i < v.size();) {
    const auto c = static_cast<unsigned char>(v[i]);
    if (c == '\\' || c == '"') {
      out += {'\\', static_cast<char>(c)};
      ++i;
    } else if (c == '\n') {
      out += "\\n";
      ++i;
    } else if (c < 0x20 || c == 0x7F) {
      out += replacement;
      ++i;
    } else if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
    } else {
      const std::size_t n = utf8_sequence_length(v, i);
      if (n == 0) {
        out += replacement;
        ++i;
      } else {
        out.append(v, i, n);
        i += n;
      }
    }
  }
  return out;
}

/// The per-type backlog by label value: types whose labels are the same once made valid UTF-8
/// (`prom_label`) are one series, their counts added and the oldest age kept (two samples of
/// one series would fail the whole scrape). In label order.
inline std::vector<outbox::aggregate_type_stats> by_label(
    const std::vector<outbox::aggregate_type_stats>& types) {
  std::map<std::string, outbox::backlog_stats> merged;
  for (const auto& t : types) {
    auto& m = merged[prom_label(t.aggregate_type)];
    m.pending += t.stats.pending;
    m.in_flight += t.stats.in_flight;
    m.dead += t.stats.dead;
    m.waiting_retry += t.stats.waiting_retry;
    m.oldest_pending_age = std::max(m.oldest_pending_age, t.stats.oldest_pending_age);
  }
  std::vector<outbox::aggregate_type_stats> out;
  out.reserve(merged.size());
  for (auto& [label, stats] : merged) out.push_back({label, stats});
  return out;
}

/// The label of the series that sums the aggregate types past `--metrics-max-types`.
inline constexpr std::string_view other_types_label = "_other";

/// `labelled` (from `by_label`) cut to the `max_types` types with the largest backlog (most
/// pending, then the label), in label order, then one `_other` series summing the rest (counts
/// added, the oldest age kept) when there is a rest: the page stays bounded however many types
/// the outbox holds. A type labelled `_other` is summed there too, so the label stays unique.
inline std::vector<outbox::aggregate_type_stats> cap_types(
    std::vector<outbox::aggregate_type_stats> labelled, std::size_t max_types) {
  if (labelled.size() <= max_types) return labelled;
  std::sort(labelled.begin(), labelled.end(), [](const auto& a, const auto& b) {
    const bool a_other = a.aggregate_type == other_types_label;
    const bool b_other = b.aggregate_type == other_types_label;
    if (a_other != b_other) return b_other;  // a type named "_other" last: in the rest
    if (a.stats.pending != b.stats.pending) return a.stats.pending > b.stats.pending;
    return a.aggregate_type < b.aggregate_type;
  });
  outbox::aggregate_type_stats other{std::string(other_types_label), {}};
  for (auto t = labelled.begin() + static_cast<std::ptrdiff_t>(max_types); t != labelled.end();
       ++t) {
    other.stats.pending += t->stats.pending;
    other.stats.in_flight += t->stats.in_flight;
    other.stats.dead += t->stats.dead;
    other.stats.waiting_retry += t->stats.waiting_retry;
    other.stats.oldest_pending_age =
        std::max(other.stats.oldest_pending_age, t->stats.oldest_pending_age);
  }
  labelled.resize(max_types);
  std::sort(labelled.begin(), labelled.end(),
            [](const auto& a, const auto& b) { return a.aggregate_type < b.aggregate_type; });
  labelled.push_back(std::move(other));
  return labelled;
}

/// `# HELP` and `# TYPE` lines, then one sample.
inline void prom_metric(std::string& out, const std::string& name, const char* type,
                        const char* help, double value) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
         prom_number(value) + "\n";
}

/// A histogram of durations in seconds, with fixed bucket bounds. Thread-safe.
class histogram {
 public:
  explicit histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}

  void observe(double seconds) {
    std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < bounds_.size(); ++i)
      if (seconds <= bounds_[i]) ++counts_[i];
    ++count_;
    sum_ += seconds;
  }

  void render(std::string& out, const std::string& name, const char* help) const {
    std::lock_guard lock(mutex_);
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
    for (std::size_t i = 0; i < bounds_.size(); ++i)
      out += name + "_bucket{le=\"" + prom_number(bounds_[i]) + "\"} " +
             std::to_string(counts_[i]) + "\n";
    out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
    out += name + "_sum " + prom_number(sum_) + "\n";
    out += name + "_count " + std::to_string(count_) + "\n";
  }

 private:
  mutable std::mutex mutex_;
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;  // cumulative, as exposed
  std::uint64_t count_ = 0;
  double sum_ = 0;
};

/// Bounds from 1 ms to 60 s, for batch and publish durations and an event's commit-to-confirm
/// latency.
inline std::vector<double> latency_bounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

}  // namespace outbox_tool
