"""Implementation: the controller, the worker groups and the framework backends."""
