"""The machine and the process a run executes on: CPU instruction set, devices, ranks,
compilation, the process's environment changed for a block (environ)."""
