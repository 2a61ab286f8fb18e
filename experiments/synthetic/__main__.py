"""`python -m experiments.synthetic RUN_DIR [...]`: write one simulated run."""

from experiments.synthetic.simulation import main

main()
