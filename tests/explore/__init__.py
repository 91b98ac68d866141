"""The fault explorer (issue 24): every state of every decision service, under every fault of a
catalogue, with safety judged at every write inside the API server and liveness after the fault
clears. A named scenario is one point; this walks its neighbours.

`python -m tests.explore` runs the whole matrix and writes bench/results/explore.json;
`test_sample.py` runs a small deterministic sample in `make test`.
"""
