"""The command line: `storebench` and its subcommands (run, show, report, compare, export, dataset, list)."""
