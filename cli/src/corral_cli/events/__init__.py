"""Reading corral's streams as they are, for `corral events` and `corral replay --nats`.

`streams` says which stream holds which subjects, `reader` reads a snapshot of them (never
publishing, never consuming a work-queue message), `live` follows them, and `summary` says what one
message is in a line, for `corral events tail`.
"""
