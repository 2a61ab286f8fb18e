"""`python -m experiments.fuzz.target wire|scenario [libFuzzer options] [corpus folders or files]`

The process libFuzzer drives (through atheris). The modules under test are imported inside
`atheris.instrument_imports`, so their branches are the coverage the fuzzer steers by; the harness
modules are not instrumented. Given files instead of folders, libFuzzer runs each once: that is how a
failure's file is replayed.
"""

from __future__ import annotations

import sys

# The packages whose code the fuzzer should learn to reach, per target.
INSTRUMENTED = {
    "wire": ["broker", "modern", "rebalance.kafka_frames"],
    "scenario": ["experiments.scenario", "tomllib"],
}


def main(argv: list[str]) -> None:
    import atheris

    name = argv[1] if len(argv) > 1 else ""
    if name not in INSTRUMENTED:
        raise SystemExit(f"usage: {argv[0]} {'|'.join(INSTRUMENTED)} [libFuzzer options]")
    with atheris.instrument_imports(include=INSTRUMENTED[name]):
        if name == "wire":
            from experiments.fuzz.wire import WireHarness as Harness
        else:
            from experiments.fuzz.scenario import ScenarioHarness as Harness
    harness = Harness()
    atheris.Setup([argv[0], *argv[2:]], harness.run)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
