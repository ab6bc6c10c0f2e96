#pragma once
/// @file
/// JetStream set-up shared by the publisher and the receiver: the stream the events go to
/// (`stream_options`, `ensure_stream`): created when missing, or required to exist.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nats/nats.h>

#include <outbox/nats/connection.hpp>

namespace outbox::nats {

/// The JetStream stream that captures the events' subjects.
struct stream_options {
  /// The stream's name; empty: no set-up, no check (the publisher publishes and the server's
  /// answer says whether a stream captured each message).
  std::string name = "OUTBOX";
  /// true: created with the settings below when it does not exist (an existing stream is used
  /// as it is); false: required to exist (missing = `misconfigured`).
  bool create = true;
  /// The subjects it captures, when created (the default pattern's).
  std::vector<std::string> subjects{"outbox.event.>"};
  /// JetStream drops a message whose `Nats-Msg-Id` (the event id) it stored within this
  /// window: a relay that publishes a batch again after a lost confirm puts no copy in the
  /// stream. When created; 0: the server's default (2 minutes).
  std::chrono::milliseconds duplicate_window{std::chrono::minutes(2)};
  std::int64_t max_msgs = -1;   ///< When created: the most messages kept (-1: no limit).
  std::int64_t max_bytes = -1;  ///< When created: the most bytes kept (-1: no limit).
  /// When created: at a limit, refuse new messages (each publish fails `permanent`) instead of
  /// discarding the oldest (the server's default, which loses events nobody consumed).
  bool discard_new = true;
  bool memory = false;  ///< When created: memory storage instead of files.
};

/// Makes sure the stream of `o` exists on `js` (see `stream_options`).
/// @throws outbox::error `misconfigured` (missing and not to be created, refused), or
///         `transient` (JetStream did not answer).
inline void ensure_stream(connection& conn, jsCtx* js, const stream_options& o) {
  if (o.name.empty()) return;
  jsStreamInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&info, js, o.name.c_str(), nullptr, &code);
  jsStreamInfo_Destroy(info);
  if (s == NATS_OK) return;
  if (code != JSStreamNotFoundErr) conn.fail(s, "stream " + o.name + ": info", code);
  if (!o.create)
    throw error(errc::misconfigured, "nats", std::to_string(code),
                "the stream " + o.name + " does not exist (stream_options.create is false)");
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  std::vector<const char*> subjects;
  for (const auto& subject : o.subjects) subjects.push_back(subject.c_str());
  cfg.Name = o.name.c_str();
  cfg.Subjects = subjects.data();
  cfg.SubjectsLen = static_cast<int>(subjects.size());
  cfg.Storage = o.memory ? js_MemoryStorage : js_FileStorage;
  cfg.MaxMsgs = o.max_msgs;
  cfg.MaxBytes = o.max_bytes;
  cfg.Discard = o.discard_new ? js_DiscardNew : js_DiscardOld;
  cfg.Duplicates = std::chrono::duration_cast<std::chrono::nanoseconds>(o.duplicate_window).count();
  s = js_AddStream(&info, js, &cfg, nullptr, &code);
  jsStreamInfo_Destroy(info);
  // Another client created it meanwhile: fine.
  if (s != NATS_OK && code != JSStreamNameExistErr)
    conn.fail(s, "stream " + o.name + ": create", code);
}

}  // namespace outbox::nats
