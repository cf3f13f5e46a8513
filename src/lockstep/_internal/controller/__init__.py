"""The control loop in the driver: states, failure policy, checkpoint manager, run log."""
