"""Fuzzing the lab's own inputs: the broker's requests and the scenario files.

    wire_target      libFuzzer target: a byte stream of request frames through the broker's dispatch
    scenario_target  libFuzzer target: TOML text through the scenario loader
    libfuzzer        runs a target in a child process (atheris), seeded with the stored corpus
    hostile          well-formed requests with values no client sends, against a running broker,
                     with the coordinator's invariants checked after every batch
    corpus/          recorded real-client frames (wire) and the shipped scenario files (scenario)

Nothing here is imported by the broker or the clients: the fuzzers stand outside what they test.
"""
