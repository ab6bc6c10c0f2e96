#pragma once
/// @file
/// A schema migration, embedded at build time from `sql/<dialect>/NNNN_name.sql`.

#include <string_view>

namespace outbox {

/// One numbered migration file.
struct migration {
  int version;            ///< NNNN, from 1 without gaps.
  std::string_view name;  ///< The file name without ".sql".
  std::string_view sql;   ///< The file's text, applied as is.
};

}  // namespace outbox
