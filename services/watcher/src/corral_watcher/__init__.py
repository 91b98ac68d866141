"""corral watcher service: every change of the cluster on the bus, once, in order.

`Watcher(api, bus, kinds, WatchSettings(namespace=...))` runs one `KindWatcher` (list, then watch,
re-list on 410 or resync) per kind, publishing through an `OrderedPublisher`; `runner.main` is the
service under the runtime harness.
"""
