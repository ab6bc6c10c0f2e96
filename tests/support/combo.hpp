#pragma once
// A store fixture paired with a transport fixture: one cell of the end-to-end matrix; every pair
// of two fixture lists; and the precondition that skips a pair whose server is missing.

#include <tuple>
#include <utility>

#include <boost/test/unit_test.hpp>

#include "services.hpp"

namespace e2e {

template <class StoreFixture, class TransportFixture>
struct combo {
  using store_fixture = StoreFixture;
  using transport_fixture = TransportFixture;
};

template <class S, class... T>
using row = std::tuple<combo<S, T>...>;
template <class Stores, class Transports>
struct pairs;
template <class... S, class... T>
struct pairs<std::tuple<S...>, std::tuple<T...>> {
  using type = decltype(std::tuple_cat(std::declval<row<S, T...>>()...));
};
/// Every (store fixture, transport fixture) pair of two std::tuple lists, as a std::tuple of
/// combos, store-major.
template <class Stores, class Transports>
using pairs_t = typename pairs<Stores, Transports>::type;

template <class Combos>
struct services;
template <class... C>
struct services<std::tuple<C...>> {
  static boost::test_tools::assertion_result check(boost::unit_test::test_unit_id id) {
    return outbox::test::services_of<typename C::store_fixture...,
                                     typename C::transport_fixture...>(id);
  }
};
/// A Boost.Test precondition: the servers of every fixture of `Combos` (a std::tuple of combos)
/// have an address (tests/support/services.hpp).
template <class Combos>
inline constexpr auto services_for = &services<Combos>::check;

}  // namespace e2e
