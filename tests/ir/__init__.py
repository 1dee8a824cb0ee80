"""Tests of the front end: file-based valid/invalid/dump cases, diagnostics, CLI, round-trip
property and fuzz tests. A package, so its module names cannot clash with other test folders."""
