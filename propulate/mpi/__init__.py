"""MPI plumbing: layout, messaging, the relay of island news (dissemination), stops and failures (alarm)."""
