"""Where a launched process finds itself: one module per launcher or scheduler that starts
the processes of a run (torchrun, MPI, SLURM, Kubeflow, SageMaker), each reading the
variables it sets; ``detect`` tries them in order."""
