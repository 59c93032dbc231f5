"""A run checked before any work: its settings, the files it reads and the weights it
starts from."""
