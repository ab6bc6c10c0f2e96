#pragma once
/// @file
/// The cause key of a dead letter: what groups thousands of dead letters of one cause (a missing
/// AMQP binding, a topic Kafka refuses) into one line for an operator. A pure function, so every
/// store stores the same key for the same error.

#include <cctype>
#include <cstddef>
#include <string>
#include <string_view>

#include <outbox/error.hpp>

namespace outbox {

/// The longest cause key, in bytes: the key is a column the stores group by.
inline constexpr std::size_t cause_key_max = 200;

namespace detail {

[[nodiscard]] inline bool cause_hex(char c) noexcept {
  return std::isxdigit(static_cast<unsigned char>(c)) != 0;
}
[[nodiscard]] inline bool cause_word(char c) noexcept {
  const auto u = static_cast<unsigned char>(c);
  return std::isalnum(u) != 0 || c == '_' || c == '-' || c == '.' || u >= 0x80;
}
/// A word (letters, digits, '_', '-', '.') that holds a digit: an id, a number, a UUID, an
/// address, a version; the thing that differs between dead letters of one cause.
[[nodiscard]] inline bool cause_variable(std::string_view w) noexcept {
  for (const char c : w)
    if (std::isdigit(static_cast<unsigned char>(c)) != 0) return true;
  return false;
}

}  // namespace detail

/// The normalised form of an error message: each quoted value ('...', "...", `...`) becomes
/// `'?'`, each word holding a digit (an id, a UUID, a number, an offset, "10.0.0.1:5672")
/// becomes `#`, runs of white space become one space, letters keep their case, and the result
/// is cut to `cause_key_max` bytes (at a whole character). Two dead letters of one cause whose
/// messages differ only by ids, numbers and quoted names get the same text.
[[nodiscard]] inline std::string normalise_error(std::string_view message) {
  std::string out;
  out.reserve(std::min(message.size(), cause_key_max));
  const auto push = [&](std::string_view s) {
    if (s == " " && (out.empty() || out.back() == ' ')) return;
    out.append(s);
  };
  for (std::size_t i = 0; i < message.size();) {
    const char c = message[i];
    if (c == '\'' || c == '"' || c == '`') {
      const auto close = message.find(c, i + 1);
      if (close != std::string_view::npos) {
        push("'?'");
        i = close + 1;
        continue;
      }
    }
    if (detail::cause_word(c)) {
      std::size_t j = i;
      while (j < message.size() && detail::cause_word(message[j])) ++j;
      const auto w = message.substr(i, j - i);
      if (detail::cause_variable(w)) {
        // "a.b.c." ends a sentence: keep the full stop.
        push("#");
        if (w.back() == '.') push(".");
      } else {
        push(w);
      }
      i = j;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c)) != 0 ||
        std::iscntrl(static_cast<unsigned char>(c)) != 0)
      push(" ");
    else
      out.push_back(c);
    ++i;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (out.size() > cause_key_max) {
    std::size_t cut = cause_key_max;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
    out.resize(cut);
  }
  return out;
}

/// The cause key of a dead letter: `class: normalised message` (`normalise_error`), the class
/// being what made the relay give up ("permanent" for a permanent transport error, "transient"
/// for a retry policy spent on transient ones, "spent" for attempts that never settled,
/// "unreadable" for a row the claim could not read), at most `cause_key_max` bytes.
[[nodiscard]] inline std::string cause_key(std::string_view cause_class, std::string_view message) {
  std::string key(cause_class);
  key += ": ";
  key += normalise_error(message);
  if (key.size() > cause_key_max) {
    std::size_t cut = cause_key_max;
    while (cut > 0 && (static_cast<unsigned char>(key[cut]) & 0xC0) == 0x80) --cut;
    key.resize(cut);
  }
  return key;
}

/// The cause class of a transport failure of class `kind` ("permanent", "transient", ...).
[[nodiscard]] inline std::string_view cause_class(errc kind) noexcept {
  switch (kind) {
    case errc::transient:
      return "transient";
    case errc::permanent:
      return "permanent";
    case errc::in_doubt:
      return "in_doubt";
    case errc::duplicate:
      return "duplicate";
    case errc::misconfigured:
      return "misconfigured";
    case errc::invalid_input:
      return "invalid_input";
  }
  return "unknown";
}

}  // namespace outbox
