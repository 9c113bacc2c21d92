"""The `sluice` commands, one module each, imported only when run (connector/cli.py): a command
loads what it uses and nothing else, so `sluice decode` starts without Kafka's or Redis's
clients."""
