#pragma once
/// @file
/// The writer's commit on PostgreSQL: the event INSERTs and COMMIT sent as one libpq pipeline
/// (one round trip, one sync) on the application's connection, and the outcome told apart:
/// refused (nothing committed), committed, or in doubt.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <libpq-fe.h>

#include <outbox/error.hpp>
#include <outbox/postgresql/detail/connection.hpp>

namespace outbox::postgresql::detail {

/// One statement of a pipeline: a prepared statement's name, or SQL text, with its parameters.
struct piped_statement {
  const char* prepared = nullptr;  ///< non-null: the name of a statement prepared on the conn
  std::string text;                ///< the SQL when not prepared
  params values;
};

/// The writers make their statements one at a time and hand each to a sink as it is made; one
/// marked `prepared` (with the name `Name`) is `prepared_sql` prepared once per connection.
/// This sink runs each at once (a plain append: one round trip each).
template <const char* Name>
auto run_each(PGconn* c, std::string_view prepared_sql, std::string_view what) {
  return [c, prepared_sql, what](piped_statement&& s) {
    if (s.prepared != nullptr)
      exec_prepared_once<Name>(c, prepared_sql, s.values, what);
    else
      exec(c, s.text, s.values, what);
  };
}

/// The sink of the pipelined commit: keeps each statement in `out`, one marked `prepared`
/// prepared on `c` first (a round trip before the pipeline, once per connection).
template <const char* Name>
auto collect_each(PGconn* c, std::string_view prepared_sql, std::vector<piped_statement>& out) {
  return [c, prepared_sql, &out](piped_statement&& s) {
    if (s.prepared != nullptr) s.prepared = prepared_once<Name>(c, prepared_sql);
    out.push_back(std::move(s));
  };
}

/// Rolls back what is left of the open transaction on `c` (best effort: a connection that fails
/// here is dropped by the server, which rolls back).
inline void roll_back_quietly(PGconn* c) noexcept {
  if (PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) != PQTRANS_IDLE)
    PQclear(PQexec(c, "ROLLBACK"));
}

/// Sends `statements` and COMMIT as one pipeline and reads every result.
/// @throws outbox::error: the first failed statement's class (nothing committed; the
///         transaction rolled back), `permanent` when the transaction was aborted or not open
///         before (rolled back), `transient` when the connection was gone before anything was
///         sent, `in_doubt` when it was lost after COMMIT was sent and the server said nothing
///         that rules a commit out.
inline void commit_in_pipeline(PGconn* c, const std::vector<piped_statement>& statements) {
  if (PQstatus(c) != CONNECTION_OK)
    throw error(errc::transient, "postgresql", "08006",
                "commit: the connection was lost before COMMIT was sent; nothing was committed");
  if (const auto status = PQtransactionStatus(c); status != PQTRANS_INTRANS) {
    roll_back_quietly(c);
    if (status != PQTRANS_INERROR) outbox::detail::throw_no_transaction("postgresql");
    throw error(errc::permanent, "postgresql", {},
                "commit: a statement failed inside the transaction (its error was caught and not "
                "rethrown), so PostgreSQL rolled it back; nothing was committed");
  }
  if (PQenterPipelineMode(c) != 1)
    throw error(errc::permanent, "postgresql", {}, "commit: cannot enter pipeline mode");
  bool queued = true;
  for (const auto& s : statements) {
    const auto ptrs = s.values.pointers();
    const auto lengths = s.values.lengths();
    const auto formats = s.values.formats();
    const int ok = s.prepared != nullptr
                       ? PQsendQueryPrepared(c, s.prepared, s.values.size(), ptrs.data(),
                                             lengths.data(), formats.data(), 0)
                       : PQsendQueryParams(c, s.text.c_str(), s.values.size(), nullptr, ptrs.data(),
                                           lengths.data(), formats.data(), 0);
    if (ok != 1) {
      queued = false;  // COMMIT is not sent: the sync below ends the pipeline without it
      break;
    }
  }
  const bool commit_sent =
      queued && PQsendQueryParams(c, "COMMIT", 0, nullptr, nullptr, nullptr, nullptr, 0) == 1;
  (void)PQpipelineSync(c);  // sends everything; a failure shows as a lost connection below
  // Every result: each command's (then a null: aborted ones after a failure included), then
  // the sync's.
  std::string failed_state, failed_text, commit_tag;  // the first command the server refused
  bool failed = false, commit_ok = false, commit_seen = false, synced = false;
  std::size_t index = 0;  // the command whose results are read
  int nulls = 0;
  while (PQstatus(c) == CONNECTION_OK) {
    PGresult* raw = PQgetResult(c);
    if (raw == nullptr) {
      ++index;
      if (++nulls > 1) break;  // nothing more will come (the sync was not sent)
      continue;
    }
    nulls = 0;
    const result r(raw);
    const auto st = PQresultStatus(raw);
    if (st == PGRES_PIPELINE_SYNC) {
      synced = true;
      break;
    }
    const bool is_commit = commit_sent && index == statements.size();
    if (is_commit) {
      commit_seen = st != PGRES_PIPELINE_ABORTED;
      commit_ok = st == PGRES_COMMAND_OK;
      if (commit_ok) commit_tag = PQcmdStatus(raw);
    }
    if (st == PGRES_FATAL_ERROR && !failed) {
      failed = true;
      const char* state = PQresultErrorField(raw, PG_DIAG_SQLSTATE);
      failed_state = state ? state : "";
      const char* text = PQresultErrorMessage(raw);
      failed_text = std::string(is_commit ? "commit: " : "append: ") + (text ? text : "");
      while (!failed_text.empty() && (failed_text.back() == '\n' || failed_text.back() == ' '))
        failed_text.pop_back();
    }
  }
  if (PQstatus(c) == CONNECTION_OK) {
    if (!synced || PQexitPipelineMode(c) != 1)
      throw error(errc::permanent, "postgresql", {},
                  "commit: the pipeline did not end; the connection is left unusable");
    if (commit_ok && commit_tag == "COMMIT") return;
    roll_back_quietly(c);  // a refused statement left the transaction aborted
    if (failed) throw error(classify(failed_state), "postgresql", failed_state, failed_text);
    throw error(errc::permanent, "postgresql", {},
                commit_sent
                    ? "commit: the server answered " + commit_tag + "; nothing was committed"
                    : "commit: a statement could not be sent (" + std::string(PQerrorMessage(c)) +
                          "); nothing was committed");
  }
  // The connection is gone. Without COMMIT sent, nothing committed. A statement before COMMIT
  // that the server refused (with a SQLSTATE: its own answer, e.g. 57P01 when the backend was
  // terminated) rules the commit out too: the server runs a pipeline in order, and the refusal
  // aborted the transaction.
  if (!commit_sent || (failed && !failed_state.empty() && !commit_seen))
    throw error(failed ? classify(failed_state) : errc::transient, "postgresql",
                failed_state.empty() ? "08006" : failed_state,
                failed ? failed_text
                       : "commit: the connection was lost before COMMIT was sent; nothing was "
                         "committed");
  throw error(errc::in_doubt, "postgresql", failed_state,
              "commit: the connection was lost during COMMIT; the outcome is unknown" +
                  (failed_text.empty() ? std::string() : " (" + failed_text + ")"));
}

/// `commit_in_pipeline` with the statements `make()` returns. `make` may prepare statements on
/// `c` first (once per connection): a prepare the server refuses (the outbox table gone: 42P01)
/// aborts the open transaction, so it is rolled back before the error goes on, as after a
/// statement refused in the pipeline. Prepared statements named `forget...` are forgotten when
/// the server no longer has them (26000: the next commit prepares them again).
template <const char*... Forget, class Make>
void commit_made(PGconn* c, Make&& make) {
  std::vector<piped_statement> statements;
  try {
    statements = make();
  } catch (...) {
    roll_back_quietly(c);
    throw;
  }
  try {
    commit_in_pipeline(c, statements);
  } catch (const error& e) {
    if (e.native_code().starts_with("26000")) (forget_prepared<Forget>(c), ...);
    throw;
  }
}

/// True when `commit_made`'s `make` may prepare on `c`: asked for, and a transaction open (a
/// prepare in an aborted one fails; without one, `commit_in_pipeline` refuses anyway).
[[nodiscard]] inline bool may_prepare(PGconn* c, bool prepare_statements) noexcept {
  return prepare_statements && PQstatus(c) == CONNECTION_OK &&
         PQtransactionStatus(c) == PQTRANS_INTRANS;
}

}  // namespace outbox::postgresql::detail
