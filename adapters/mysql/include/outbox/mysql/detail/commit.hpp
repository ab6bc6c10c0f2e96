#pragma once
/// @file
/// The writer transaction's commit in one round trip on MySQL: the events as one bound JSON
/// argument of `CALL outbox_commit` (sql/mysql/0005_writer_commit_mark.sql), which inserts them and
/// commits; if the INSERT fails, COMMIT does not run and the transaction stays open.

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/mysql/detail/connection.hpp>
#include <outbox/mysql/schema.hpp>
#include <outbox/schedule.hpp>

namespace outbox::mysql::detail {

/// The largest CALL sent, as sent (quoted and escaped): past it the rows go the two-round-trip
/// way (`appender::append`, then COMMIT), which splits them and checks max_allowed_packet. No
/// server's default max_allowed_packet is below 1 MiB.
inline constexpr std::size_t max_call_bytes = std::size_t{1} << 20;

/// `bytes` in base64 (RFC 4648, with padding): what FROM_BASE64 reads back exactly.
[[nodiscard]] inline std::string base64(std::string_view bytes) {
  static constexpr char digits[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) |
                       (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += digits[(v >> 18) & 63];
    out += digits[(v >> 12) & 63];
    out += digits[(v >> 6) & 63];
    out += digits[v & 63];
  }
  if (const std::size_t left = bytes.size() - i; left > 0) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (left == 2) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += digits[(v >> 18) & 63];
    out += digits[(v >> 12) & 63];
    out += left == 2 ? digits[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

/// The argument of `CALL outbox_commit`: one array per row, in the procedure's order; nothing
/// when the rows would take more than `max_call_bytes` as sent (then they go the other way).
[[nodiscard]] inline std::optional<std::string> commit_argument(std::span<const outgoing> rows) {
  std::size_t estimate = 0;
  for (const outgoing& r : rows) {
    const event& e = *r.source;
    estimate += e.payload.size() / 3 * 4 + r.headers_json.size() + e.aggregate_type.size() +
                e.aggregate_id.size() + e.event_type.size() + e.content_type.size() + 100;
    if (estimate > max_call_bytes) return std::nullopt;
  }
  auto all = nlohmann::json::array();
  for (const outgoing& r : rows) {
    const event& e = *r.source;
    all.push_back(nlohmann::json::array(
        {r.id.to_string(), e.aggregate_type, e.aggregate_id, e.event_type, base64(e.payload),
         r.headers_json, to_us(r.created_at), e.content_type,
         outbox::detail::to_unix_ceil<std::chrono::microseconds>(r.available_at)}));
  }
  std::string text;
  try {
    text = all.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  } catch (const nlohmann::json::exception&) {
    throw_invalid("event", "holds text that is not UTF-8");
  }
  if (sent_size(text) > max_call_bytes) return std::nullopt;
  return text;
}

/// The bytes one row takes in `CALL outbox_commit_one` as sent (its values quoted and escaped).
[[nodiscard]] inline std::size_t one_call_size(const outgoing& r) {
  const event& e = *r.source;
  return 200 + sent_size(e.aggregate_type) + sent_size(e.aggregate_id) + sent_size(e.event_type) +
         sent_size(e.payload) + sent_size(r.headers_json) + sent_size(e.content_type);
}

/// The error of a failed COMMIT: in doubt.
[[noreturn]] inline void throw_commit_in_doubt(unsigned code, std::string_view text) {
  throw error(errc::in_doubt, "mysql", std::to_string(code),
              connection_lost(code)
                  ? std::string("commit: the connection was lost during COMMIT; the outcome "
                                "is unknown")
                  : "commit: " + sanitize_text(text) + "; COMMIT failed, the outcome is unknown");
}

/// True when a transaction is open on `c`: the server's status of the last statement, which
/// comes with every OK packet; after a failed statement it may be stale (a deadlock rolled the
/// transaction back), so then one round trip asks (`in_transaction`).
[[nodiscard]] inline bool transaction_open(MYSQL* c, std::string_view what) {
  return mysql_errno(c) == 0 ? (c->server_status & SERVER_STATUS_IN_TRANS) != 0
                             : in_transaction(c, what);
}

/// Refuses to commit when the session's transaction is over (a rollback, a COMMIT or a
/// statement that commits implicitly, DDL, since `writer::begin`): the procedure's INSERT would
/// then commit the events on their own. Nothing is sent but, after a failed statement, a no-op.
/// @throws outbox::error `permanent` when no transaction is open.
inline void require_open_transaction(MYSQL* c) {
  if (!transaction_open(c, "commit")) outbox::detail::throw_no_transaction("mysql");
}

/// How far a failed `CALL outbox_commit` got (`@outbox_commit_stage`, migration 0005): the
/// procedure did not start, or stopped in its INSERT (nothing committed either way), in its
/// COMMIT (in doubt), or after it (committed).
enum class call_stage { not_started, insert, commit, done };

/// The stage `stage` (the session variable, empty when NULL) tells for the call marked `mark`:
/// another call's stage, or none, is `not_started`.
[[nodiscard]] inline call_stage stage_of(std::string_view mark, std::string_view stage) noexcept {
  if (stage.size() <= mark.size() || !stage.starts_with(mark) || stage[mark.size()] != ':')
    return call_stage::not_started;
  const std::string_view what = stage.substr(mark.size() + 1);
  if (what == "insert") return call_stage::insert;
  if (what == "commit") return call_stage::commit;
  if (what == "done") return call_stage::done;
  return call_stage::not_started;
}

/// Commits the open transaction on `sql` with `rows` (at least one) in one round trip: `CALL
/// outbox_commit_one` with the row's values bound for one row, `CALL outbox_commit` with them
/// as one bound JSON argument for more; both take the call's mark (the first row's id) first.
/// Returns false, having sent nothing, when the rows take more than `max_call_bytes` as sent.
/// A failed CALL is told apart by the procedure's stage for this mark (one more round trip, on
/// that path only): the connection lost, or COMMIT failed -> `in_doubt`; the INSERT refused,
/// or the procedure not started -> the error as `append` reports it (the caller rolls back);
/// the procedure past its COMMIT -> committed, returns true.
inline bool call_commit(::soci::session& sql, std::span<const outgoing> rows) {
  MYSQL* c = handle(sql);
  const std::string mark = rows.front().id.to_string();
  unsigned code = 0;
  std::string text;
  try {
    if (rows.size() == 1) {
      const outgoing& r = rows.front();
      if (one_call_size(r) > max_call_bytes) return false;
      const long long created = to_us(r.created_at);
      const long long due = outbox::detail::to_unix_ceil<std::chrono::microseconds>(r.available_at);
      sql << std::string(statements::writer_commit_one), ::soci::use(mark), ::soci::use(mark),
          ::soci::use(r.source->aggregate_type), ::soci::use(r.source->aggregate_id),
          ::soci::use(r.source->event_type), ::soci::use(r.source->payload),
          ::soci::use(r.headers_json), ::soci::use(created), ::soci::use(r.source->content_type),
          ::soci::use(due);
    } else {
      const std::optional<std::string> events = commit_argument(rows);
      if (!events) return false;
      sql << std::string(statements::writer_commit), ::soci::use(mark), ::soci::use(*events);
    }
    while (mysql_more_results(c) && mysql_next_result(c) == 0)  // none expected: no SELECT
      if (MYSQL_RES* r = mysql_store_result(c)) mysql_free_result(r);
    return true;
  } catch (const ::soci::mysql_soci_error& e) {
    code = e.err_num_;
    text = e.get_error_message();  // the server's words: SOCI's context quotes the bound values
  } catch (const ::soci::soci_error& e) {  // not the server's: nothing was sent
    throw error(errc::permanent, "mysql", {}, "commit: " + sanitize_text(e.get_error_message()));
  }
  if (connection_lost(code)) throw_commit_in_doubt(code, text);
  const std::string_view stage_sql = statements::writer_commit_stage;
  if (mysql_real_query(c, stage_sql.data(), static_cast<unsigned long>(stage_sql.size())) != 0)
    throw_commit_in_doubt(code, text);  // the stage is unknown, so is the outcome
  std::string stage;
  if (MYSQL_RES* r = mysql_store_result(c)) {
    if (MYSQL_ROW row = mysql_fetch_row(r); row != nullptr && row[0] != nullptr) stage = row[0];
    mysql_free_result(r);
  }
  switch (stage_of(mark, stage)) {
    case call_stage::done:
      return true;
    case call_stage::commit:
      throw_commit_in_doubt(code, text);
    case call_stage::insert:
    case call_stage::not_started:
      break;
  }
  throw make_error(code, "commit: append", text);
}

}  // namespace outbox::mysql::detail
