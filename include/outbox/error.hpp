#pragma once
/// @file
/// The one error type of the library and its classification.

#include <exception>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace outbox {

/// How a failure must be handled. Adapters translate native codes into one of these at their edge;
/// no native status type crosses into the core.
enum class errc {
  transient = 1,  ///< Retry later (lost connection, busy, deadlock, broker timeout).
  permanent,      ///< Retrying cannot help (rejected message, constraint other than a duplicate).
  /// The outcome is unknown (commit sent, no answer); never blindly re-done. As a publish
  /// result: the broker never answered for the message (it may have it); deferred, not charged.
  in_doubt,
  duplicate,      ///< The thing already exists (unique violation).
  misconfigured,  ///< Options or environment are wrong; fix the configuration.
  invalid_input,  ///< A caller's argument was refused before anything ran.
};

namespace detail {
class error_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "outbox"; }
  std::string message(int c) const override {
    switch (static_cast<errc>(c)) {
      case errc::transient:
        return "transient failure";
      case errc::permanent:
        return "permanent failure";
      case errc::in_doubt:
        return "outcome in doubt";
      case errc::duplicate:
        return "duplicate";
      case errc::misconfigured:
        return "misconfigured";
      case errc::invalid_input:
        return "invalid input";
    }
    return "unknown outbox error";
  }
};
}  // namespace detail

/// The `std::error_category` of `outbox::errc`.
inline const std::error_category& error_category() noexcept {
  static const detail::error_category_impl instance;
  return instance;
}

/// Makes `outbox::errc` usable as a `std::error_code`.
inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

/// The library's exception: a `std::system_error` whose code is an `outbox::errc`, carrying the
/// adapter that raised it, the native code (SQLSTATE, errno, broker reply code...) and, for
/// `invalid_input`, the name of the offending field.
class error : public std::system_error {
 public:
  /// An error of class `kind` raised by `adapter`, whose `what()` reads
  /// "adapter [native_code]: what" (no brackets when `native_code` is empty); `field`: see
  /// `field()`.
  error(errc kind, std::string adapter, std::string native_code, const std::string& what,
        std::string field = {})
      : std::system_error(make_error_code(kind), compose(adapter, native_code, what)),
        kind_(kind),
        adapter_(std::move(adapter)),
        native_code_(std::move(native_code)),
        field_(std::move(field)) {}

  /// The classification; decides retry, dead-letter or stop.
  [[nodiscard]] errc kind() const noexcept { return kind_; }
  /// "core", "sqlite", "memory", ...
  [[nodiscard]] const std::string& adapter() const noexcept { return adapter_; }
  /// The native code as text (may be empty).
  [[nodiscard]] const std::string& native_code() const noexcept { return native_code_; }
  /// For `invalid_input`: the field that was refused ("aggregate_type", "payload", ...).
  [[nodiscard]] const std::string& field() const noexcept { return field_; }

 private:
  static std::string compose(std::string_view adapter, std::string_view native,
                             std::string_view what) {
    std::string s;
    s.reserve(adapter.size() + native.size() + what.size() + 8);
    s.append(adapter);
    if (!native.empty()) s.append(" [").append(native).append("]");
    s.append(": ").append(what);
    return s;
  }

  errc kind_;
  std::string adapter_;
  std::string native_code_;
  std::string field_;
};

namespace detail {
/// True when `p` holds an `outbox::error` of kind `misconfigured`.
inline bool is_misconfigured(const std::exception_ptr& p) {
  if (!p) return false;
  try {
    std::rethrow_exception(p);
  } catch (const error& e) {
    return e.kind() == errc::misconfigured;
  } catch (...) {
    return false;
  }
}

/// What a committing store's `commit` throws, having sent nothing, when no transaction is open
/// on the session: it was ended behind the writer (a rollback, a COMMIT, a failure that took it
/// down, a statement that commits implicitly), and the events alone must not commit.
[[noreturn]] inline void throw_no_transaction(std::string_view adapter) {
  throw error(errc::permanent, std::string(adapter), {},
              "commit: no transaction is open on the session (it was ended behind the writer's "
              "back: a rollback, a COMMIT, a failed statement that took it down, or a statement "
              "that commits implicitly); the events were not committed, and what the session "
              "committed before stays committed");
}

/// What a committing store's `open` (`writer::begin`) throws, having sent nothing, when a
/// transaction is already open on the session: a BEGIN would commit it (MySQL) or nest in it
/// silently (PostgreSQL), and the writer's commit would then end the caller's transaction.
[[noreturn]] inline void throw_transaction_open(std::string_view adapter) {
  throw error(errc::permanent, std::string(adapter), {},
              "begin: a transaction is already open on the session; writer::begin opens its own: "
              "commit or roll back the open one first, or enqueue inside it");
}
}  // namespace detail

/// Throws an `invalid_input` error naming `field`.
[[noreturn]] inline void throw_invalid(std::string field, const std::string& what) {
  throw error(errc::invalid_input, "core", {}, field + ": " + what, field);
}

}  // namespace outbox

/// @namespace std
/// The standard library, where outbox adds only `std::is_error_code_enum<outbox::errc>` and
/// `std::hash<outbox::uuid>` (uuid.hpp).

/// Makes `outbox::errc` convertible to `std::error_code` (through `outbox::make_error_code`).
template <>
struct std::is_error_code_enum<outbox::errc> : std::true_type {};
