#pragma once
// A store fixture paired with a transport fixture: one cell of the end-to-end matrix.
namespace e2e {
template <class StoreFixture, class TransportFixture>
struct combo {
  using store_fixture = StoreFixture;
  using transport_fixture = TransportFixture;
};
}  // namespace e2e
