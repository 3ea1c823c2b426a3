"""Stage 11, the command line: `deffcore <command>`, one module per subcommand (`main` runs it)."""
