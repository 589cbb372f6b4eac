"""Small helpers every layer may use: units, files of the package, YAML, limits, exit codes."""
