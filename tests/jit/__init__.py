"""Differential tests of the native backend against the reference evaluator and numpy. A
package, so its module names cannot clash with other test folders."""
