"""Pipeline stages: one module each, with one entry function ``run(ctx) -> outputs``."""
