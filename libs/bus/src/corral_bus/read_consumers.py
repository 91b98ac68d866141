"""Ephemeral read consumers, named from the user's bounded set of names where it has one.

JetStream bounds consumers per stream, not per user: a user allowed to create consumers under any
name can create them without end (the issue-29 probe made unlimited consumers on LH_OBJECTS with the
reader's credentials, each one server memory and work). So the reader, whose credentials every
operator's CLI holds, may create consumers only under the names `reader-0` … `reader-<n-1>`
(`corral_bus.permissions.consumer_names`): the server denies any other name, so at most n exist per
stream whatever a client does.

A name is taken with the create action "create", which JetStream refuses while a consumer of that
name exists with another configuration; every creation carries a random description, so two CLIs
never share a consumer (a pull consumer hands each message to one puller only). A refused name
moves on to the next; when all are taken, the error says so and when they free up (a consumer the
CLI did not delete goes after its inactive threshold). A user without a bounded set (the services)
lets the server name the consumer, as before.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from nats.js.api import ConsumerConfig, ConsumerInfo
from nats.js.errors import APIError

from corral_bus.connection import Bus
from corral_bus.permissions import consumer_names

CONSUMER_EXISTS = 10148
"""JetStream's error code for a create action on a name that holds another consumer."""


CREATE_TIMEOUT_S = 5.0


class ConsumersExhausted(RuntimeError):
    """Every consumer name the user may take on the stream is in use."""


async def create_read_consumer(bus: Bus, stream: str, config: ConsumerConfig) -> ConsumerInfo:
    """An ephemeral consumer on `stream` (`config` sets an inactive threshold, so an abandoned one
    goes by itself), under one of the user's names where it has a bounded set."""
    names = consumer_names(bus.user)
    if names is None:
        return await bus.js.add_consumer(stream, config)
    for name in names:
        try:
            return await _create(bus, stream, name, config)
        except APIError as e:
            if e.err_code != CONSUMER_EXISTS:
                raise
    threshold = config.inactive_threshold
    idle = f" (an abandoned one goes after {threshold:g} s idle)" if threshold else ""
    raise ConsumersExhausted(
        f"the {bus.user} user already holds all {len(names)} consumers it may have on {stream}{idle}: "
        "close another corral command reading the bus, or wait"
    )


async def _create(bus: Bus, stream: str, name: str, config: ConsumerConfig) -> ConsumerInfo:
    named = config.evolve(name=name, durable_name=None, description=f"corral read {secrets.token_hex(6)}")
    request: dict[str, Any] = {"stream_name": stream, "config": named.as_dict(), "action": "create"}
    reply = await bus.nc.request(
        f"$JS.API.CONSUMER.CREATE.{stream}.{name}", json.dumps(request).encode(), timeout=CREATE_TIMEOUT_S
    )
    answer = json.loads(reply.data)
    if "error" in answer:
        APIError.from_error(answer["error"])  # raises the error's own class
    info: ConsumerInfo = ConsumerInfo.from_response(answer)
    return info
