"""Seeds bundled (executor.bundle=K, issue 59): the pipeline's side. group: which to-run nodes
of one stage and variant go together as one job (BundleJob); train: a training bundle run as one
job (ssmax.lit.bundle.run trains it), each seed's node written as its solo node writes it;
evals: an eval bundle, its seeds evaluated one after another in one process."""
