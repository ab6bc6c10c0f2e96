#pragma once
/// @file
/// The ZeroMQ transport: `publisher` (relay side) and `receiver` (consumer side).

#include <outbox/zeromq/protocol.hpp>
#include <outbox/zeromq/publisher.hpp>
#include <outbox/zeromq/receiver.hpp>
