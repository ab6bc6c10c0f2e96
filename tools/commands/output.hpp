#pragma once
// What the `outbox` tool's subcommands print with: progress lines, dead letters as JSON.

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <outbox/outbox.hpp>

#include "../common.hpp"

namespace outbox_tool {

/// Progress of a long operation: a line rewritten in place on a terminal (stderr), or one plain
/// line per step when stderr is not one (logs, pipes).
class progress {
 public:
  explicit progress(std::string what) : what_(std::move(what)), tty_(::isatty(2) == 1) {}
  void step(std::size_t done, std::optional<std::size_t> total = std::nullopt) {
    std::string line = what_ + " " + std::to_string(done);
    if (total) {
      line += " of " + std::to_string(*total);
      if (tty_ && *total > 0) {
        const std::size_t width = 30, filled = std::min(width, done * width / *total);
        line = "[" + std::string(filled, '#') + std::string(width - filled, '.') + "] " + line;
      }
    }
    if (tty_) {
      std::fprintf(stderr, "\r%s\033[K", line.c_str());
      drawn_ = true;
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }
  ~progress() {
    if (drawn_) std::fputc('\n', stderr);
  }

 private:
  std::string what_;
  bool tty_;
  bool drawn_ = false;
};

inline std::string base64(std::string_view bytes) {
  static constexpr char alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const auto b = [&](std::size_t k) {
      return k < bytes.size() ? static_cast<unsigned>(static_cast<unsigned char>(bytes[k])) : 0U;
    };
    const unsigned v = (b(i) << 16) | (b(i + 1) << 8) | b(i + 2);
    out.push_back(alphabet[(v >> 18) & 63]);
    out.push_back(alphabet[(v >> 12) & 63]);
    out.push_back(i + 1 < bytes.size() ? alphabet[(v >> 6) & 63] : '=');
    out.push_back(i + 2 < bytes.size() ? alphabet[v & 63] : '=');
  }
  return out;
}

/// A dead letter as JSON; `whole`: with its content type, headers and payload (JSON as JSON,
/// anything else as base64).
inline nlohmann::json to_json(const outbox::dead_letter& d, bool whole) {
  nlohmann::json j{{"id", d.msg.id.to_string()},
                   {"aggregate_type", d.msg.aggregate_type},
                   {"aggregate_id", d.msg.aggregate_id},
                   {"event_type", d.msg.event_type},
                   {"attempts", d.msg.attempts},
                   {"last_error", d.last_error},
                   {"dead_at", iso8601(d.dead_at)},
                   {"created_at", iso8601(d.msg.created_at)},
                   {"cause", d.cause},
                   {"replays", d.replays}};
  if (d.replays > 0) j["replayed_at"] = iso8601(d.replayed_at);
  if (whole) {
    j["content_type"] = d.msg.content_type;
    j["headers"] = d.msg.headers;
    if (outbox::is_json_content_type(d.msg.content_type) && nlohmann::json::accept(d.msg.payload))
      j["payload"] = nlohmann::json::parse(d.msg.payload);
    else
      j["payload_base64"] = base64(d.msg.payload);
  }
  return j;
}

inline outbox::uuid parse_id(const std::string& text) {
  const auto id = outbox::uuid::parse(text);
  if (!id) throw usage_error("not an event id (UUID): '" + text + "'");
  return *id;
}

}  // namespace outbox_tool
