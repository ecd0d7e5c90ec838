"""tfjit runtime: the TfjitLaunch op and what it needs at run time (no compiler)."""
