#pragma once
/// @file
/// The log-tailing store's reading: the replication stream's messages into the ledger, and the
/// ledger's position reported back to the server as the slot's confirmed position.

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <outbox/error.hpp>
#include <outbox/postgresql/detail/replication.hpp>
#include <outbox/postgresql/detail/tail_ledger.hpp>
#include <outbox/postgresql/detail/wal.hpp>

namespace outbox::postgresql::detail {

/// One replication stream and its ledger. What throws leaves the reader as it was: the caller
/// closes it (`close`), and the next stream shows again what was read and not settled.
class tail_reader {
 public:
  [[nodiscard]] tail_ledger& ledger() noexcept { return ledger_; }
  [[nodiscard]] const tail_ledger& ledger() const noexcept { return ledger_; }
  [[nodiscard]] bool is_open() const noexcept { return stream_.is_open(); }
  [[nodiscard]] int socket() const noexcept { return stream_.socket(); }
  /// The last read stopped at the read-ahead bound: more may wait in libpq's buffer, where
  /// the socket would not show it.
  [[nodiscard]] bool more_buffered() const noexcept { return more_buffered_; }

  /// Streams `slot` through `publication` from `start`; the server has `confirmed` for it.
  void open(const std::string& conninfo, const std::string& slot, const std::string& publication,
            wal::lsn start, wal::lsn confirmed) {
    acked_ = confirmed;
    stream_.open(conninfo, slot, publication, start);
    last_ack_ = std::chrono::steady_clock::now();
  }

  /// Closes the stream and forgets what was read and not settled.
  void close() noexcept {
    stream_.close();
    ledger_.reset();
    more_buffered_ = false;
  }

  /// Reads what the stream has into the ledger, until `read_ahead` events are ready.
  /// @throws outbox::error `transient` for a malformed message, and when the server shuts down
  ///         and waits for a confirmation the ledger cannot give (something read is unsettled).
  void pump(std::size_t read_ahead, bool batch_out) {
    more_buffered_ = false;
    std::vector<replication_stream::frame> frames;
    while (true) {
      if (ledger_.ready() >= read_ahead) {
        more_buffered_ = true;
        break;
      }
      frames.clear();
      stream_.read(frames, 1'000);
      if (frames.empty()) break;
      for (const auto& f : frames) {
        const auto c = wal::decode_pgoutput(f.data);
        if (!c)
          throw error(
              errc::transient, "postgresql", {},
              "replication stream: a malformed pgoutput message at " + wal::format_lsn(f.start));
        ledger_.take(*c, f.start);
      }
    }
    if (stream_.server_draining() && !ledger_.caught_up(batch_out))
      throw error(errc::transient, "postgresql", {},
                  "the server is shutting down and waits for the slot to confirm the end of its "
                  "WAL: the stream is closed so that it can stop (the events after the slot's "
                  "position come again)");
  }

  /// Moves the ledger's position and reports it to the server when it moved, when the server
  /// asks, or every `status_interval`. Returns the progress to save, once per progress.
  std::optional<tail_progress> advance(bool batch_out, std::chrono::milliseconds status_interval) {
    ledger_.advance(batch_out, stream_.server_end());
    if (!stream_.is_open()) return std::nullopt;
    const auto now = std::chrono::steady_clock::now();
    const wal::lsn at = ledger_.position();
    if (at > acked_ || stream_.reply_requested() || now - last_ack_ >= status_interval) {
      stream_.acknowledge(at);
      acked_ = at;
      last_ack_ = now;
    }
    return ledger_.to_save();
  }

 private:
  replication_stream stream_;
  tail_ledger ledger_;
  wal::lsn acked_ = 0;  // the position the server last heard
  std::chrono::steady_clock::time_point last_ack_{};
  bool more_buffered_ = false;
};

}  // namespace outbox::postgresql::detail
