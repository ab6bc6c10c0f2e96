#pragma once
/// @file
/// Umbrella header of the core: everything but the adapters and the testing doubles.

#include <outbox/cause.hpp>
#include <outbox/concepts/store.hpp>
#include <outbox/concepts/transport.hpp>
#include <outbox/concepts/triage.hpp>
#include <outbox/consumer.hpp>
#include <outbox/error.hpp>
#include <outbox/message.hpp>
#include <outbox/migration.hpp>
#include <outbox/relay.hpp>
#include <outbox/retry.hpp>
#include <outbox/schedule.hpp>
#include <outbox/triage.hpp>
#include <outbox/uuid.hpp>
#include <outbox/validate.hpp>
#include <outbox/writer.hpp>
