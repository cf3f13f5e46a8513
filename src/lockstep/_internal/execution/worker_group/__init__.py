"""Driver-side worker groups: the base with its protocol, and one module per place workers run."""
