"""The `rebalance-lab` command: one module per group of commands (run, campaign, report, events), and the demo."""
