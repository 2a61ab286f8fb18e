"""Simulated runs: consumer groups written straight to the lab's event schema, without servers or members,
so the checks, the summary and the report can be tested (and benchmarked) against logs whose anomalies are
known. `simulation.py` simulates an eager group, `kip848_simulation.py` a KIP-848 group, `anomalies.py` plants
the anomalies."""
