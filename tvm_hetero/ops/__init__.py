"""Custom operator forms: each one file with its compute, its constants and the names of its
blocks, imported both by preparation (which writes the operator) and by the rule that schedules
it, so that the two cannot drift apart."""
