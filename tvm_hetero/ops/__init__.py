"""Custom operator forms that preparation writes: each one file with its compute, its constants
and the names of its blocks, so that preparation (which writes the operator) and the rule that
schedules it read them from one place (:mod:`.winograd`, :mod:`.conv2d_nchwc`)."""
