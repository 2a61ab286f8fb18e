"""Scenarios in virtual time (docs/simulation.md): `play.simulate` plays a scenario file on a backend into a run
folder, deterministically for a seed, with no process, socket or sleep."""
