"""Training K seeds of one variant as one batched job (issue 59). run: the training loop
(train_bundle, BundleRun); data: each seed's batches; precision: what trainer.precision wraps;
checkpoint: a bundle's checkpoint cut down to some of its seeds."""
