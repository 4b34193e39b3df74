"""cm2's PyTorch workers: the training activities of the `train` task queue (issue 32). See ../README.md."""
