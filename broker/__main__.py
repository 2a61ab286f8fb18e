"""`python -m broker ...`: run one broker process (the same options as `rebalance-lab broker`)."""

import typer

from broker.cli import broker_command

if __name__ == "__main__":
    typer.run(broker_command)
