#pragma once
/// @file
/// Helpers for the statements a dialect embeds from `sql/<dialect>/` (scripts/embed_sql.py).

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <outbox/error.hpp>

namespace outbox::sql {

/// `single_row_insert` (an `INSERT ... VALUES (...)` of one row, as a file of sql/ holds it) with
/// its VALUES tuple repeated for `rows` rows. `$n` placeholders are renumbered (row `i` adds
/// `i * params_per_row`); `?` placeholders are repeated as they are. What follows the tuple (an
/// `ON CONFLICT` clause) is kept once, after the last one.
/// @throws outbox::error `misconfigured` when the text has no VALUES tuple.
[[nodiscard]] inline std::string multi_row_insert(std::string_view single_row_insert,
                                                  std::size_t rows, int params_per_row) {
  const auto at = single_row_insert.rfind("VALUES");
  const auto open = at == std::string_view::npos ? at : single_row_insert.find('(', at);
  if (open == std::string_view::npos)
    throw error(errc::misconfigured, "core", {}, "multi_row_insert: no VALUES tuple");
  // The tuple ends at its matching parenthesis (quoted text skipped); what follows it (an
  // ON CONFLICT clause) comes once, after the last tuple.
  std::size_t close = open;
  for (int depth = 0; close < single_row_insert.size(); ++close) {
    const char ch = single_row_insert[close];
    if (ch == '\'') {
      close = single_row_insert.find('\'', close + 1);
      if (close == std::string_view::npos) break;
    } else if (ch == '(') {
      ++depth;
    } else if (ch == ')' && --depth == 0) {
      break;
    }
  }
  if (close >= single_row_insert.size())
    throw error(errc::misconfigured, "core", {}, "multi_row_insert: unbalanced VALUES tuple");
  const std::string_view head = single_row_insert.substr(0, open);
  const std::string_view tuple = single_row_insert.substr(open, close + 1 - open);
  const std::string_view tail = single_row_insert.substr(close + 1);
  std::string out;
  out.reserve(head.size() + rows * (tuple.size() + 8));
  out += head;
  for (std::size_t r = 0; r < rows; ++r) {
    if (r > 0) out += ',';
    const std::size_t offset = r * static_cast<std::size_t>(params_per_row);
    for (std::size_t i = 0; i < tuple.size(); ++i) {
      const char ch = tuple[i];
      if (ch != '$' || offset == 0 || i + 1 >= tuple.size() || tuple[i + 1] < '0' ||
          tuple[i + 1] > '9') {
        out += ch;
        continue;
      }
      std::size_t n = 0;
      std::size_t j = i + 1;
      while (j < tuple.size() && tuple[j] >= '0' && tuple[j] <= '9')
        n = n * 10 + static_cast<std::size_t>(tuple[j++] - '0');
      out += '$';
      out += std::to_string(n + offset);
      i = j - 1;
    }
  }
  out += tail;
  return out;
}

/// A JSON array of integers ("[1,2,3]"): a list of sequences bound as one text value, which the
/// statement unpacks (SQLite `json_each`, MySQL `JSON_TABLE`).
[[nodiscard]] inline std::string json_integer_array(std::span<const std::int64_t> values) {
  std::string out = "[";
  out.reserve(values.size() * 8 + 2);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, values[i]);
    out.append(buf, r.ptr);
  }
  out += ']';
  return out;
}

/// The writer's append in chunks: calls `insert(text, part)` for each run of at most `chunk`
/// rows, `text` being `single_row_insert` repeated for the run (`multi_row_insert`). A dialect
/// binds each part's values in the order of its append.sql.
template <class Row, class Insert>
void insert_in_chunks(std::string_view single_row_insert, int params_per_row,
                      std::span<const Row> rows, std::size_t chunk, Insert&& insert) {
  for (std::size_t off = 0; off < rows.size(); off += chunk) {
    const auto part = rows.subspan(off, std::min(chunk, rows.size() - off));
    insert(multi_row_insert(single_row_insert, part.size(), params_per_row), part);
  }
}

}  // namespace outbox::sql
