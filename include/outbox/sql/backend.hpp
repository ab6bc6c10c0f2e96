#pragma once
/// @file
/// The native handle under a SOCI session, for dialects built on SOCI (every store here is):
/// they prepare their hot statements on it. The session's type is a parameter, so the kit
/// itself includes no SOCI header.

#include <stdexcept>
#include <string>
#include <string_view>

#include <outbox/error.hpp>

namespace outbox::sql {

/// The session's backend, as the backend type of SOCI named `backend_name` ("sqlite3",
/// "postgresql", "mysql").
/// @throws outbox::error `misconfigured` when the session is not connected with that backend.
template <class Backend, class Session>
[[nodiscard]] Backend& soci_backend(Session& sql, std::string_view backend_name,
                                    const char* adapter) {
  // Not is_connected(): for a server database that is a round trip.
  if (sql.get_backend() == nullptr || sql.get_backend_name() != backend_name)
    throw error(
        errc::misconfigured, adapter, {},
        "the session is not connected with SOCI's " + std::string(backend_name) + " backend");
  return *static_cast<Backend*>(sql.get_backend());
}

/// Opens `sql`, a session not yet open, with SOCI's `backend` on `connect_string`; a failure
/// (SOCI's errors are `std::runtime_error`s) is thrown as `to_error(e, "connect")`, classified
/// as the dialect classifies a lost connection.
template <class Session, class ToError>
void open_session(Session& sql, const char* backend, const std::string& connect_string,
                  ToError&& to_error) {
  try {
    sql.open(backend, connect_string);
  } catch (const std::runtime_error& e) {
    throw to_error(e, "connect");
  }
}

}  // namespace outbox::sql
