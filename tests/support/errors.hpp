#pragma once
// What a call throws, for tests that check an error's kind and text.

#include <optional>
#include <utility>

#include <boost/test/unit_test.hpp>

#include <outbox/error.hpp>

namespace outbox::test {

/// The outbox::error `f` throws; none when it returns (other exceptions pass through).
template <class F>
std::optional<outbox::error> error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const outbox::error& e) {
    return e;
  }
  return std::nullopt;
}

/// The kind of the outbox::error `f` throws; a test error when it throws none.
template <class F>
outbox::errc kind_of(F&& f) {
  if (const auto e = error_of(std::forward<F>(f))) return e->kind();
  BOOST_ERROR("no outbox::error thrown");
  return outbox::errc{};
}

}  // namespace outbox::test
