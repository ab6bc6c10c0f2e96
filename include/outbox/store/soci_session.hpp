#pragma once
/// @file
/// The native handle under a SOCI session, for dialects built on SOCI (every store here is):
/// they prepare their hot statements on it. Include only from a dialect that links SOCI.

#include <string_view>

#include <soci/soci.h>

#include <outbox/error.hpp>

namespace outbox::store {

/// The session's backend, as the backend type of SOCI named `backend_name` ("sqlite3",
/// "postgresql", "mysql").
/// @throws outbox::error `misconfigured` when the session is not connected with that backend.
template <class Backend>
[[nodiscard]] Backend& soci_backend(::soci::session& sql, std::string_view backend_name,
                                    const char* adapter) {
  // Not is_connected(): for a server database that is a round trip.
  if (sql.get_backend() == nullptr || sql.get_backend_name() != backend_name)
    throw error(
        errc::misconfigured, adapter, {},
        "the session is not connected with SOCI's " + std::string(backend_name) + " backend");
  return *static_cast<Backend*>(sql.get_backend());
}

}  // namespace outbox::store
