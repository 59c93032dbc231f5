"""The machine and the process a run executes on: CPU instruction set, devices, ranks,
compilation."""
