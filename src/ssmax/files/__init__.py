"""How files are written and shared: atomic writes and file locks."""
