"""Where workers run (local processes, Ray actors, this process) and what runs inside them."""
