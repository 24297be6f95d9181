"""From a scenario and the user's flags to checked runs: the scenario model and its grid, plan-time checks (memory, outputs), the dry run's estimate."""
