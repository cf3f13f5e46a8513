"""Workers as local processes: the group, the fork server, output pumping, shared tables, GPUs."""
