"""The `nanotc` command line."""
