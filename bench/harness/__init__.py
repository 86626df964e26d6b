"""The modules behind bench/run; cli.py describes the order of a session."""
