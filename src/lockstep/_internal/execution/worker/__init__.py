"""What runs inside each worker: its main loop, the session behind ``report()``, report checks."""
