"""MLflow tracking: where runs go and the experiment (store.py: a sqlite store in the output
folder, created under a lock, or a tracking server), a run's params, tags, start and end
(runs.py), the data each training run reads as its dataset inputs (datasets.py), what each run
ran on (its commit here; packages, machine, the work tree's diff: manifest.py).
"""
