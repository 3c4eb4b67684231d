"""Command-line entry points. Nothing below ``capstan.cli`` is imported by the core packages."""
