"""One run: the runner, the member hosts and their configs, the server witness, the run record."""
