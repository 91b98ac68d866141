"""Typed msgspec Structs for everything corral puts on the bus.

`envelopes` holds ObjectEvent / Command / CommandResult / DeadLetter, `longhorn` the slim Kubernetes
objects, `kinds` the table of watched kinds, `subjects` the subject layout, `codec` schema-checked
decoding.
"""
