"""The `sframe` command line."""
