"""Golden files of the command line (issue 40): see harness.py."""
