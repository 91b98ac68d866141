"""The engine-upgrade progress view: per owner node, what is in flight, done, waiting and blocked.

`model` folds LH_OBJECTS events into per-node figures (judged by the engine-upgrade service's own
rules), `render` draws them (redrawn in place on a terminal, one line per change otherwise) and
`follow` reads the bus. `corral progress engine-upgrade` and the `corral run` demo use them.
"""
