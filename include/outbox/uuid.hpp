#pragma once
/// @file
/// UUIDv7 event ids (RFC 9562): 48-bit Unix milliseconds, version 7, a 12-bit counter in rand_a
/// (RFC 9562 section 6.2, method 1) so ids from one process are strictly increasing, 62 random
/// bits in rand_b.

#include <array>
#include <chrono>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <string_view>

namespace outbox {

/// A 128-bit UUID, compared bytewise (so UUIDv7 values compare in time order).
class uuid {
 public:
  /// The 16 bytes, in the order of the text form (most significant first).
  using bytes_type = std::array<std::uint8_t, 16>;

  /// The nil UUID (all bytes zero).
  constexpr uuid() noexcept = default;
  /// The UUID of bytes `b`, taken as they are (version and variant are not checked).
  constexpr explicit uuid(const bytes_type& b) noexcept : bytes_(b) {}

  /// Parses the canonical 8-4-4-4-12 form (either case). Returns `nullopt` on anything else.
  [[nodiscard]] static std::optional<uuid> parse(std::string_view s) noexcept {
    if (s.size() != 36) return std::nullopt;
    bytes_type b{};
    std::size_t j = 0;
    for (std::size_t i = 0; i < 36;) {
      if (i == 8 || i == 13 || i == 18 || i == 23) {
        if (s[i] != '-') return std::nullopt;
        ++i;
        continue;
      }
      const int hi = hex_value(s[i]);
      const int lo = hex_value(s[i + 1]);
      if (hi < 0 || lo < 0) return std::nullopt;
      b[j++] = static_cast<std::uint8_t>(hi << 4 | lo);
      i += 2;
    }
    return uuid{b};
  }

  /// Canonical lowercase text form, 36 characters.
  [[nodiscard]] std::string to_string() const {
    static constexpr char digits[] = "0123456789abcdef";
    std::string s(36, '-');
    std::size_t j = 0;
    for (std::size_t i = 0; i < 16; ++i) {
      if (i == 4 || i == 6 || i == 8 || i == 10) ++j;
      s[j++] = digits[bytes_[i] >> 4];
      s[j++] = digits[bytes_[i] & 0xF];
    }
    return s;
  }

  /// The 16 bytes.
  [[nodiscard]] constexpr const bytes_type& bytes() const noexcept { return bytes_; }
  /// The version field (the high nibble of byte 6): 7 for a UUIDv7, 0 for the nil UUID.
  [[nodiscard]] constexpr int version() const noexcept { return bytes_[6] >> 4; }
  /// True for the RFC 9562 variant (bits 10xx).
  [[nodiscard]] constexpr bool rfc_variant() const noexcept { return (bytes_[8] & 0xC0) == 0x80; }
  /// True for the nil UUID (all bytes zero, the default).
  [[nodiscard]] constexpr bool is_nil() const noexcept { return *this == uuid{}; }

  /// For a UUIDv7: the Unix time in milliseconds it carries.
  [[nodiscard]] constexpr std::uint64_t unix_ms() const noexcept {
    std::uint64_t ms = 0;
    for (std::size_t i = 0; i < 6; ++i) ms = ms << 8 | bytes_[i];
    return ms;
  }

  /// Bytewise order: UUIDv7 values compare in time order.
  friend constexpr auto operator<=>(const uuid&, const uuid&) noexcept = default;
  /// Writes the canonical text form (`to_string`).
  friend std::ostream& operator<<(std::ostream& os, const uuid& u) { return os << u.to_string(); }
  /// Bytewise equality.
  friend constexpr bool operator==(const uuid&, const uuid&) noexcept = default;

 private:
  static constexpr int hex_value(char c) noexcept {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  bytes_type bytes_{};
};

/// Generates UUIDv7 values that are strictly increasing within one generator, even when the clock
/// stands still or steps back (the timestamp field is then carried forward, as RFC 9562 allows).
/// Thread-safe.
class uuid_v7_generator {
 public:
  uuid_v7_generator() : rng_(seed()) {}

  /// The next id, for the current `std::chrono::system_clock` millisecond (see `next`).
  [[nodiscard]] uuid operator()() { return next(now_ms()); }

  /// Deterministic entry point for tests: the id for a given millisecond.
  [[nodiscard]] uuid next(std::uint64_t unix_ms) {
    std::uint64_t ms;
    std::uint64_t counter;
    std::uint64_t random;
    {
      std::lock_guard lock(mutex_);
      if (unix_ms > last_ms_) {
        last_ms_ = unix_ms;
        // Start the counter in the lower half so it has room to grow within the millisecond.
        counter_ = rng_() & 0x7FF;
      } else if (++counter_ > 0xFFF) {
        ++last_ms_;  // counter exhausted: borrow the next millisecond
        counter_ = rng_() & 0x7FF;
      }
      ms = last_ms_;
      counter = counter_;
      random = rng_();
    }
    uuid::bytes_type b{};
    for (std::size_t i = 0; i < 6; ++i) b[i] = static_cast<std::uint8_t>(ms >> (40 - 8 * i));
    b[6] = static_cast<std::uint8_t>(0x70 | (counter >> 8));
    b[7] = static_cast<std::uint8_t>(counter);
    for (std::size_t i = 8; i < 16; ++i)
      b[i] = static_cast<std::uint8_t>(random >> (56 - 8 * (i - 8)));
    b[8] = static_cast<std::uint8_t>(0x80 | (b[8] & 0x3F));
    return uuid{b};
  }

 private:
  static std::uint64_t now_ms() {
    using namespace std::chrono;
    return static_cast<std::uint64_t>(
        duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
  }
  static std::uint64_t seed() {
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }

  std::mutex mutex_;
  std::mt19937_64 rng_;
  std::uint64_t last_ms_ = 0;
  std::uint64_t counter_ = 0;
};

/// A process-wide UUIDv7 from a shared generator.
[[nodiscard]] inline uuid make_uuid_v7() {
  static uuid_v7_generator generator;
  return generator();
}

}  // namespace outbox

/// Hashes an `outbox::uuid` (its random last 8 bytes mixed with its timestamp), so ids can key
/// unordered containers.
template <>
struct std::hash<outbox::uuid> {
  /// The hash of `u`.
  std::size_t operator()(const outbox::uuid& u) const noexcept {
    // The last 8 bytes of a UUIDv7 are random: a fine hash on their own.
    std::uint64_t h = 0;
    for (std::size_t i = 8; i < 16; ++i) h = h << 8 | u.bytes()[i];
    return static_cast<std::size_t>(h ^ u.unix_ms());
  }
};
