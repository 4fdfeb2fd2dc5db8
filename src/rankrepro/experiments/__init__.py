"""Paper setups as data, and their resolution into runs with stable ids."""
