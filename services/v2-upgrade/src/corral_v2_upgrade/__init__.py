"""corral v2-upgrade: the v2 data-engine node-by-node live upgrade (longhorn-behaviour.md §5), as
a decision service on the kit. See README.md."""
