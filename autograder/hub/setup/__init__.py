"""The hub's set-up: Unix accounts, the roster, the generated configuration and the servers' spawner."""
