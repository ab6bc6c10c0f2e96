#pragma once
/// @file
/// A logical replication connection (libpq, `replication=database`) streaming `pgoutput` from a
/// slot: opened, read without blocking, acknowledged with standby status updates.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <libpq-fe.h>

#include <outbox/error.hpp>
#include <outbox/postgresql/detail/connection.hpp>
#include <outbox/postgresql/detail/wal.hpp>

namespace outbox::postgresql::detail {

/// A name PostgreSQL takes for a replication slot (lower-case letters, digits and underscores,
/// 1..63 characters); also used for publications here, so both can go into SQL unquoted.
[[nodiscard]] inline bool valid_slot_name(std::string_view s) noexcept {
  if (s.empty() || s.size() > 63) return false;
  for (const char ch : s)
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) return false;
  return true;
}

/// The walsenders of the streams this process closed last: a stream that finds one of them
/// still holding its slot (55006; it exits moments after the close) waits for it.
class closed_walsenders {
 public:
  static void add(int pid) {
    if (pid <= 0) return;
    std::lock_guard lock(mutex());
    auto& l = pids();
    l.push_back(pid);
    if (l.size() > 64) l.erase(l.begin());
  }
  [[nodiscard]] static bool contains(int pid) {
    std::lock_guard lock(mutex());
    const auto& l = pids();
    return std::find(l.begin(), l.end(), pid) != l.end();
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<int>& pids() {
    static std::vector<int> l;
    return l;
  }
};

/// One replication connection in COPY BOTH mode. Not thread-safe except `socket()`.
class replication_stream {
 public:
  /// What one `read` found: WAL data frames (each a `pgoutput` message), and the server's end
  /// of WAL as of its last keepalive.
  struct frame {
    wal::lsn start = 0;  ///< Where this message's WAL data starts.
    std::string data;    ///< One `pgoutput` message.
  };

  replication_stream() = default;
  replication_stream(replication_stream&& o) noexcept
      : conn_(std::exchange(o.conn_, nullptr)),
        server_end_(o.server_end_),
        reply_requested_(o.reply_requested_),
        requests_without_data_(o.requests_without_data_) {}
  replication_stream& operator=(replication_stream&& o) noexcept {
    if (this != &o) {
      close();
      conn_ = std::exchange(o.conn_, nullptr);
      server_end_ = o.server_end_;
      reply_requested_ = o.reply_requested_;
      requests_without_data_ = o.requests_without_data_;
    }
    return *this;
  }
  replication_stream(const replication_stream&) = delete;
  replication_stream& operator=(const replication_stream&) = delete;
  ~replication_stream() { close(); }

  [[nodiscard]] bool is_open() const noexcept { return conn_ != nullptr; }
  [[nodiscard]] int socket() const noexcept { return conn_ ? PQsocket(conn_) : -1; }
  /// The server's end of WAL from its last keepalive (0 before one came).
  [[nodiscard]] wal::lsn server_end() const noexcept { return server_end_; }
  /// The server asked for a status update (it closes a silent connection after
  /// `wal_sender_timeout`).
  [[nodiscard]] bool reply_requested() const noexcept { return reply_requested_; }
  /// The server asks for replies again and again with no WAL between them: it is shutting
  /// down, and its walsender will not exit (nor let the server stop) before our confirmed
  /// position reaches the end of its WAL. A healthy idle server asks once per half
  /// `wal_sender_timeout`.
  [[nodiscard]] bool server_draining() const noexcept { return requests_without_data_ >= 20; }

  /// Connects with `conninfo` (keywords or a URI; `replication=database` is added) and starts
  /// streaming `slot` from `start` (the server starts at the slot's confirmed position when that
  /// is later), with `pgoutput` protocol 1, `publication`, logical decoding messages, and rows
  /// in binary (PostgreSQL 14 and later).
  /// @throws outbox::error `misconfigured` (no such slot or publication, `wal_level` not
  ///         logical, no REPLICATION right, bad credentials), `transient` (server away, the slot
  ///         active on another connection).
  void open(const std::string& conninfo, std::string_view slot, std::string_view publication,
            wal::lsn start) {
    close();
    const char* keys[] = {"dbname", "replication", "fallback_application_name", nullptr};
    const char* values[] = {conninfo.c_str(), "database", "outbox-relay", nullptr};
    // expand_dbname: `conninfo` may be keywords or a URI; the later keywords override it.
    conn_ = PQconnectdbParams(keys, values, 1);
    if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) {
      std::string why = conn_ ? PQerrorMessage(conn_) : "out of memory";
      while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
      close();
      // libpq gives no SQLSTATE for a failed connection; a refused password or a missing
      // right would not heal by retrying, but neither can be told from a server away here.
      const bool auth = why.find("password authentication failed") != std::string::npos ||
                        why.find("no pg_hba.conf entry") != std::string::npos ||
                        why.find("must be superuser or replication role") != std::string::npos;
      throw error(auth ? errc::misconfigured : errc::transient, "postgresql", {},
                  "replication connection: " + why);
    }
    {
      const result r = query("SHOW wal_level");
      if (r.rows() == 1 && r.text(0, 0) != "logical")
        throw error(errc::misconfigured, "postgresql", {},
                    "log tailing needs the server setting wal_level = logical (it is '" +
                        std::string(r.text(0, 0)) + "'; set it in postgresql.conf and restart)");
    }
    // Quoted: the names are [a-z0-9_] (checked), which a keyword or a leading digit would
    // still break unquoted.
    std::string cmd = "START_REPLICATION SLOT \"" + std::string(slot) + "\" LOGICAL " +
                      wal::format_lsn(start) + " (proto_version '1', publication_names '\"" +
                      std::string(publication) + "\"', messages 'true', binary 'true')";
    result r(PQexec(conn_, cmd.c_str()));
    // A stream this process closed may still hold the slot (55006) while its walsender exits:
    // wait for that process to go (bounded), rather than fail a claim that cannot collide. No
    // holder by the time we ask: it went between the two queries; try again.
    const auto give_up = std::chrono::steady_clock::now() + own_exit_bound;
    const auto ours_or_gone = [&] {
      const int holder = slot_holder(slot);
      return holder == 0 || closed_walsenders::contains(holder);
    };
    while (PQresultStatus(r.get()) != PGRES_COPY_BOTH && sqlstate_of(r) == "55006" &&
           PQstatus(conn_) == CONNECTION_OK && ours_or_gone() &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      r = result(PQexec(conn_, cmd.c_str()));
    }
    if (PQresultStatus(r.get()) == PGRES_COPY_BOTH) return;
    const std::string sqlstate = sqlstate_of(r);
    std::string why = PQresultErrorMessage(r.get());
    if (why.empty()) why = PQerrorMessage(conn_);
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    const bool lost = PQstatus(conn_) != CONNECTION_OK;
    close();
    why = "start replication from slot " + std::string(slot) + ": " + why;
    // The slot streams to another connection (55006), or the connection or server went:
    // passing. Anything else the server refuses here (no such slot or publication, a slot of
    // another plugin, an invalidated slot) is a setup step missing or wrong, not a fault that
    // heals by itself.
    if (lost || sqlstate == "55006" || classify(sqlstate) == errc::transient)
      throw error(errc::transient, "postgresql", sqlstate, why);
    throw error(errc::misconfigured, "postgresql", sqlstate,
                why +
                    " (create the slot and publication: postgresql::tailing_store::setup, or "
                    "`outbox migrate` with a postgresql+tail URL)");
  }

  /// Reads what has arrived without blocking: WAL frames are appended to `out`, keepalives
  /// noted (`server_end`, `reply_requested`). Stops after `max_frames` frames.
  /// @throws outbox::error `transient` when the stream ended or broke (close and `open` again).
  void read(std::vector<frame>& out, std::size_t max_frames) {
    if (conn_ == nullptr)
      throw error(errc::transient, "postgresql", {}, "replication stream closed");
    if (PQconsumeInput(conn_) == 0) broken("read");
    for (std::size_t n = 0; n < max_frames;) {
      char* buf = nullptr;
      const int len = PQgetCopyData(conn_, &buf, 1);
      if (len == 0) return;  // nothing more for now
      if (len < 0) {
        if (buf) PQfreemem(buf);
        broken(len == -1 ? "the server ended the stream" : "read");
      }
      const std::string_view data(buf, static_cast<std::size_t>(len));
      wal::reader r(data);
      const auto kind = r.u8();
      if (kind == 'w') {
        requests_without_data_ = 0;
        frame f;
        f.start = r.u64();
        r.u64();  // the server's WAL end
        r.u64();  // its clock
        f.data = r.rest();
        out.push_back(std::move(f));
        ++n;
      } else if (kind == 'k') {
        server_end_ = std::max(server_end_, r.u64());
        r.u64();
        const bool asks = r.u8() != 0;
        reply_requested_ = asks || reply_requested_;
        if (asks) ++requests_without_data_;
      }
      PQfreemem(buf);
    }
  }

  /// Tells the server everything up to `flushed` is done with (the slot may advance to it).
  /// @throws outbox::error `transient` when the connection broke.
  void acknowledge(wal::lsn flushed) {
    if (conn_ == nullptr) return;
    const auto now = std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    const std::string msg = wal::status_update(flushed, now);
    if (PQputCopyData(conn_, msg.data(), static_cast<int>(msg.size())) != 1 || PQflush(conn_) != 0)
      broken("status update");
    reply_requested_ = false;
  }

  void close() noexcept {
    if (conn_ != nullptr) {
      try {
        closed_walsenders::add(PQbackendPID(conn_));
      } catch (...) {  // NOLINT(bugprone-empty-catch): only a wait of a later open is lost
      }
      PQfinish(conn_);
    }
    conn_ = nullptr;
    server_end_ = 0;
    reply_requested_ = false;
    requests_without_data_ = 0;
  }

 private:
  result query(const char* sql) {
    result r(PQexec(conn_, sql));
    if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) {
      try {
        throw_pg(conn_, r, sql);
      } catch (...) {
        close();
        throw;
      }
    }
    return r;
  }

  [[noreturn]] void broken(std::string_view what) {
    std::string why = conn_ ? PQerrorMessage(conn_) : "";
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    // The server's error, when it sent one (a dropped slot: 55000, 42704).
    std::string state;
    if (conn_ != nullptr) {
      // Only what has arrived: PQgetResult would wait on a connection still up.
      // (In COPY mode it keeps answering COPY_BOTH: a few results at most.)
      for (int i = 0; i < 4 && PQisBusy(conn_) == 0; ++i) {
        PGresult* raw = PQgetResult(conn_);
        if (raw == nullptr) break;
        result r(raw);
        if (PQresultStatus(raw) == PGRES_COPY_BOTH) break;
        if (PQresultStatus(raw) == PGRES_FATAL_ERROR) {
          if (const char* s = PQresultErrorField(raw, PG_DIAG_SQLSTATE)) state = s;
          if (const char* m = PQresultErrorMessage(raw); m && *m) why = m;
          while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
        }
      }
    }
    close();
    const errc kind =
        (state == "42704" || state == "55000") ? errc::misconfigured : errc::transient;
    throw error(kind, "postgresql", state,
                "replication stream: " + std::string(what) + (why.empty() ? "" : ": " + why));
  }

  static std::string sqlstate_of(const result& r) {
    const char* state = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
    return state ? state : "";
  }

  /// The process streaming `slot` now (0: none, or unknown: the caller's next try tells). The
  /// name is [a-z0-9_] (checked).
  int slot_holder(std::string_view slot) {
    const std::string sql = "SELECT active_pid FROM pg_replication_slots WHERE slot_name = '" +
                            std::string(slot) + "' AND active_pid IS NOT NULL";
    const result r(PQexec(conn_, sql.c_str()));
    if (PQresultStatus(r.get()) != PGRES_TUPLES_OK || r.rows() != 1) return 0;
    return std::atoi(std::string(r.text(0, 0)).c_str());
  }

  /// How long `open` waits for a closed stream's walsender to exit (its slot busy).
  static constexpr std::chrono::seconds own_exit_bound{10};

  PGconn* conn_ = nullptr;
  wal::lsn server_end_ = 0;
  bool reply_requested_ = false;
  int requests_without_data_ = 0;
};

}  // namespace outbox::postgresql::detail
