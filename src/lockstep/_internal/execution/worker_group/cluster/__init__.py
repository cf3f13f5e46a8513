"""A run across the processes a launcher or scheduler started (``srun``, ``torchrun``,
``mpirun``, Kubeflow's pods, SageMaker's instances): the process of rank 0 drives, every
other one joins it and starts its share of its node's workers."""
